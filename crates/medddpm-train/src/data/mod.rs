//! Training pairs (condition mask + image) read from the reference's folder layouts.
//!
//! Three layouts are understood (see [`DataSource`]): the reference whole-head layout (a mask
//! folder and an image folder paired by file name), the BraTS layout (one folder per modality
//! plus `seg/`, paired by case id) and built-in phantoms (generated on first use, then read as
//! a whole-head layout). Everything is validated when the data set is opened, so a bad folder
//! fails before any training step instead of hours into a run.
//!
//! Examples come out as plain `Vec<f32>` in the network's `(C, k, j, i)` order (the NIfTI
//! file order, see [`medddpm_nifti::Volume`]); turning them into tensors is the batcher's job.
//!
//! Modules: [`config`] (the `[data]` section and its layout-dependent defaults), `discover`
//! (finding and pairing files), [`dataset`] (the cached, indexable data set) and [`regrid`]
//! (grid policies, shared with sampling).

pub mod config;
pub mod dataset;
mod discover;
pub mod regrid;

pub use crate::error::DataError;
pub use config::{DataConfig, DataSource, GridPolicy};
pub use dataset::{Example, NiftiDataset, CACHE_LIMIT_BYTES};
pub use discover::{list_masks, nifti_stem, training_images, TrainingImage};
pub use regrid::{condition_of, load_condition, regrid_mask, to_mask_grid};

/// BraTS modalities in the channel order the reference stacks them: [t1, t1ce, t2, flair].
pub const BRATS_MODALITIES: [&str; 4] = ["t1", "t1ce", "t2", "flair"];

/// Names of `channels` image channels, for output file names: the BraTS modalities for 4,
/// `image` for 1, `ch0`, `ch1`, ... otherwise.
pub fn image_channel_names(channels: usize) -> Vec<String> {
    match channels {
        1 => vec!["image".to_string()],
        4 => BRATS_MODALITIES.iter().map(|m| m.to_string()).collect(),
        n => (0..n).map(|c| format!("ch{c}")).collect(),
    }
}
