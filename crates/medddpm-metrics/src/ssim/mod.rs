//! 3-D SSIM and multi-scale SSIM with a separable Gaussian window.
//!
//! Conventions (the same as pytorch-msssim / torchmetrics, written out so numbers can be compared):
//! - window: Gaussian of standard deviation `sigma` (1.5 by default), truncated at radius
//!   `ceil(2 sigma)` (3 voxels, i.e. 7 taps, for sigma 1.5), normalised to sum 1 and applied
//!   separably along i, j and k;
//! - boundary: "valid" only. The SSIM map covers the voxels whose whole window lies inside the
//!   volume, so a volume of `n` voxels along an axis gives `n - 2 radius` map voxels; no padding
//!   is invented;
//! - `C1 = (0.01 L)^2`, `C2 = (0.03 L)^2` with `L = data_range`; local variances and covariance
//!   are the window-weighted population moments (no `N / (N - 1)` correction).
//!
//! - `window`: the Gaussian window and the separable blur;
//! - `map`: single-scale SSIM ([`ssim3d`], [`SsimMap`]);
//! - `prepared`: one volume's blurred statistics, kept for comparing it with many others;
//! - `multiscale`: MS-SSIM ([`ms_ssim3d`]) and the pairwise diversity score
//!   ([`mean_pairwise_ms_ssim`]).

mod map;
mod multiscale;
mod prepared;
mod window;

pub use map::{ssim3d, ssim3d_map, ssim3d_with, SsimMap};
pub use multiscale::{
    mean_pairwise_ms_ssim, ms_ssim3d, ms_ssim3d_with, MsSsimOptions, MS_SSIM_WEIGHTS,
};
pub(crate) use prepared::SsimVolume;
pub(crate) use window::check_fits;
pub use window::{GaussianWindow, DEFAULT_SIGMA};
