//! The seeded draws of an augmentation and the record of what was drawn.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Every parameter one augmentation drew, so a manifest can say how each variant was made
/// (and [`super::augment`] with the same seed and settings makes it again).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AugmentRecord {
    /// The seed it was drawn from.
    pub seed: u64,
    /// Whether the mask was mirrored left-right.
    pub flip: bool,
    /// The voxel axis (0 = i, 1 = j, 2 = k) that runs left-right, mirrored if `flip`.
    pub flip_axis: usize,
    /// Rotation about world x, y and z through the grid's centre, in degrees, applied in
    /// that order (all 0 without rotation).
    pub rotation_deg: [f64; 3],
    /// Isotropic scale about the grid's centre (1 without scaling).
    pub scale: f64,
    /// Tumour shift along voxel axes i, j, k, in voxels (0 without a tumour move).
    pub tumour_shift: [i64; 3],
    /// Tumour scale about its centroid (1 without a tumour move).
    pub tumour_scale: f64,
    /// Draws the rotation and scaling took to keep the tumour on the grid (1 = the first).
    pub geometry_tries: u32,
    /// Draws the tumour move took to fit inside the brain (0 = no move).
    pub tumour_tries: u32,
}

/// One ChaCha8 stream per seed (the generator `medddpm-prepare` and `medddpm-train` use),
/// read in a fixed order, so a seed and settings always give the same variant.
pub(crate) struct Draws(ChaCha8Rng);

impl Draws {
    pub fn new(seed: u64) -> Self {
        Self(ChaCha8Rng::seed_from_u64(seed))
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.0.random::<f64>() < p
    }

    /// Uniform in `[-r, r]`.
    pub fn symmetric(&mut self, r: f64) -> f64 {
        (self.0.random::<f64>() * 2.0 - 1.0) * r
    }

    /// Uniform in `[lo, hi]`.
    pub fn within(&mut self, [lo, hi]: [f64; 2]) -> f64 {
        lo + (hi - lo) * self.0.random::<f64>()
    }

    /// A whole number uniform in `[-m, m]`.
    pub fn shift(&mut self, m: u32) -> i64 {
        let m = m as i64;
        self.0.random_range(-m..=m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_repeat_per_seed_and_stay_in_range() {
        let take = |seed| {
            let mut d = Draws::new(seed);
            (0..50)
                .map(|_| (d.symmetric(10.0), d.within([0.9, 1.1]), d.shift(3)))
                .collect::<Vec<_>>()
        };
        assert_eq!(take(7), take(7));
        assert_ne!(take(7), take(8));
        for (r, s, t) in take(1) {
            assert!(r.abs() <= 10.0 && (0.9..=1.1).contains(&s) && t.abs() <= 3);
        }
        let mut d = Draws::new(3);
        assert!((0..20).all(|_| !d.chance(0.0)) && (0..20).all(|_| d.chance(1.0)));
    }

    #[test]
    fn the_record_round_trips_through_json() {
        let r = AugmentRecord {
            seed: 5,
            flip: true,
            flip_axis: 0,
            rotation_deg: [1.5, -2.0, 0.25],
            scale: 1.05,
            tumour_shift: [3, 0, -2],
            tumour_scale: 0.9,
            geometry_tries: 1,
            tumour_tries: 4,
        };
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains("\"tumour_shift\":[3,0,-2]"), "{text}");
        assert_eq!(serde_json::from_str::<AugmentRecord>(&text).unwrap(), r);
    }
}
