//! Multi-scale SSIM (Wang, Simoncelli and Bovik 2003) in 3-D, and the pairwise diversity score
//! built on it.

use serde::{Deserialize, Serialize};

use crate::error::{check_data_range, check_dims, MetricsError, Result};

use super::map::{check_pair, constants, pair_terms, to_f64, Level};
use super::window::{too_small, GaussianWindow, DEFAULT_SIGMA};

/// Wang, Simoncelli and Bovik (2003) scale weights, finest scale first.
pub const MS_SSIM_WEIGHTS: [f64; 5] = [0.0448, 0.2856, 0.3001, 0.2363, 0.1333];

/// Multi-scale SSIM settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MsSsimOptions {
    /// Number of scales, 1 to 5. With fewer than 5 the first `scales` weights of
    /// [`MS_SSIM_WEIGHTS`] are used, rescaled to sum to 1.
    pub scales: usize,
    /// Window standard deviation in voxels (radius `ceil(2 sigma)`).
    pub sigma: f64,
}

impl Default for MsSsimOptions {
    fn default() -> Self {
        Self {
            scales: 5,
            sigma: DEFAULT_SIGMA,
        }
    }
}

impl MsSsimOptions {
    /// The per-scale exponents, finest first, summing to 1.
    pub fn weights(&self) -> Result<Vec<f64>> {
        if !(1..=MS_SSIM_WEIGHTS.len()).contains(&self.scales) {
            return Err(MetricsError::InvalidParameter {
                name: "scales",
                value: self.scales.to_string(),
                reason: "MS-SSIM takes 1 to 5 scales",
            });
        }
        let w = &MS_SSIM_WEIGHTS[..self.scales];
        let total: f64 = w.iter().sum();
        Ok(w.iter().map(|x| x / total).collect())
    }

    /// Checks that a volume of `dims` is large enough for every scale, so a caller can refuse
    /// early, before any work.
    pub fn check_dims(&self, dims: [usize; 3]) -> Result<()> {
        self.weights()?;
        let window = GaussianWindow::new(self.sigma)?;
        let mut d = dims;
        for scale in 1..=self.scales {
            if too_small(d, &window) {
                return Err(MetricsError::TooSmall {
                    dims,
                    scale_dims: d,
                    scale,
                    scales: self.scales,
                    window: window.size(),
                });
            }
            d = d.map(|n| n / 2);
        }
        Ok(())
    }
}

/// 2x2x2 average pooling; an odd trailing voxel along an axis is dropped (floor), as a
/// stride-2 `avg_pool` without padding does.
fn downsample(src: &[f64], dims: [usize; 3]) -> (Vec<f64>, [usize; 3]) {
    let [ni, nj, _] = dims;
    let od = dims.map(|n| n / 2);
    let [oi, oj, ok] = od;
    let mut out = Vec::with_capacity(oi * oj * ok);
    for k in 0..ok {
        for j in 0..oj {
            for i in 0..oi {
                let mut s = 0.0;
                for dk in 0..2 {
                    for dj in 0..2 {
                        let base = 2 * i + ni * (2 * j + dj + nj * (2 * k + dk));
                        s += src[base] + src[base + 1];
                    }
                }
                out.push(s / 8.0);
            }
        }
    }
    (out, od)
}

/// A volume's pyramid, built once and reused for every pair it takes part in.
struct Pyramid(Vec<Level>);

impl Pyramid {
    fn new(v: &[f32], dims: [usize; 3], scales: usize, window: &GaussianWindow) -> Self {
        let mut levels = Vec::with_capacity(scales);
        let mut data = to_f64(v);
        let mut d = dims;
        for s in 0..scales {
            let next = (s + 1 < scales).then(|| downsample(&data, d));
            levels.push(Level::new(data, d, window));
            if let Some((nd, ndims)) = next {
                data = nd;
                d = ndims;
            } else {
                break;
            }
        }
        Self(levels)
    }
}

