//! Synthetic data sets from a Med-DDPM model and a folder of masks (`medddpm synthesize`): a
//! deterministic work list of image/label pairs, split among processes, each pair written
//! atomically and then listed in `manifest.jsonl`, so that a killed run resumes where it
//! stopped; in the folders `medddpm train` reads or in nnU-Net v2's raw data set layout.
//!
//! A run: [`Synthesis::new`] checks what needs no network; the lead process calls
//! [`Synthesis::begin`] (lock, settings, merged manifest, leftovers removed), each process
//! [`run_shard`] over its [`Synthesis::pending`] pairs, and the lead [`Synthesis::finish`]
//! (merged manifest, `dataset.json`). Masks come through a [`MaskSource`], the augmentation
//! hook ([`Identity`] by default).
//!
//! Modules: [`work`] (the work list and seeds), [`layout`] (where files go, `dataset.json`),
//! [`manifest`] (records, parts, torn lines), [`settings`] (`synthesize.json` and the
//! checkpoint checksum), `files` (the file names beside a data set), [`hook`] (the augmentation hook), `synthesis` (the folder's life
//! cycle), `shard` (sampling and writing one process's pairs).
#![warn(missing_docs)]

mod error;
mod files;
pub mod hook;
pub mod layout;
pub mod manifest;
pub mod settings;
mod shard;
mod synthesis;
pub mod work;

pub use error::SynthError;
pub use hook::{ChosenMask, FnMaskSource, HookError, Identity, MaskSource};
pub use layout::{DatasetLayout, PairFiles};
pub use manifest::{PairRecord, MANIFEST_FILE};
pub use settings::{RunSettings, SETTINGS_FILE};
pub use shard::{run_shard, Progress, ShardSummary};
pub use synthesis::{FolderState, SynthOptions, Synthesis};
pub use work::{Pair, SourceMask, WorkList};

#[cfg(test)]
mod tests;
