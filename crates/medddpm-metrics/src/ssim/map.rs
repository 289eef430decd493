//! Single-scale 3-D SSIM: the local SSIM map of two volumes and its (masked) mean.

use crate::error::{check_data_range, check_dims, check_len, MetricsError, Result};

use super::window::{blur, check_fits, GaussianWindow};

const K1: f64 = 0.01;
const K2: f64 = 0.03;

/// One pyramid level of one volume with the statistics that do not depend on the other volume,
/// so pairwise MS-SSIM blurs each sample's own moments once.
pub(super) struct Level {
    dims: [usize; 3],
    data: Vec<f64>,
    mu: Vec<f64>,
    sq: Vec<f64>,
}

impl Level {
    pub(super) fn new(data: Vec<f64>, dims: [usize; 3], window: &GaussianWindow) -> Self {
        let (mu, _) = blur(&data, dims, window);
        let squares: Vec<f64> = data.iter().map(|x| x * x).collect();
        let (sq, _) = blur(&squares, dims, window);
        Self { dims, data, mu, sq }
    }

    pub(super) fn dims(&self) -> [usize; 3] {
        self.dims
    }
}

/// Calls `f(luminance, contrast_structure)` for every valid voxel of a pair of levels, in map
/// order, and returns the map dims; no map is stored unless the caller keeps one.
pub(super) fn pair_terms(
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

pub(super) fn to_f64(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

pub(super) fn constants(data_range: f64) -> (f64, f64) {
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

pub(super) fn check_pair(a: &[f32], b: &[f32], dims: [usize; 3], data_range: f64) -> Result<()> {
    check_dims("first volume", dims, a.len())?;
    check_len("second volume", a.len(), b.len())?;
    check_data_range(data_range)
}

/// The 3-D SSIM map of `a` against `b` (valid region only, see the `ssim` module docs).
pub fn ssim3d_map(
    a: &[f32],
    b: &[f32],
    dims: [usize; 3],
    data_range: f64,
    window: &GaussianWindow,
) -> Result<SsimMap> {
    check_pair(a, b, dims, data_range)?;
    check_fits(dims, window)?;
    let x = Level::new(to_f64(a), dims, window);
    let y = Level::new(to_f64(b), dims, window);
    Ok(level_map(&x, &y, window, data_range))
}

/// The SSIM map of two levels of equal dims (checked by the caller).
pub(super) fn level_map(x: &Level, y: &Level, window: &GaussianWindow, data_range: f64) -> SsimMap {
    let (c1, c2) = constants(data_range);
    let mut values = Vec::with_capacity(x.mu.len());
    let md = pair_terms(x, y, window, c1, c2, |l, c| values.push(l * c));
    SsimMap {
        volume_dims: x.dims,
        dims: md,
        offset: window.radius(),
        values,
    }
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
