//! Metrics for `medddpm eval`: judging generated MRI volumes against real ones without Python,
//! a pretrained network or a download.
//!
//! Volumes are `f32` slices in file order (`i + ni * (j + nj * k)`) with dims `[ni, nj, nk]`;
//! label maps are `u32` slices on the same grid. Every sum is accumulated in `f64`, and bad
//! input (length or grid mismatches, empty masks, volumes too small for the window) is a
//! [`MetricsError`], never a panic.
//!
//! - fidelity: [`mae`], [`mse`], [`psnr`], [`ssim3d`] (Gaussian window, valid region);
//! - diversity: [`ms_ssim3d`], [`mean_pairwise_ms_ssim`];
//! - distribution: [`mmd2_unbiased`] on [`volume_features`];
//! - mask adherence: [`label_stats`], [`TissueClassifier`], [`dice`], [`per_label_dice`];
//! - is the synthetic data new: [`nearest_training`] -> [`MemorisationSection`];
//! - everything at once: [`evaluate`] -> [`EvalReport`] (serde, [`EvalReport::to_markdown`]).
#![warn(missing_docs)]

mod adherence;
mod error;
mod memorisation;
mod mmd;
mod pixel;
mod report;
mod ssim;

pub use adherence::{
    dice, label_stats, per_label_dice, per_label_dice_for, LabelStats, TissueClass,
    TissueClassifier,
};
pub use error::{MetricsError, Result};
pub use memorisation::{
    nearest_training, MemorisationOptions, MemorisationProgress, MemorisationSection,
    MemorisationStage, NamedVolume, NearestRow, Neighbour, Spread, VolumeSource,
};
pub use mmd::{
    median_heuristic, mmd2_biased, mmd2_unbiased, volume_features, volume_features_with,
    FeatureOptions, Mmd, MmdEstimator,
};
pub use pixel::{mae, mse, psnr, psnr_from_mse};
pub use report::{
    evaluate, AdherenceSection, ClassSummary, DiversityRow, DiversitySection, EvalInput,
    EvalReport, LabelAdherence, MmdSection, NamedImage, NamedLabels, PairedMeans, PairedRow,
    PairedSection, SampleAdherence,
};
pub use ssim::{
    mean_pairwise_ms_ssim, ms_ssim3d, ms_ssim3d_with, ssim3d, ssim3d_map, ssim3d_with,
    GaussianWindow, MsSsimOptions, SsimMap, DEFAULT_SIGMA, MS_SSIM_WEIGHTS,
};
