//! Intensity normalisation to [-1, 1].

use serde::{Deserialize, Serialize};

use crate::{NiftiError, Volume};

/// How image intensities are mapped to the network's [-1, 1] range.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Normalization {
    /// What the released whole-head model was trained on: each slice along the last NIfTI axis
    /// (fixed k, all i, j) is min-max scaled on its own (sklearn `MinMaxScaler` on an
    /// `(i*j, k)` reshape; a constant slice becomes 0), then `x * 2 - 1`. Odd, but the weights
    /// expect it.
    #[default]
    ReferencePerSlice,
    /// Whole-volume min-max, then `x * 2 - 1` (torchio `RescaleIntensity((-1, 1))`, as the
    /// BraTS preprocessing does).
    #[serde(rename = "volume-minmax")]
    VolumeMinMax,
    /// Clip to the `low`/`high` percentiles (0..100, numpy's linear interpolation), then
    /// min-max and `x * 2 - 1`: robust to a few hot voxels.
    Percentile {
        /// Lower percentile, e.g. 0.5.
        low: f64,
        /// Upper percentile, e.g. 99.5.
        high: f64,
    },
    /// Leave intensities exactly as stored: for data already scaled to [-1, 1] by a
    /// preprocessing step (the BraTS files, whose reference loader does not rescale them).
    #[serde(rename = "none")]
    None,
}

impl Normalization {
    /// Normalises `data` (file order, dims `[ni, nj, nk]`) in place. Non-finite values are
    /// ignored when finding the range and stay as they are.
    pub fn apply(&self, data: &mut [f32], dims: [usize; 3]) -> Result<(), NiftiError> {
        crate::volume::check_len(dims, data.len())?;
        match *self {
            Self::ReferencePerSlice => {
                let slice = dims[0] * dims[1];
                if slice > 0 {
                    data.chunks_mut(slice).for_each(|s| {
                        let (lo, hi) = finite_range(s);
                        rescale(s, lo, hi);
                    });
                }
            }
            Self::VolumeMinMax => {
                let (lo, hi) = finite_range(data);
                rescale(data, lo, hi);
            }
            Self::Percentile { low, high } => {
                if !(0.0..=100.0).contains(&low) || !(0.0..=100.0).contains(&high) || low >= high {
                    return Err(NiftiError::InvalidPercentile { low, high });
                }
                let mut sorted: Vec<f32> = data.iter().copied().filter(|x| x.is_finite()).collect();
                sorted.sort_unstable_by(f32::total_cmp);
                let (lo, hi) = (percentile(&sorted, low), percentile(&sorted, high));
                data.iter_mut()
                    .filter(|x| x.is_finite())
                    .for_each(|x| *x = (*x as f64).clamp(lo, hi) as f32);
                rescale(data, lo, hi);
            }
            Self::None => {}
        }
        Ok(())
    }
}

impl Volume {
    /// A copy with intensities mapped to [-1, 1] by `mode`.
    pub fn normalized(&self, mode: Normalization) -> Result<Volume, NiftiError> {
        let mut v = self.clone();
        mode.apply(&mut v.data, v.dims)?;
        Ok(v)
    }
}

/// Min and max of the finite values (0, 0 when there are none).
fn finite_range(x: &[f32]) -> (f64, f64) {
    let (lo, hi) = x
        .iter()
        .filter(|v| v.is_finite())
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        });
    if lo > hi {
        (0.0, 0.0)
    } else {
        (lo as f64, hi as f64)
    }
}

/// `((x - lo) / range) * 2 - 1` with a zero range replaced by 1 (sklearn's rule), in f64 as the
/// reference computes on `get_fdata()` arrays.
fn rescale(x: &mut [f32], lo: f64, hi: f64) {
    let range = if hi - lo == 0.0 { 1.0 } else { hi - lo };
    x.iter_mut()
        .filter(|v| v.is_finite())
        .for_each(|v| *v = (((*v as f64 - lo) / range) * 2.0 - 1.0) as f32);
}

/// numpy's default ("linear") percentile of sorted values.
fn percentile(sorted: &[f32], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = q / 100.0 * (sorted.len() - 1) as f64;
    let (i, frac) = (rank.floor() as usize, rank - rank.floor());
    let a = sorted[i] as f64;
    let b = sorted[(i + 1).min(sorted.len() - 1)] as f64;
    a + (b - a) * frac
}

#[cfg(test)]
mod tests {
    use super::*;
    use Normalization::{ReferencePerSlice, VolumeMinMax};

    /// `d` normalised by `mode` on a grid of `dims`.
    fn applied(mode: Normalization, mut d: Vec<f32>, dims: [usize; 3]) -> Vec<f32> {
        mode.apply(&mut d, dims).unwrap();
        d
    }

