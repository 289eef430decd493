//! The work list: N pairs from M masks, pair `k` being variant `k / M` of mask `k % M` with a
//! seed derived from (seed, k), the same on every run, and each process's share of it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use medddpm_train::sample::case_id;

use crate::SynthError;

/// A mask pairs are made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceMask {
    /// The file.
    pub path: PathBuf,
    /// Its case id ([`case_id`]), which its pairs' names start with.
    pub case: String,
}

/// One image/label pair to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pair {
    /// Its place in the work list, 0-based: the manifest's key.
    pub id: usize,
    /// Index of its source mask in [`WorkList::masks`].
    pub mask: usize,
    /// Which variant of that mask it is (0-based).
    pub variant: usize,
    /// The seed of its noise and of its mask's augmentation.
    pub seed: u64,
    /// The case its files are named after: `<mask case>_syn<variant, 3 digits>`.
    pub case: String,
}

/// Every pair of a run, from the masks, the count and the seed alone.
#[derive(Debug, Clone)]
pub struct WorkList {
    masks: Vec<SourceMask>,
    count: usize,
    variants: usize,
    seed: u64,
}

impl WorkList {
    /// `count` pairs from `masks` (in the order given), cycling through the masks so that
    /// each gets `count / M` or one more. `variants_per_mask` caps the pairs of one mask
    /// (default: as many as `count` needs); a count above masks x variants is refused, as are
    /// two masks of one case id.
    pub fn new(
        masks: &[PathBuf],
        count: usize,
        variants_per_mask: Option<usize>,
        seed: u64,
    ) -> Result<Self, SynthError> {
        if masks.is_empty() {
            return Err(SynthError::Options("no masks to synthesize from".into()));
        }
        if count == 0 {
            return Err(SynthError::Options("--count must be at least 1".into()));
        }
        let needed = count.div_ceil(masks.len());
        let variants = variants_per_mask.unwrap_or(needed);
        if variants < needed {
            return Err(SynthError::Options(format!(
                "{count} pairs from {} masks need {needed} variants per mask, not {variants}",
                masks.len()
            )));
        }
        let mut seen: BTreeMap<String, &Path> = BTreeMap::new();
        let mut sources = Vec::with_capacity(masks.len());
        for path in masks {
            let case = case_id(path);
            if let Some(first) = seen.insert(case.clone(), path) {
                return Err(SynthError::DuplicateCase {
                    case,
                    first: first.to_path_buf(),
                    second: path.clone(),
                });
            }
            sources.push(SourceMask {
                path: path.clone(),
                case,
            });
        }
        Ok(Self {
            masks: sources,
            count,
            variants,
            seed,
        })
    }

    /// The source masks, in work-list order.
    pub fn masks(&self) -> &[SourceMask] {
        &self.masks
    }

    /// Pairs in the list.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The most pairs one mask gives.
    pub fn variants_per_mask(&self) -> usize {
        self.variants
    }

    /// The run's seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Pair `id` (below [`WorkList::count`]).
    pub fn pair(&self, id: usize) -> Pair {
        let m = self.masks.len();
        let (mask, variant) = (id % m, id / m);
        Pair {
            id,
            mask,
            variant,
            seed: pair_seed(self.seed, id),
            case: format!("{}_syn{variant:03}", self.masks[mask].case),
        }
    }

    /// Every pair, in order.
    pub fn pairs(&self) -> impl Iterator<Item = Pair> + '_ {
        (0..self.count).map(|k| self.pair(k))
    }

    /// The pairs process `rank` of `world` makes: those with `id % world == rank`.
    pub fn shard(&self, rank: usize, world: usize) -> Vec<Pair> {
        (rank..self.count)
            .step_by(world.max(1))
            .map(|k| self.pair(k))
            .collect()
    }
}

/// The seed of pair `k` of a run seeded `seed` (SplitMix64 of both: nearby runs and pairs
/// get unrelated seeds).
pub fn pair_seed(seed: u64, k: usize) -> u64 {
    let mut z = seed
        .wrapping_mul(0xd1b5_4a32_d192_ed03)
        .wrapping_add(k as u64)
        .wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn masks(names: &[&str]) -> Vec<PathBuf> {
        names
            .iter()
            .map(|n| PathBuf::from(format!("m/{n}")))
            .collect()
    }

    #[test]
    fn pairs_cycle_through_the_masks_with_derived_seeds() {
        let list = WorkList::new(&masks(&["a.nii.gz", "b_seg.nii.gz"]), 5, None, 7).unwrap();
        assert_eq!(list.variants_per_mask(), 3);
        let got: Vec<(usize, usize, String)> =
            list.pairs().map(|p| (p.mask, p.variant, p.case)).collect();
        assert_eq!(
            got,
            [
                (0, 0, "a_syn000".into()),
                (1, 0, "b_syn000".into()),
                (0, 1, "a_syn001".into()),
                (1, 1, "b_syn001".into()),
                (0, 2, "a_syn002".into()),
            ]
        );
        // The same list again gives the same seeds; another seed, other ones.
        let again = WorkList::new(&masks(&["a.nii.gz", "b_seg.nii.gz"]), 5, None, 7).unwrap();
        assert_eq!(list.pair(3), again.pair(3));
        assert_ne!(list.pair(3).seed, pair_seed(8, 3));
        let mut seeds: Vec<u64> = list.pairs().map(|p| p.seed).collect();
        seeds.dedup();
        assert_eq!(seeds.len(), 5);
        // Pinned: a change here changes every data set made from a seed.
        assert_eq!(pair_seed(0, 0), 0xe220_a839_7b1d_cdaf);
    }

    #[test]
    fn shards_split_the_list_without_overlap() {
        let list = WorkList::new(&masks(&["a.nii", "b.nii", "c.nii"]), 10, Some(4), 0).unwrap();
        let mut all: Vec<usize> = (0..3)
            .flat_map(|r| list.shard(r, 3).into_iter().map(|p| p.id))
            .collect();
        assert_eq!(
            list.shard(1, 3).iter().map(|p| p.id).collect::<Vec<_>>(),
            [1, 4, 7]
        );
        all.sort_unstable();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
        assert_eq!(list.shard(0, 1).len(), 10);
    }

    #[test]
    fn impossible_lists_are_refused() {
        let two = masks(&["a.nii", "b.nii"]);
        let err = WorkList::new(&two, 5, Some(2), 0).unwrap_err().to_string();
        assert!(err.contains("need 3 variants per mask, not 2"), "{err}");
        assert!(WorkList::new(&two, 0, None, 0).is_err());
        assert!(WorkList::new(&[], 1, None, 0).is_err());
        let same = masks(&["x.nii.gz", "x_seg.nii"]);
        let err = WorkList::new(&same, 2, None, 0).unwrap_err().to_string();
        assert!(err.contains("case 'x'"), "{err}");
    }
}
