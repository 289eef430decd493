//! Intensity windows: which values map to black and white.

use medddpm_nifti::Volume;

use crate::error::{RenderError, Result};

/// How voxel values map to grey levels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Window {
    /// `lo` maps to black, `hi` to white, linearly in between; values outside are clamped.
    Fixed {
        /// Value shown black.
        lo: f64,
        /// Value shown white.
        hi: f64,
    },
    /// The `lo`-th and `hi`-th percentiles (in 0..=100) of the volume's finite nonzero voxels
    /// (all finite voxels if none is nonzero) become a [`Window::Fixed`]. Percentiles
    /// interpolate linearly between order statistics (NumPy's default).
    Percentile {
        /// Percentile shown black, e.g. 0.5.
        lo: f64,
        /// Percentile shown white, e.g. 99.5.
        hi: f64,
    },
}

impl Default for Window {
    /// [`Window::ROBUST`].
    fn default() -> Self {
        Window::ROBUST
    }
}

impl Window {
    /// `Fixed(-1, 1)`: the network's intensity range, shared by real and synthetic images.
    pub const UNIT: Window = Window::Fixed { lo: -1.0, hi: 1.0 };
    /// `Percentile(0.5, 99.5)`: robust to a few extreme voxels.
    pub const ROBUST: Window = Window::Percentile { lo: 0.5, hi: 99.5 };

    /// [`Window::UNIT`] if every finite value of `volume` lies in [-1, 1] (and there is one),
    /// else [`Window::ROBUST`].
    pub fn auto(volume: &Volume) -> Window {
        let mut any = false;
        for v in volume.data().iter().filter(|v| v.is_finite()) {
            if !(-1.0..=1.0).contains(v) {
                return Window::ROBUST;
            }
            any = true;
        }
        if any {
            Window::UNIT
        } else {
            Window::ROBUST
        }
    }

    /// The value range this window shows for `volume` (computed over the whole volume, so all
    /// its slices share it).
    pub fn resolve(&self, volume: &Volume) -> Result<WindowRange> {
        self.resolve_values(volume.data())
    }

    /// As [`Window::resolve`], over any values.
    pub fn resolve_values(&self, values: &[f32]) -> Result<WindowRange> {
        match *self {
            Window::Fixed { lo, hi } => {
                if !(lo.is_finite() && hi.is_finite()) {
                    return Err(RenderError::InvalidWindow {
                        lo,
                        hi,
                        reason: "bounds must be finite",
                    });
                }
                if lo >= hi {
                    return Err(RenderError::InvalidWindow {
                        lo,
                        hi,
                        reason: "lo must be below hi",
                    });
                }
                Ok(WindowRange { lo, hi })
            }
            Window::Percentile { lo, hi } => {
                if !(0.0..=100.0).contains(&lo) || !(0.0..=100.0).contains(&hi) || lo >= hi {
                    return Err(RenderError::InvalidWindow {
                        lo,
                        hi,
                        reason: "percentiles must satisfy 0 <= lo < hi <= 100",
                    });
                }
                let mut sorted: Vec<f32> = values
                    .iter()
                    .copied()
                    .filter(|v| v.is_finite() && *v != 0.0)
                    .collect();
                if sorted.is_empty() {
                    sorted = values.iter().copied().filter(|v| v.is_finite()).collect();
                }
                if sorted.is_empty() {
                    return Err(RenderError::Empty(
                        "no finite voxel to take percentiles of".into(),
                    ));
                }
                sorted.sort_unstable_by(f32::total_cmp);
                Ok(WindowRange {
                    lo: percentile(&sorted, lo),
                    hi: percentile(&sorted, hi),
                })
            }
        }
    }
}

/// `p`-th percentile (0..=100) of sorted, non-empty `v`, linear between order statistics.
fn percentile(v: &[f32], p: f64) -> f64 {
    let pos = p / 100.0 * (v.len() - 1) as f64;
    let below = pos.floor() as usize;
    let above = (below + 1).min(v.len() - 1);
    let t = pos - below as f64;
    v[below] as f64 + t * (v[above] as f64 - v[below] as f64)
}

/// A resolved window: the values shown black (`lo`) and white (`hi`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowRange {
    /// Value shown black.
    pub lo: f64,
    /// Value shown white.
    pub hi: f64,
}

impl WindowRange {
    /// Grey level of `v`: `round(255 (v - lo) / (hi - lo))`, clamped to 0..=255; non-finite
    /// values are 0. A degenerate range (`hi <= lo`, e.g. percentiles of a constant volume)
    /// thresholds: values above `lo` are white, the rest black.
    pub fn map(&self, v: f32) -> u8 {
        if !v.is_finite() {
            return 0;
        }
        let v = v as f64;
        if self.hi > self.lo {
            let t = ((v - self.lo) / (self.hi - self.lo)).clamp(0.0, 1.0);
            (t * 255.0).round() as u8
        } else if v > self.lo {
            255
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_unit_window_maps_ends_to_black_and_white() {
        let w = Window::UNIT.resolve_values(&[]).unwrap();
        assert_eq!(w.map(-1.0), 0);
        assert_eq!(w.map(1.0), 255);
        assert_eq!(w.map(0.0), 128); // 127.5 rounds up
        assert_eq!(w.map(-7.0), 0);
        assert_eq!(w.map(3.0), 255);
        assert_eq!(w.map(f32::NAN), 0);
        assert_eq!(w.map(f32::INFINITY), 0);
    }

    #[test]
    fn percentile_window_on_a_ramp() {
        // Zeros are background and are ignored; the ramp 1..=101 has percentile p at 1 + p.
        let mut values: Vec<f32> = (1..=101).map(|v| v as f32).collect();
        values.extend([0.0; 50]);
        let w = Window::Percentile { lo: 10.0, hi: 90.0 }
            .resolve_values(&values)
            .unwrap();
        assert_eq!((w.lo, w.hi), (11.0, 91.0));
        assert_eq!(w.map(11.0), 0);
        assert_eq!(w.map(5.0), 0);
        assert_eq!(w.map(91.0), 255);
        assert_eq!(w.map(51.0), 128);
        assert_eq!(w.map(31.0), 64); // 63.75
                                     // Interpolation between order statistics: 0.5th percentile of 1..=101 is 1.5.
        let r = Window::ROBUST.resolve_values(&values).unwrap();
        assert!(
            (r.lo - 1.5).abs() < 1e-9 && (r.hi - 100.5).abs() < 1e-9,
            "{r:?}"
        );
    }

    #[test]
    fn auto_picks_unit_for_network_space_only() {
        let a = medddpm_nifti::IDENTITY;
        let unit = Volume::new([2, 1, 1], vec![-1.0, 1.0], a).unwrap();
        assert_eq!(Window::auto(&unit), Window::UNIT);
        let mri = Volume::new([2, 1, 1], vec![0.0, 812.0], a).unwrap();
        assert_eq!(Window::auto(&mri), Window::ROBUST);
    }

    #[test]
    fn invalid_and_degenerate_windows() {
        assert!(Window::Fixed { lo: 1.0, hi: 1.0 }
            .resolve_values(&[])
            .is_err());
        assert!(Window::Percentile { lo: 5.0, hi: 101.0 }
            .resolve_values(&[1.0])
            .is_err());
        assert!(matches!(
            Window::ROBUST.resolve_values(&[f32::NAN]),
            Err(RenderError::Empty(_))
        ));
        // A constant volume thresholds instead of dividing by zero.
        let w = Window::ROBUST.resolve_values(&[0.0, 0.0]).unwrap();
        assert_eq!((w.map(0.0), w.map(1.0)), (0, 255));
    }
}