    #[test]
    fn per_slice_scales_each_k_slice_alone() {
        // dims (2, 1, 3): three k-slices of two voxels each.
        let d = applied(
            ReferencePerSlice,
            vec![0.0, 10.0, 5.0, 5.0, -2.0, 2.0],
            [2, 1, 3],
        );
        // slice 0: [0,10] -> [-1, 1]; slice 1 constant -> 0 -> -1; slice 2: [-2,2] -> [-1,1].
        assert_eq!(d, vec![-1.0, 1.0, -1.0, -1.0, -1.0, 1.0]);
    }

    #[test]
    fn per_slice_groups_over_i_and_j() {
        // dims (1, 2, 2): slice k=0 is {1, 3}, k=1 is {0, 4}; a mid value tells them apart.
        let d = applied(ReferencePerSlice, vec![1.0, 3.0, 0.0, 4.0], [1, 2, 2]);
        assert_eq!(d, vec![-1.0, 1.0, -1.0, 1.0]);
        let d = applied(
            ReferencePerSlice,
            vec![1.0, 2.0, 3.0, 0.0, 1.0, 4.0],
            [3, 1, 2],
        );
        assert_eq!(d, vec![-1.0, 0.0, 1.0, -1.0, -0.5, 1.0]);
    }

    #[test]
    fn volume_minmax_uses_the_whole_volume() {
        let d = applied(VolumeMinMax, vec![2.0, 4.0, 6.0, 10.0], [2, 1, 2]);
        assert_eq!(d, vec![-1.0, -0.5, 0.0, 1.0]);
        let c = applied(VolumeMinMax, vec![3.0; 4], [2, 2, 1]);
        assert_eq!(c, vec![-1.0; 4]);
    }

    #[test]
    fn percentile_clips_outliers() {
        // 0..=10 plus an outlier 1000; 11 values -> rank of p is p/100 * 11.
        let mut d: Vec<f32> = (0..=10).map(|x| x as f32).chain([1000.0]).collect();
        let p = Normalization::Percentile {
            low: 0.0,
            high: 100.0 * 10.0 / 11.0,
        };
        p.apply(&mut d, [12, 1, 1]).unwrap();
        // high percentile -> rank 10 -> value 10; the outlier clips to 10 -> +1.
        let expect: Vec<f32> = (0..=10)
            .map(|x| x as f32 / 5.0 - 1.0)
            .chain([1.0])
            .collect();
        assert!(
            d.iter().zip(&expect).all(|(a, b)| (a - b).abs() < 1e-6),
            "{d:?}"
        );
    }

    #[test]
    fn percentile_interpolates_like_numpy() {
        let s = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&s, 50.0), 2.5); // np.percentile([1,2,3,4], 50)
        assert!((percentile(&s, 10.0) - 1.3).abs() < 1e-12);
    }

    #[test]
    fn bad_percentiles_are_rejected() {
        let mut d = vec![0.0; 2];
        for (low, high) in [(5.0, 5.0), (-1.0, 50.0), (10.0, 101.0)] {
            let r = Normalization::Percentile { low, high }.apply(&mut d, [2, 1, 1]);
            assert!(matches!(r, Err(NiftiError::InvalidPercentile { .. })));
        }
    }

    #[test]
    fn serde_names_are_kebab_case() {
        #[derive(Serialize, Deserialize, PartialEq, Debug)]
        struct Cfg {
            mode: Normalization,
        }
        for (text, mode) in [
            (
                "mode = \"reference-per-slice\"\n",
                Normalization::ReferencePerSlice,
            ),
            ("mode = \"volume-minmax\"\n", Normalization::VolumeMinMax),
        ] {
            let c: Cfg = toml::from_str(text).unwrap();
            assert_eq!(c.mode, mode);
            assert_eq!(toml::to_string(&c).unwrap(), text);
        }
        let c: Cfg = toml::from_str("mode = { percentile = { low = 0.5, high = 99.5 } }").unwrap();
        assert_eq!(
            c.mode,
            Normalization::Percentile {
                low: 0.5,
                high: 99.5
            }
        );
        assert_eq!(Normalization::default(), Normalization::ReferencePerSlice);
    }

    #[test]
    fn none_keeps_values_and_is_named_none() {
        let orig = vec![-1.0, 0.25, 3.0, f32::NAN];
        let mut d = orig.clone();
        Normalization::None.apply(&mut d, [4, 1, 1]).unwrap();
        assert_eq!(&d[..3], &orig[..3]);
        assert!(d[3].is_nan());
        #[derive(Serialize, Deserialize, PartialEq, Debug)]
        struct Cfg {
            mode: Normalization,
        }
        let c: Cfg = toml::from_str("mode = \"none\"\n").unwrap();
        assert_eq!(c.mode, Normalization::None);
        assert_eq!(toml::to_string(&c).unwrap(), "mode = \"none\"\n");
        // The length check still applies, so a wrong-sized buffer is not silently accepted.
        assert!(Normalization::None.apply(&mut d, [5, 1, 1]).is_err());
    }
}
