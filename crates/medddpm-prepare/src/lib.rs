//! Raw scans to the folders `medddpm train` reads (`medddpm prepare`).
//!
//! - [`brats`]: BraTS 2021 cases (`<case>/<case>_{t1,t1ce,t2,flair,seg}.nii.gz`) cropped to
//!   192x192x144, scaled to [-1, 1], tumour labels renumbered and the brain label added, as
//!   the reference's preprocessing does.
//! - [`whole_head`]: image/mask pairs resampled to the model grid, labels checked.
//! - [`head_mask`]: head (and brain) label maps from a T1 by thresholds and morphology.
//! - [`real_demo`]: a small labelled set from the MNI152 and Colin27 templates, with
//!   augmented copies.
//!
//! Every command checks its outputs before starting (nothing is overwritten unless asked),
//! skips a bad case with its reason instead of stopping, and writes `prepare-report.json`.
//!
//! ```no_run
//! use medddpm_prepare::brats::{prepare_brats, BratsConfig};
//! use std::path::Path;
//!
//! let cases = Path::new("selected_samples.csv");
//! let report = prepare_brats(
//!     Path::new("BraTS2021_raw"),
//!     Path::new("data/brats"),
//!     Some(cases),
//!     &BratsConfig::default(),
//!     &mut medddpm_prepare::Silent,
//! )?;
//! println!("{}", report.summary());
//! # Ok::<(), medddpm_prepare::PrepareError>(())
//! ```
#![warn(missing_docs)]

pub mod brats;
mod error;
mod files;
pub mod head_mask;
pub mod morphology;
pub mod real_demo;
mod report;
pub mod resample;
mod runner;
pub mod whole_head;

pub use error::{CaseProblem, PrepareError};
pub use files::nifti_stem;
pub use report::{CaseDetails, Report, Skipped, REPORT_FILE};
pub use runner::{Progress, Silent};
