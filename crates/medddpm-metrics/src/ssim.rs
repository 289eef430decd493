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

use serde::{Deserialize, Serialize};

use crate::error::{check_data_range, check_dims, check_len, MetricsError, Result};

const K1: f64 = 0.01;
const K2: f64 = 0.03;

/// Standard deviation of the default window, in voxels.
pub const DEFAULT_SIGMA: f64 = 1.5;

/// Wang, Simoncelli and Bovik (2003) scale weights, finest scale first.
pub const MS_SSIM_WEIGHTS: [f64; 5] = [0.0448, 0.2856, 0.3001, 0.2363, 0.1333];

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
fn blur(src: &[f64], dims: [usize; 3], window: &GaussianWindow) -> (Vec<f64>, [usize; 3]) {
    let (a, d) = conv_axis(src, dims, 0, window.taps());
    let (b, d) = conv_axis(&a, d, 1, window.taps());
    conv_axis(&b, d, 2, window.taps())
}

fn too_small(dims: [usize; 3], window: &GaussianWindow) -> bool {
    dims.iter().any(|&d| d < window.size())
}

/// One pyramid level of one volume with the statistics that do not depend on the other volume,
/// so pairwise MS-SSIM blurs each sample's own moments once.
struct Level {
    dims: [usize; 3],
    data: Vec<f64>,
    mu: Vec<f64>,
    sq: Vec<f64>,
}

impl Level {
    fn new(data: Vec<f64>, dims: [usize; 3], window: &GaussianWindow) -> Self {
        let (mu, _) = blur(&data, dims, window);
        let squares: Vec<f64> = data.iter().map(|x| x * x).collect();
        let (sq, _) = blur(&squares, dims, window);
        Self { dims, data, mu, sq }
    }
}

/// Calls `f(luminance, contrast_structure)` for every valid voxel of a pair of levels, in map
/// order, and returns the map dims; no map is stored unless the caller keeps one.
fn pair_terms(
    x: &Level,
    y: &Level,
    window: &GaussianWindow,
    c1: f64,
    c2: f64,
    mut f: impl FnMut(f64, f64),
) -> [usize; 3] {
    let products: Vec<f64> = x.data.iter().zip(&y.data).map(|(a, b)| a * b).collect();
    let (xy, md) = blur(&products, x.dims, window);
    let moments = x.mu.iter().zip(&y.mu).zip(x.sq.iter().zip(&y.sq)).zip(&xy);
    for (((&mx, &my), (&ex2, &ey2)), &exy) in moments {
        let sxx = ex2 - mx * mx;
        let syy = ey2 - my * my;
        let sxy = exy - mx * my;
        let l = (2.0 * mx * my + c1) / (mx * mx + my * my + c1);
        let c = (2.0 * sxy + c2) / (sxx + syy + c2);
        f(l, c);
    }
    md
}

fn to_f64(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

fn constants(data_range: f64) -> (f64, f64) {
    ((K1 * data_range).powi(2), (K2 * data_range).powi(2))
}

/// The local SSIM values over the valid region of a volume.
///
/// Map voxel `(i, j, k)` is the window centred on volume voxel `(i + offset, j + offset,
/// k + offset)`, `offset` being the window radius. Fields are private so the map always matches
/// its dims (masked means index it without checks).
#[derive(Debug, Clone, PartialEq)]
pub struct SsimMap {
    volume_dims: [usize; 3],
    dims: [usize; 3],
    offset: usize,
    values: Vec<f64>,
}

impl SsimMap {
    /// Dims of the compared volumes.
    pub fn volume_dims(&self) -> [usize; 3] {
        self.volume_dims
    }

    /// Dims of the map: `volume_dims - 2 * offset` on each axis.
    pub fn dims(&self) -> [usize; 3] {
        self.dims
    }

    /// Volume voxels between the volume edge and the first map voxel (the window radius).
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// SSIM values, i fastest.
    pub fn values(&self) -> &[f64] {
        &self.values
    }

    /// Mean of the map over the window centres where `mask` (on the volume grid) is true; all
    /// map voxels when `None`. Errors when no window centre falls inside the mask.
    pub fn masked_mean(&self, mask: Option<&[bool]>) -> Result<f64> {
        let Some(mask) = mask else {
            return Ok(self.values.iter().sum::<f64>() / self.values.len() as f64);
        };
        let [vi, vj, _] = self.volume_dims;
        check_len("mask", vi * vj * self.volume_dims[2], mask.len())?;
        let [mi, mj, mk] = self.dims;
        let o = self.offset;
        let (mut sum, mut n) = (0.0f64, 0usize);
        for k in 0..mk {
            for j in 0..mj {
                let row = &mask[o + vi * (j + o + vj * (k + o))..][..mi];
                let vals = &self.values[mi * (j + mj * k)..][..mi];
                for (&keep, &s) in row.iter().zip(vals) {
                    if keep {
                        sum += s;
                        n += 1;
                    }
                }
            }
        }
        if n == 0 {
            return Err(MetricsError::EmptyMask {
                what: "mask (no voxel at least one window radius inside the volume)".into(),
            });
        }
        Ok(sum / n as f64)
    }
}

fn check_pair(a: &[f32], b: &[f32], dims: [usize; 3], data_range: f64) -> Result<()> {
    check_dims("first volume", dims, a.len())?;
    check_len("second volume", a.len(), b.len())?;
    check_data_range(data_range)
}

/// The 3-D SSIM map of `a` against `b` (valid region only, see the module docs).
pub fn ssim3d_map(
    a: &[f32],
    b: &[f32],
    dims: [usize; 3],
    data_range: f64,
    window: &GaussianWindow,
) -> Result<SsimMap> {
    check_pair(a, b, dims, data_range)?;
    if too_small(dims, window) {
        return Err(MetricsError::TooSmall {
            dims,
            scale_dims: dims,
            scale: 1,
            scales: 1,
            window: window.size(),
        });
    }
    let (c1, c2) = constants(data_range);
    let x = Level::new(to_f64(a), dims, window);
    let y = Level::new(to_f64(b), dims, window);
    let mut values = Vec::with_capacity(x.mu.len());
    let md = pair_terms(&x, &y, window, c1, c2, |l, c| values.push(l * c));
    Ok(SsimMap {
        volume_dims: dims,
        dims: md,
        offset: window.radius(),
        values,
    })
}

/// Mean 3-D SSIM (default window, sigma 1.5) over the window centres inside `mask`.
///
/// Symmetric in `a` and `b`; 1 for identical volumes.
pub fn ssim3d(
    a: &[f32],
    b: &[f32],
    dims: [usize; 3],
    mask: Option<&[bool]>,
    data_range: f64,
) -> Result<f64> {
    ssim3d_with(a, b, dims, mask, data_range, &GaussianWindow::default())
}

/// [`ssim3d`] with a chosen window.
pub fn ssim3d_with(
    a: &[f32],
    b: &[f32],
    dims: [usize; 3],
    mask: Option<&[bool]>,
    data_range: f64,
    window: &GaussianWindow,
) -> Result<f64> {
    if let Some(m) = mask {
        check_len("mask", a.len(), m.len())?;
    }
    ssim3d_map(a, b, dims, data_range, window)?.masked_mean(mask)
}

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
