//! Label maps to the one-hot condition channels Med-DDPM is trained on, and new masks drawn
//! from given ones ([`augment`]).
//!
//! A [`LabelScheme`] says which label values switch each channel on and which values the
//! voxels may carry at all; [`LabelScheme::encode`] turns a mask [`Volume`] into a
//! channel-major `(C, nk, nj, ni)` buffer and refuses masks with labels the scheme does not
//! know, instead of silently treating them as background as the reference does.
//!
//! # Example
//! ```no_run
//! use medddpm_mask::LabelScheme;
//! use medddpm_nifti::Volume;
//! use std::path::Path;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let path = Path::new("mask/sample_3.nii.gz");
//! let mask = Volume::read(path)?;
//! let scheme = LabelScheme::by_name("whole-head")?;
//! let cond = scheme.encode(&mask, path)?; // 2 x 128^3 values in {-1, +1}
//! assert_eq!(cond.len(), scheme.channels.len() * mask.voxel_count());
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]

pub mod augment;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use medddpm_nifti::{ensure_same_grid, NiftiError, Volume};
use serde::{Deserialize, Serialize};

/// What can go wrong turning a mask into condition channels.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MaskError {
    /// A voxel holds a value that is not an integer label the scheme knows. Training on it
    /// would silently treat it as background, so it is refused.
    #[error(
        "{path}: label value {value} ({count} voxels) is not allowed by label scheme '{scheme}' \
         (allowed labels: {allowed:?})"
    )]
    UnknownLabel {
        /// Mask file.
        path: PathBuf,
        /// First offending value in file order.
        value: f32,
        /// How many voxels hold exactly that value.
        count: usize,
        /// Scheme name.
        scheme: String,
        /// Labels the scheme accepts.
        allowed: Vec<i64>,
    },
    /// No preset has this name.
    #[error("unknown label scheme '{name}' (presets: whole-head, brats)")]
    UnknownScheme {
        /// Name asked for.
        name: String,
    },
    /// A scheme (e.g. from a config file) cannot encode anything sensible.
    #[error("label scheme '{name}' is invalid: {reason}")]
    InvalidScheme {
        /// Scheme name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// Mask and image are not on one grid, or another NIfTI-level problem.
    #[error(transparent)]
    Nifti(#[from] NiftiError),
}

/// One condition channel: on where the voxel's label is any of `labels`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelSpec {
    /// Human-readable name, for logs and inspect output.
    pub name: String,
    /// Labels that switch this channel on.
    pub labels: Vec<i64>,
}

/// How a label map becomes one-hot condition channels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabelScheme {
    /// Name shown in errors.
    pub name: String,
    /// Channels in network order.
    pub channels: Vec<ChannelSpec>,
    /// Value of a channel that is on.
    pub on_value: f32,
    /// Value of a channel that is off.
    pub off_value: f32,
    /// Labels allowed in a mask even though they switch no channel on (e.g. background 0).
    #[serde(default)]
    pub known_labels: Vec<i64>,
}

fn channel(name: &str, labels: &[i64]) -> ChannelSpec {
    ChannelSpec {
        name: name.to_string(),
        labels: labels.to_vec(),
    }
}

impl LabelScheme {
    /// The released whole-head model's encoding: label 1 ("BRAINAREA" in the reference, in
    /// fact the whole head) and label 2 (tumour) as two channels in {-1, +1}. Tumour voxels are
    /// not also head, so background = (-1, -1), head = (+1, -1), tumour = (-1, +1).
    pub fn whole_head() -> Self {
        Self {
            name: "whole-head".into(),
            channels: vec![channel("head", &[1]), channel("tumour", &[2])],
            on_value: 1.0,
            off_value: -1.0,
            known_labels: vec![0, 1, 2],
        }
    }

    /// The released BraTS model's encoding: labels 1 (necrotic core), 2 (oedema), 3 (enhancing,
    /// relabelled from BraTS's 4 by preprocessing) and 4 (brain) as four channels in {0, 1}
    /// (that model has no `x * 2 - 1` on its mask).
    pub fn brats() -> Self {
        Self {
            name: "brats".into(),
            channels: vec![
                channel("necrotic-core", &[1]),
                channel("oedema", &[2]),
                channel("enhancing", &[3]),
                channel("brain", &[4]),
            ],
            on_value: 1.0,
            off_value: 0.0,
            known_labels: vec![0, 1, 2, 3, 4],
        }
    }

