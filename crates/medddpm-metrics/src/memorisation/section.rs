//! The memorisation section of the report: per synthetic volume its nearest training volumes,
//! and the share of near-copies with the spread of the nearest scores.

use serde::{Deserialize, Serialize};

use super::compare::Found;
use super::{MemorisationOptions, NamedVolume, VolumeSource};

/// A training volume as seen from one synthetic volume.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Neighbour {
    /// Training volume name.
    pub training: String,
    /// Mean SSIM of the windows centred in the pair's head.
    pub ssim: f64,
    /// Pearson correlation over the head's voxels.
    pub correlation: f64,
    /// Voxels in the head (above the threshold in either volume).
    pub head_voxels: u64,
}

/// One synthetic volume's nearest training volumes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NearestRow {
    /// Synthetic volume name.
    pub synthetic: String,
    /// The training volume with the highest SSIM.
    pub nearest: Neighbour,
    /// The runner-up; `None` with a single training volume.
    pub second: Option<Neighbour>,
    /// Whether a compared training volume passes either near-copy threshold.
    pub near_copy: bool,
    /// The first of them by SSIM: usually `nearest`, but a copy with other intensities
    /// (caught by its correlation) can rank below others by SSIM. `None` when not a near-copy.
    pub near_copy_of: Option<Neighbour>,
}

/// Smallest, median and largest of a set of scores.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// Smallest.
    pub min: f64,
    /// Median (mean of the two middle values for an even count).
    pub median: f64,
    /// Largest.
    pub max: f64,
}

impl Spread {
    /// The spread of `values`; `None` when empty.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Self> {
        let mut v: Vec<f64> = values.into_iter().collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let mid = v.len() / 2;
        let median = if v.len() % 2 == 1 {
            v[mid]
        } else {
            (v[mid - 1] + v[mid]) / 2.0
        };
        Some(Self {
            min: v[0],
            median,
            max: v[v.len() - 1],
        })
    }
}

/// Is the synthetic data new? See [`crate::nearest_training`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemorisationSection {
    /// Which voxels the scores cover.
    pub head: String,
    /// How the nearest volumes were found (prefilter or every pair).
    pub search: String,
    /// The settings used.
    pub options: MemorisationOptions,
    /// Synthetic volumes checked.
    pub n_synthetic: usize,
    /// Training volumes.
    pub n_training: usize,
    /// (synthetic, training) pairs compared at full resolution.
    pub compared_pairs: usize,
    /// One row per synthetic volume, in input order.
    pub rows: Vec<NearestRow>,
    /// Synthetic volumes that are near-copies.
    pub near_copies: usize,
    /// `near_copies / n_synthetic`.
    pub near_copy_fraction: f64,
    /// Spread of the nearest SSIMs.
    pub nearest_ssim: Spread,
    /// Spread of the nearest volumes' correlations.
    pub nearest_correlation: Spread,
}

/// The section from each synthetic volume's compared training volumes (sorted by SSIM,
/// at least one each).
pub(super) fn build<S: VolumeSource + ?Sized>(
    synthetic: &[NamedVolume],
    training: &S,
    found: Vec<Vec<Found>>,
    options: &MemorisationOptions,
    prefiltered: bool,
) -> MemorisationSection {
    let neighbour = |f: &Found| Neighbour {
        training: training.name(f.training),
        ssim: f.ssim,
        correlation: f.correlation,
        head_voxels: f.head_voxels,
    };
    let copies = |f: &&Found| {
        f.ssim >= options.ssim_threshold || f.correlation >= options.correlation_threshold
    };
    let compared_pairs = found.iter().map(Vec::len).sum();
    let rows: Vec<NearestRow> = synthetic
        .iter()
        .zip(&found)
        .map(|(s, f)| {
            let copy = f.iter().find(copies);
            NearestRow {
                synthetic: s.name.clone(),
                nearest: neighbour(&f[0]),
                second: f.get(1).map(neighbour),
                near_copy: copy.is_some(),
                near_copy_of: copy.map(neighbour),
            }
        })
        .collect();
    let near_copies = rows.iter().filter(|r| r.near_copy).count();
    let spread = |v: &dyn Fn(&NearestRow) -> f64| {
        Spread::of(rows.iter().map(v)).expect("at least one synthetic volume")
    };
    MemorisationSection {
        head: format!(
            "voxels above {} in either volume (both in [-1, 1]): the union of both heads; SSIM \
             averages the 7-voxel windows centred there, the correlation is Pearson's over them",
            options.head_threshold
        ),
        search: search(options, prefiltered),
        options: *options,
        n_synthetic: synthetic.len(),
        n_training: training.len(),
        compared_pairs,
        near_copy_fraction: near_copies as f64 / synthetic.len() as f64,
        near_copies,
        nearest_ssim: spread(&|r| r.nearest.ssim),
        nearest_correlation: spread(&|r| r.nearest.correlation),
        rows,
    }
}

fn search(options: &MemorisationOptions, prefiltered: bool) -> String {
    if !prefiltered {
        return "every (synthetic, training) pair compared at full resolution".into();
    }
    let f = options.prefilter_factor;
    format!(
        "prefilter: correlation inside the head on copies averaged over {f}x{f}x{f} blocks \
         picked each synthetic volume's {} best training volumes; SSIM and correlation at full \
         resolution on those",
        options.candidates
    )
}

#[cfg(test)]
mod tests {
    use super::Spread;

    #[test]
    fn spread_of_odd_and_even_counts() {
        let s = Spread::of([0.3, 0.1, 0.2]).unwrap();
        assert_eq!((s.min, s.median, s.max), (0.1, 0.2, 0.3));
        let s = Spread::of([0.4, 0.1, 0.2, 0.3]).unwrap();
        assert!((s.median - 0.25).abs() < 1e-12);
        assert!(Spread::of([]).is_none());
    }
}
