//! The report's sections: what [`evaluate`](crate::evaluate) returns and `medddpm eval` writes
//! as JSON.

use serde::{Deserialize, Serialize};

use crate::memorisation::MemorisationSection;
use crate::mmd::MmdEstimator;
use crate::ssim::MsSsimOptions;

/// One synthetic image against the real image of the same mask.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairedRow {
    /// Mask name.
    pub mask: String,
    /// Synthetic image name.
    pub sample: String,
    /// Real image name.
    pub real: String,
    /// Voxels in the region (label != 0).
    pub region_voxels: u64,
    /// PSNR in dB over the region; `None` means infinite (identical in the region).
    pub psnr: Option<f64>,
    /// Mean SSIM of the windows centred in the region.
    pub ssim: f64,
    /// Mean absolute error over the region.
    pub mae: f64,
}

/// Means over all paired rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairedMeans {
    /// Mean PSNR; `None` when some pair is identical (the mean is then infinite).
    pub psnr: Option<f64>,
    /// Mean SSIM.
    pub ssim: f64,
    /// Mean MAE.
    pub mae: f64,
}

/// Paired fidelity metrics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairedSection {
    /// Which voxels the metrics cover.
    pub region: String,
    /// One row per (synthetic, real) pair sharing a mask.
    pub rows: Vec<PairedRow>,
    /// Means over `rows`; `None` when there are no pairs.
    pub mean: Option<PairedMeans>,
}

/// Diversity of the samples of one mask.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiversityRow {
    /// Mask name.
    pub mask: String,
    /// Synthetic samples of this mask.
    pub n_samples: usize,
    /// Mean MS-SSIM over all pairs of those samples (lower = more diverse).
    pub mean_pairwise_ms_ssim: f64,
}

/// Per-mask diversity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiversitySection {
    /// MS-SSIM settings used.
    pub ms_ssim: MsSsimOptions,
    /// Masks with at least two samples.
    pub rows: Vec<DiversityRow>,
}

/// Distribution distance between all real and all synthetic images.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MmdSection {
    /// Squared MMD of the feature vectors.
    pub value: f64,
    /// RBF bandwidth (median heuristic).
    pub sigma: f64,
    /// Estimator used (biased when a set has one element).
    pub estimator: MmdEstimator,
    /// Real images.
    pub n_real: usize,
    /// Synthetic images.
    pub n_synthetic: usize,
    /// What the feature vectors are.
    pub features: String,
}

/// The classifier's view of one label, learnt from the real images.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassSummary {
    /// Label.
    pub label: u32,
    /// Real voxels with this label.
    pub real_voxels: u64,
    /// Mean real intensity.
    pub real_mean: f64,
    /// Standard deviation of real intensities.
    pub real_std: f64,
    /// k-means centre.
    pub centre: f64,
}

/// One label of one image.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabelAdherence {
    /// Label.
    pub label: u32,
    /// Voxels of the image's mask with this label.
    pub voxels: u64,
    /// Mean intensity of the image there; `None` when the mask lacks the label.
    pub mean: Option<f64>,
    /// Standard deviation there; `None` when the mask lacks the label.
    pub std: Option<f64>,
    /// Mean of this label in the real image(s) of the image's own mask (its pair); `None`
    /// when that mask has no real image or the label is absent there.
    pub real_mean: Option<f64>,
    /// Dice of the intensity classification with the mask; `None` when both are empty.
    pub dice: Option<f64>,
}

/// Adherence of one image to its mask.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampleAdherence {
    /// Image name.
    pub name: String,
    /// Mask name.
    pub mask: String,
    /// Per label, ascending.
    pub labels: Vec<LabelAdherence>,
    /// Mean Dice over the labels other than 0 that have one; `None` if none has.
    pub mean_dice: Option<f64>,
}

/// Mask adherence of the synthetic images, with the real images as the ceiling.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdherenceSection {
    /// Classes of the intensity classifier fitted on the real images.
    pub classes: Vec<ClassSummary>,
    /// Its intensity thresholds, ascending.
    pub thresholds: Vec<f64>,
    /// Synthetic images.
    pub synthetic: Vec<SampleAdherence>,
    /// Real images: the Dice an intensity classifier reaches on real data.
    pub real: Vec<SampleAdherence>,
    /// Mean of the synthetic images' `mean_dice`.
    pub mean_dice_synthetic: Option<f64>,
    /// Mean of the real images' `mean_dice` (the ceiling).
    pub mean_dice_real: Option<f64>,
}

/// Everything `medddpm eval` reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalReport {
    /// Grid of all volumes.
    pub dims: [usize; 3],
    /// Intensity span used for PSNR and SSIM.
    pub data_range: f64,
    /// Masks given.
    pub n_masks: usize,
    /// Real images given.
    pub n_real: usize,
    /// Synthetic images given.
    pub n_synthetic: usize,
    /// Fidelity against the real image of the same mask.
    pub paired: PairedSection,
    /// Per-mask diversity.
    pub diversity: DiversitySection,
    /// Distribution distance; `None` without both real and synthetic images.
    pub mmd: Option<MmdSection>,
    /// Mask adherence; `None` without real images (nothing to fit the classifier on).
    pub adherence: Option<AdherenceSection>,
    /// Nearest training volumes of the synthetic ones; `None` unless a training set was
    /// given (absent from the JSON then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memorisation: Option<MemorisationSection>,
    /// Caveats for the reader.
    pub notes: Vec<String>,
}

impl EvalReport {
    /// A report of the memorisation check alone (no masks, so no paired, diversity, MMD or
    /// adherence sections: those stay empty).
    pub fn memorisation_only(dims: [usize; 3], memorisation: MemorisationSection) -> Self {
        Self {
            dims,
            data_range: memorisation.options.data_range,
            n_masks: 0,
            n_real: 0,
            n_synthetic: memorisation.n_synthetic,
            paired: PairedSection {
                region: String::new(),
                rows: Vec::new(),
                mean: None,
            },
            diversity: DiversitySection {
                ms_ssim: MsSsimOptions::default(),
                rows: Vec::new(),
            },
            mmd: None,
            adherence: None,
            memorisation: Some(memorisation),
            notes: vec![
                "no masks given: only the memorisation section (paired, diversity, MMD and \
                 adherence need masks)"
                    .into(),
            ],
        }
    }
}
