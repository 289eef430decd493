//! A volume's own SSIM statistics, blurred once, so that one volume can be compared with many
//! (the memorisation check compares each training volume with several synthetic ones).

use crate::error::{check_data_range, check_dims, check_len, MetricsError, Result};

use super::map::{level_map, to_f64, Level};
use super::window::{check_fits, GaussianWindow};

/// One volume with its blurred mean and mean square: a pair then costs one blur (of the
/// product) instead of five.
pub(crate) struct SsimVolume {
    level: Level,
    window: GaussianWindow,
}

impl SsimVolume {
    /// Blurs `data` (`dims`, file order) with `window`; errors for a length that is not `dims`
    /// or a volume smaller than the window.
    pub(crate) fn new(data: &[f32], dims: [usize; 3], window: &GaussianWindow) -> Result<Self> {
        check_dims("volume", dims, data.len())?;
        check_fits(dims, window)?;
        Ok(Self {
            level: Level::new(to_f64(data), dims, window),
            window: window.clone(),
        })
    }

    /// Mean SSIM of `self` against `other` over the window centres where `mask` is true, as
    /// [`crate::ssim3d`] computes it.
    pub(crate) fn masked_ssim(
        &self,
        other: &SsimVolume,
        data_range: f64,
        mask: &[bool],
    ) -> Result<f64> {
        check_data_range(data_range)?;
        let dims = self.level.dims();
        if other.level.dims() != dims || other.window != self.window {
            return Err(MetricsError::InvalidParameter {
                name: "dims",
                value: format!("{dims:?} and {:?}", other.level.dims()),
                reason: "both volumes must be on one grid and blurred with one window",
            });
        }
        check_len("mask", dims.iter().product(), mask.len())?;
        level_map(&self.level, &other.level, &self.window, data_range).masked_mean(Some(mask))
    }
}

#[cfg(test)]
mod tests {
    use super::SsimVolume;
    use crate::ssim::{ssim3d, GaussianWindow};

    #[test]
    fn agrees_with_ssim3d() {
        let dims = [12, 10, 9];
        let n: usize = dims.iter().product();
        let a: Vec<f32> = (0..n)
            .map(|x| ((x * 37 % 101) as f32 / 50.0) - 1.0)
            .collect();
        let b: Vec<f32> = (0..n)
            .map(|x| ((x * 11 % 29) as f32 / 14.0) - 1.0)
            .collect();
        let mask: Vec<bool> = (0..n).map(|x| x % 3 != 0).collect();
        let w = GaussianWindow::default();
        let x = SsimVolume::new(&a, dims, &w).unwrap();
        let y = SsimVolume::new(&b, dims, &w).unwrap();
        let want = ssim3d(&a, &b, dims, Some(&mask), 2.0).unwrap();
        let got = x.masked_ssim(&y, 2.0, &mask).unwrap();
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
        assert!((x.masked_ssim(&x, 2.0, &mask).unwrap() - 1.0).abs() < 1e-12);
        let small = SsimVolume::new(&a[..6 * 10 * 9], [6, 10, 9], &w);
        assert!(small.is_err());
    }
}
