//! What [`evaluate`](crate::evaluate) takes: label maps and images on one grid, with the
//! metric options.

use serde::{Deserialize, Serialize};

use crate::mmd::FeatureOptions;
use crate::ssim::MsSsimOptions;

/// An integer label map (NIfTI float labels rounded by the caller).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NamedLabels {
    /// Name shown in the report (e.g. the file stem).
    pub name: String,
    /// Labels in file order, `i + ni * (j + nj * k)`.
    pub labels: Vec<u32>,
}

/// An image and the mask it belongs to (real) or was generated from (synthetic).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NamedImage {
    /// Name shown in the report.
    pub name: String,
    /// Index into [`EvalInput::masks`].
    pub mask_index: usize,
    /// Intensities in file order, normalised like the generated ones.
    pub data: Vec<f32>,
}

/// Everything [`evaluate`](crate::evaluate) needs, all on one grid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalInput {
    /// Grid shared by every mask and image.
    pub dims: [usize; 3],
    /// Span of the intensities for PSNR/SSIM: 2.0 for [-1, 1].
    pub data_range: f64,
    /// Label maps.
    pub masks: Vec<NamedLabels>,
    /// Real images.
    pub real: Vec<NamedImage>,
    /// Generated images.
    pub synthetic: Vec<NamedImage>,
    /// Scales and window for the diversity score.
    pub ms_ssim: MsSsimOptions,
    /// Histogram features for MMD.
    pub features: FeatureOptions,
}

impl Default for EvalInput {
    /// Empty sets on a `[0, 0, 0]` grid with data range 2.0 and default options.
    fn default() -> Self {
        Self {
            dims: [0; 3],
            data_range: 2.0,
            masks: Vec::new(),
            real: Vec::new(),
            synthetic: Vec::new(),
            ms_ssim: MsSsimOptions::default(),
            features: FeatureOptions::default(),
        }
    }
}