    /// A preset by its config name: `"whole-head"` or `"brats"`.
    pub fn by_name(name: &str) -> Result<Self, MaskError> {
        match name {
            "whole-head" => Ok(Self::whole_head()),
            "brats" => Ok(Self::brats()),
            _ => Err(MaskError::UnknownScheme { name: name.into() }),
        }
    }

    /// Number of condition channels.
    pub fn num_channels(&self) -> usize {
        self.channels.len()
    }

    /// Every label a mask may hold: known labels and channel labels, sorted.
    pub fn allowed_labels(&self) -> Vec<i64> {
        let mut v: Vec<i64> = self
            .known_labels
            .iter()
            .chain(self.channels.iter().flat_map(|c| c.labels.iter()))
            .copied()
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Checks a scheme read from a config: at least one channel, each with a label, and
    /// distinct on/off values (otherwise the condition carries no information).
    pub fn validate(&self) -> Result<(), MaskError> {
        let bad = |reason: &str| {
            Err(MaskError::InvalidScheme {
                name: self.name.clone(),
                reason: reason.into(),
            })
        };
        if self.channels.is_empty() {
            return bad("it has no channels");
        }
        if let Some(c) = self.channels.iter().find(|c| c.labels.is_empty()) {
            return bad(&format!("channel '{}' has no labels", c.name));
        }
        if self.on_value == self.off_value
            || !self.on_value.is_finite()
            || !self.off_value.is_finite()
        {
            return bad("on_value and off_value must be finite and differ");
        }
        Ok(())
    }

    /// One-hot channels of `mask`, channel-major: for each channel, `mask`'s voxels in file
    /// order, which is the network's `(k, j, i)` order, so the result is a C-order
    /// `(C, nk, nj, ni)` array. `path` is only used in error messages.
    pub fn encode(&self, mask: &Volume, path: &Path) -> Result<Vec<f32>, MaskError> {
        self.validate()?;
        // label -> channels it switches on; allowed labels with no channel map to [].
        let mut lut: HashMap<i64, Vec<usize>> = self
            .allowed_labels()
            .into_iter()
            .map(|l| (l, Vec::new()))
            .collect();
        for (c, spec) in self.channels.iter().enumerate() {
            for l in &spec.labels {
                lut.entry(*l).or_default().push(c);
            }
        }
        let n = mask.voxel_count();
        let mut out = vec![self.off_value; n * self.channels.len()];
        // Masks hold long runs of one label: remember the last lookup.
        let mut last: Option<(u32, &[usize])> = None;
        for (idx, &v) in mask.data().iter().enumerate() {
            let chans = match last {
                Some((bits, chans)) if bits == v.to_bits() => chans,
                _ => {
                    let Some(chans) = label_of(v).and_then(|l| lut.get(&l)) else {
                        return Err(self.unknown_label(mask, path, v));
                    };
                    last = Some((v.to_bits(), chans.as_slice()));
                    chans.as_slice()
                }
            };
            for &c in chans {
                out[c * n + idx] = self.on_value;
            }
        }
        Ok(out)
    }

    /// [`LabelScheme::encode`] after checking that the mask lies on the image's grid, so a
    /// mismatched pair fails with both file names instead of training on misaligned data.
    pub fn encode_checked(
        &self,
        mask: &Volume,
        mask_path: &Path,
        image: &Volume,
        image_path: &Path,
    ) -> Result<Vec<f32>, MaskError> {
        ensure_same_grid(mask_path, mask, image_path, image)?;
        self.encode(mask, mask_path)
    }

    fn unknown_label(&self, mask: &Volume, path: &Path, value: f32) -> MaskError {
        let same = |x: &f32| x.to_bits() == value.to_bits();
        MaskError::UnknownLabel {
            path: path.to_path_buf(),
            value,
            count: mask.data().iter().filter(|x| same(x)).count(),
            scheme: self.name.clone(),
            allowed: self.allowed_labels(),
        }
    }
}

/// The integer label a voxel value stands for, if it is one.
fn label_of(v: f32) -> Option<i64> {
    (v.is_finite() && v.fract() == 0.0 && v.abs() < 9.0e15).then_some(v as i64)
}