/// `prod_{s < M} relu(cs_s)^w_s * relu(ssim_M)^w_M`.
fn combine(
    x: &Pyramid,
    y: &Pyramid,
    weights: &[f64],
    window: &GaussianWindow,
    c1: f64,
    c2: f64,
) -> f64 {
    let last = weights.len() - 1;
    let mut result = 1.0;
    for (s, (lx, ly)) in x.0.iter().zip(&y.0).enumerate() {
        let (mut sum, mut n) = (0.0f64, 0usize);
        pair_terms(lx, ly, window, c1, c2, |l, c| {
            sum += if s == last { l * c } else { c };
            n += 1;
        });
        let term = sum / n as f64;
        result *= term.max(0.0).powf(weights[s]);
    }
    result
}

/// Multi-scale SSIM (Wang, Simoncelli and Bovik 2003) in 3-D with the default 5 scales.
///
/// See [`ms_ssim3d_with`] for the conventions. A 5-scale run with the 7-voxel window needs at
/// least 112 voxels along every axis (128^3 works).
pub fn ms_ssim3d(a: &[f32], b: &[f32], dims: [usize; 3], data_range: f64) -> Result<f64> {
    ms_ssim3d_with(a, b, dims, data_range, &MsSsimOptions::default())
}

/// Multi-scale SSIM with chosen scales and window.
///
/// At each of the first `scales - 1` scales the mean contrast-structure term is used; at the
/// coarsest scale the mean full SSIM (luminance times contrast-structure), as pytorch-msssim and
/// torchmetrics do. Scales are separated by 2x2x2 average pooling. A negative mean term is
/// clamped to 0 before raising to its weight (pytorch-msssim's relu), so very dissimilar volumes
/// score 0 rather than NaN.
pub fn ms_ssim3d_with(
    a: &[f32],
    b: &[f32],
    dims: [usize; 3],
    data_range: f64,
    opts: &MsSsimOptions,
) -> Result<f64> {
    check_pair(a, b, dims, data_range)?;
    opts.check_dims(dims)?;
    let weights = opts.weights()?;
    let window = GaussianWindow::new(opts.sigma)?;
    let (c1, c2) = constants(data_range);
    let x = Pyramid::new(a, dims, opts.scales, &window);
    let y = Pyramid::new(b, dims, opts.scales, &window);
    Ok(combine(&x, &y, &weights, &window, c1, c2))
}

/// Mean MS-SSIM over all unordered pairs of `volumes` (samples generated for one mask): a
/// diversity score, lower meaning more diverse.
///
/// Each volume's pyramid is built once (about 3 f64 copies of the volume, ~50 MB for 128^3),
/// so `n` samples cost `n(n-1)/2` blurs of the cross products rather than 5 blurs per pair.
pub fn mean_pairwise_ms_ssim(
    volumes: &[&[f32]],
    dims: [usize; 3],
    data_range: f64,
    opts: &MsSsimOptions,
) -> Result<f64> {
    if volumes.len() < 2 {
        return Err(MetricsError::TooFew {
            what: "volumes for pairwise MS-SSIM".into(),
            needed: 2,
            got: volumes.len(),
        });
    }
    for (n, v) in volumes.iter().enumerate() {
        check_dims(&format!("volume {n}"), dims, v.len())?;
    }
    check_data_range(data_range)?;
    opts.check_dims(dims)?;
    let weights = opts.weights()?;
    let window = GaussianWindow::new(opts.sigma)?;
    let (c1, c2) = constants(data_range);
    let pyramids: Vec<Pyramid> = volumes
        .iter()
        .map(|v| Pyramid::new(v, dims, opts.scales, &window))
        .collect();
    let (mut sum, mut pairs) = (0.0, 0usize);
    for (n, x) in pyramids.iter().enumerate() {
        for y in &pyramids[n + 1..] {
            sum += combine(x, y, &weights, &window, c1, c2);
            pairs += 1;
        }
    }
    Ok(sum / pairs as f64)
}
