//! The Gaussian window and the separable "valid" blur every SSIM statistic goes through.

use crate::error::{MetricsError, Result};

/// Standard deviation of the default window, in voxels.
pub const DEFAULT_SIGMA: f64 = 1.5;

/// A normalised, truncated 1-D Gaussian, used along each axis in turn.
#[derive(Debug, Clone, PartialEq)]
pub struct GaussianWindow {
    sigma: f64,
    taps: Vec<f64>,
}

impl GaussianWindow {
    /// Window of standard deviation `sigma` voxels, truncated at radius `ceil(2 sigma)`.
    pub fn new(sigma: f64) -> Result<Self> {
        if !(sigma.is_finite() && sigma > 0.0 && sigma <= 64.0) {
            return Err(MetricsError::InvalidParameter {
                name: "sigma",
                value: sigma.to_string(),
                reason: "window sigma must be in (0, 64] voxels",
            });
        }
        // The small tolerance keeps sigma 1.5 at radius 3 despite rounding in callers' values.
        let radius = ((2.0 * sigma) - 1e-9).ceil().max(1.0) as usize;
        let mut taps: Vec<f64> = (0..=2 * radius)
            .map(|t| {
                let x = t as f64 - radius as f64;
                (-x * x / (2.0 * sigma * sigma)).exp()
            })
            .collect();
        let total: f64 = taps.iter().sum();
        taps.iter_mut().for_each(|w| *w /= total);
        Ok(Self { sigma, taps })
    }

    /// Standard deviation in voxels.
    pub fn sigma(&self) -> f64 {
        self.sigma
    }

    /// Voxels on each side of the centre.
    pub fn radius(&self) -> usize {
        self.taps.len() / 2
    }

    /// Width in voxels, `2 radius + 1`.
    pub fn size(&self) -> usize {
        self.taps.len()
    }

    /// The normalised 1-D weights, centre in the middle.
    pub fn taps(&self) -> &[f64] {
        &self.taps
    }
}

impl Default for GaussianWindow {
    fn default() -> Self {
        Self::new(DEFAULT_SIGMA).expect("the default sigma is valid")
    }
}

/// "Valid" correlation with `taps` along one axis: that axis shrinks by `taps.len() - 1`.
fn conv_axis(src: &[f64], dims: [usize; 3], axis: usize, taps: &[f64]) -> (Vec<f64>, [usize; 3]) {
    let [ni, nj, _] = dims;
    let mut od = dims;
    od[axis] -= taps.len() - 1;
    let [oi, oj, ok] = od;
    let mut out = vec![0.0f64; oi * oj * ok];
    match axis {
        0 => {
            for k in 0..ok {
                for j in 0..oj {
                    let s = &src[ni * (j + nj * k)..][..ni];
                    let o = &mut out[oi * (j + oj * k)..][..oi];
                    for (i, v) in o.iter_mut().enumerate() {
                        *v = taps.iter().zip(&s[i..]).map(|(w, x)| w * x).sum();
                    }
                }
            }
        }
        1 => {
            for k in 0..ok {
                for jo in 0..oj {
                    let o = &mut out[oi * (jo + oj * k)..][..oi];
                    for (t, &w) in taps.iter().enumerate() {
                        let s = &src[ni * (jo + t + nj * k)..][..ni];
                        o.iter_mut().zip(s).for_each(|(v, x)| *v += w * x);
                    }
                }
            }
        }
        _ => {
            let plane = ni * nj;
            for ko in 0..ok {
                let o = &mut out[plane * ko..][..plane];
                for (t, &w) in taps.iter().enumerate() {
                    let s = &src[plane * (ko + t)..][..plane];
                    o.iter_mut().zip(s).for_each(|(v, x)| *v += w * x);
                }
            }
        }
    }
    (out, od)
}

/// Separable 3-D Gaussian blur over the valid region.
pub(super) fn blur(
    src: &[f64],
    dims: [usize; 3],
    window: &GaussianWindow,
) -> (Vec<f64>, [usize; 3]) {
    let (a, d) = conv_axis(src, dims, 0, window.taps());
    let (b, d) = conv_axis(&a, d, 1, window.taps());
    conv_axis(&b, d, 2, window.taps())
}

pub(super) fn too_small(dims: [usize; 3], window: &GaussianWindow) -> bool {
    dims.iter().any(|&d| d < window.size())
}

/// Refuses a single-scale comparison (an SSIM map, a prepared volume, the memorisation check)
/// of volumes of `dims` smaller than `window` along any axis.
pub(crate) fn check_fits(dims: [usize; 3], window: &GaussianWindow) -> Result<()> {
    if too_small(dims, window) {
        return Err(MetricsError::TooSmall {
            dims,
            scale_dims: dims,
            scale: 1,
            scales: 1,
            window: window.size(),
        });
    }
    Ok(())
}
