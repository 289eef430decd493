//! The crate's error type.

use std::path::PathBuf;

use medddpm_nifti::Affine;

/// Everything that can go wrong rendering or writing a picture.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RenderError {
    /// A mask is not on its volume's voxel grid.
    #[error(
        "{what}: the mask's grid differs from the volume's (volume dims {volume_dims:?}, mask dims {mask_dims:?}){detail}"
    )]
    GridMismatch {
        /// Which picture or row (its title).
        what: String,
        /// Voxel counts of the volume.
        volume_dims: [usize; 3],
        /// Voxel counts of the mask.
        mask_dims: [usize; 3],
        /// Empty, or `": affines differ ..."` when the counts agree but the affines do not.
        detail: String,
    },
    /// Nothing to draw: no rows, no frames, a volume without voxels, no finite loss value.
    #[error("nothing to render: {0}")]
    Empty(String),
    /// The operating system refused to create, write or rename a file.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file that was to be written (not the temporary name).
        path: PathBuf,
        /// Underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The PNG or GIF encoder failed.
    #[error("cannot encode the {format}: {message}")]
    Encode {
        /// `"PNG"` or `"GIF"`.
        format: &'static str,
        /// The encoder's message.
        message: String,
    },
    /// A window with `lo >= hi`, non-finite bounds, or percentiles outside 0-100.
    #[error("invalid window {lo}..{hi}: {reason}")]
    InvalidWindow {
        /// Lower bound as given.
        lo: f64,
        /// Upper bound as given.
        hi: f64,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The affine has a voxel axis without a direction (zero, non-finite or parallel columns).
    #[error("the affine has no orientation (zero, non-finite or parallel voxel axes): {affine:?}")]
    DegenerateAffine {
        /// The offending affine.
        affine: Box<Affine>,
    },
    /// The picture would be larger than the format or a sane memory budget allows.
    #[error("a picture of {width}x{height} pixels is too large ({limit})")]
    TooLarge {
        /// Width it would have.
        width: u64,
        /// Height it would have.
        height: u64,
        /// The limit exceeded.
        limit: &'static str,
    },
    /// Frames of one animation differ in size.
    #[error("frame {index} is {found:?} pixels but frame 0 is {expected:?}")]
    FrameSize {
        /// Index of the first frame of another size.
        index: usize,
        /// (width, height) of frame 0.
        expected: (u32, u32),
        /// (width, height) of frame `index`.
        found: (u32, u32),
    },
    /// An option out of range (a slice index beyond the volume, a zero scale factor...).
    #[error("invalid option: {0}")]
    InvalidOption(String),
    /// plotters failed to draw text or a chart.
    #[error("cannot draw the {what}: {message}")]
    Draw {
        /// What was being drawn.
        what: &'static str,
        /// plotters' message.
        message: String,
    },
}

/// `Result` with [`RenderError`].
pub type Result<T, E = RenderError> = std::result::Result<T, E>;
