//! Why a mask could not be augmented. The augmentation never sees a file name: callers wrap
//! these errors with the mask's path.

use std::fmt;

use medddpm_nifti::{Affine, NiftiError};

/// What can go wrong augmenting a mask.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AugmentError {
    /// A setting of [`super::AugmentConfig`] is out of range.
    #[error("augmentation setting `{field}` is invalid: {reason}")]
    InvalidConfig {
        /// The setting's name.
        field: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// The [`super::TumourLabels`] given cannot work.
    #[error("tumour labels are invalid: {reason}")]
    InvalidLabels {
        /// What is wrong.
        reason: String,
    },
    /// A voxel holds a value that is not an integer, so the volume is no label map.
    #[error("not a label map: value {value} ({count} voxels) is not an integer label")]
    NotALabelMap {
        /// First such value in file order.
        value: f32,
        /// How many voxels hold exactly that value.
        count: usize,
    },
    /// The affine has no usable voxel axes, so left and right (and rotations in mm) are
    /// undefined.
    #[error("the mask's affine is degenerate ({affine:?}): its voxel axes do not span space")]
    DegenerateAffine {
        /// The affine (boxed: it is 16 numbers).
        affine: Box<Affine>,
    },
    /// Every draw of a stage moved the tumour off the grid, out of the brain, or lost it.
    #[error(
        "no {stage} fitted in {tries} draws ({off_grid} put tumour voxels off the grid, \
         {outside_brain} outside the brain, {vanished} lost the tumour); narrow the ranges or \
         raise max_tries"
    )]
    NoFit {
        /// Which stage gave up.
        stage: Stage,
        /// Draws tried.
        tries: u32,
        /// Draws that put a tumour voxel beyond the grid's edge.
        off_grid: u32,
        /// Draws that put a tumour voxel on background.
        outside_brain: u32,
        /// Draws that left no tumour voxel.
        vanished: u32,
    },
    /// The augmented mask failed [`super::check_mask`].
    #[error("the augmented mask failed its check: {0}")]
    Check(#[from] MaskProblem),
    /// A NIfTI-level problem (a volume of the wrong size).
    #[error(transparent)]
    Nifti(#[from] NiftiError),
}

/// The two stages of an augmentation, each retried on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Flip, rotation and scaling of the whole mask.
    Geometry,
    /// Moving and scaling the tumour inside the brain.
    Tumour,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::Geometry => "rotation and scaling",
            Stage::Tumour => "tumour move",
        })
    }
}

/// Why an augmented mask is not a valid variant of its original.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum MaskProblem {
    /// Dimensions or affine differ from the original's.
    #[error("its grid differs from the original's ({detail})")]
    GridChanged {
        /// Which part differs.
        detail: String,
    },
    /// A voxel holds a non-integer value.
    #[error("value {value} is not an integer label")]
    NotALabel {
        /// The value.
        value: f32,
    },
    /// A label the original does not have.
    #[error("label {label} ({voxels} voxels) is not in the original (labels {original:?})")]
    NewLabel {
        /// The label.
        label: i64,
        /// How many voxels hold it.
        voxels: usize,
        /// The original's labels.
        original: Vec<i64>,
    },
    /// Only background is left.
    #[error("it holds no labelled voxel")]
    Empty,
    /// The original has a tumour, the variant none.
    #[error("the original has a tumour but the augmented mask has none")]
    TumourLost,
    /// Tumour voxels where the brain it was placed in has background.
    #[error("{voxels} tumour voxels lie outside the brain (the first at voxel {first:?})")]
    TumourOutsideBrain {
        /// How many.
        voxels: usize,
        /// The first in file order, as (i, j, k).
        first: [usize; 3],
    },
}
