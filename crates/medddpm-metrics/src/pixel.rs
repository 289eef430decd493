//! Voxel-wise error metrics: MAE, MSE, PSNR.

use crate::error::{check_data_range, check_len, MetricsError, Result};

/// Sums of absolute and squared differences over the selected voxels, in f64.
fn diff_sums(a: &[f32], b: &[f32], mask: Option<&[bool]>) -> Result<(f64, f64, usize)> {
    check_len("second volume", a.len(), b.len())?;
    if a.is_empty() {
        return Err(MetricsError::Empty {
            what: "volume".into(),
        });
    }
    let (mut abs, mut sq, mut n) = (0.0f64, 0.0f64, 0usize);
    let mut add = |x: f32, y: f32| {
        let d = x as f64 - y as f64;
        abs += d.abs();
        sq += d * d;
        n += 1;
    };
    match mask {
        None => a.iter().zip(b).for_each(|(&x, &y)| add(x, y)),
        Some(m) => {
            check_len("mask", a.len(), m.len())?;
            a.iter()
                .zip(b)
                .zip(m)
                .filter(|(_, &keep)| keep)
                .for_each(|((&x, &y), _)| add(x, y));
        }
    }
    if n == 0 {
        return Err(MetricsError::EmptyMask {
            what: "mask".into(),
        });
    }
    Ok((abs, sq, n))
}

/// Mean absolute error over the voxels where `mask` is true (all voxels when `None`).
pub fn mae(a: &[f32], b: &[f32], mask: Option<&[bool]>) -> Result<f64> {
    let (abs, _, n) = diff_sums(a, b, mask)?;
    Ok(abs / n as f64)
}

/// Mean squared error over the voxels where `mask` is true (all voxels when `None`).
pub fn mse(a: &[f32], b: &[f32], mask: Option<&[bool]>) -> Result<f64> {
    let (_, sq, n) = diff_sums(a, b, mask)?;
    Ok(sq / n as f64)
}

/// Peak signal-to-noise ratio in dB, `10 log10(data_range^2 / mse)`.
///
/// Identical inputs (MSE exactly 0) give `f64::INFINITY`; the report layer stores that as
/// `None` (JSON `null`) because JSON has no infinity. `data_range` is the span the images can
/// take: 2.0 for our [-1, 1] volumes.
pub fn psnr(a: &[f32], b: &[f32], mask: Option<&[bool]>, data_range: f64) -> Result<f64> {
    check_data_range(data_range)?;
    Ok(psnr_from_mse(mse(a, b, mask)?, data_range))
}

/// PSNR from an already computed MSE (infinite when `mse == 0`).
pub fn psnr_from_mse(mse: f64, data_range: f64) -> f64 {
    if mse == 0.0 {
        f64::INFINITY
    } else {
        10.0 * (data_range * data_range / mse).log10()
    }
}
