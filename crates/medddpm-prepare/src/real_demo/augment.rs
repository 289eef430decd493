//! Random augmentations of a subject for the real-MRI demo: a left-right flip, a small affine
//! jitter and an intensity jitter, drawn deterministically from a seed, and the output grid
//! they are sampled on.

use medddpm_nifti::{Affine, Volume, IDENTITY};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::resample::{apply, matmul};

/// Ranges of the random augmentations (each copy draws its own values uniformly in them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AugmentSettings {
    /// Chance of a left-right flip (of the world x axis, about the head's centre).
    pub flip_probability: f64,
    /// Largest rotation about each world axis, in degrees.
    pub rotation_deg: f64,
    /// Largest relative scale change along each axis (0.05 = +-5 %).
    pub scale: f64,
    /// Largest translation along each axis, in mm.
    pub translation_mm: f64,
    /// Range of the gamma applied to intensities scaled to [0, 1].
    pub gamma: [f64; 2],
    /// Largest amplitude of a linear bias field (a smooth intensity ramp across the head:
    /// 0.05 = up to +-5 % at the grid's edge). It stands in for a global intensity scale,
    /// which the final min-max would undo.
    pub bias: f64,
}

impl Default for AugmentSettings {
    fn default() -> Self {
        Self {
            flip_probability: 0.5,
            rotation_deg: 5.0,
            scale: 0.05,
            translation_mm: 4.0,
            gamma: [0.9, 1.1],
            bias: 0.05,
        }
    }
}

/// The values one copy drew.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Draw {
    /// Flipped left-right.
    pub flip: bool,
    /// Rotation about world x, y, z (degrees).
    pub rotation_deg: [f64; 3],
    /// Scale along world x, y, z.
    pub scale: [f64; 3],
    /// Translation (mm).
    pub translation_mm: [f64; 3],
    /// Intensity gamma.
    pub gamma: f64,
    /// Bias amplitude at the grid's edge.
    pub bias: f64,
    /// Bias direction (unit vector in world space).
    pub bias_direction: [f64; 3],
}

impl Draw {
    /// The values for copy `copy` of subject `subject` under `seed`: one ChaCha8 stream per
    /// (subject, copy), so a copy does not change when the number of copies does.
    pub fn new(s: &AugmentSettings, seed: u64, subject: usize, copy: usize) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(((subject as u64) << 32) | copy as u64);
        let mut sym = |r: f64| (rng.random::<f64>() * 2.0 - 1.0) * r;
        let rotation_deg = [0; 3].map(|_| sym(s.rotation_deg));
        let scale = [0; 3].map(|_| 1.0 + sym(s.scale));
        let translation_mm = [0; 3].map(|_| sym(s.translation_mm));
        let bias = sym(s.bias);
        let mut dir = [0; 3].map(|_| sym(1.0));
        let norm = dir.iter().map(|x| x * x).sum::<f64>().sqrt();
        dir = if norm > 1e-6 {
            dir.map(|x| x / norm)
        } else {
            [1.0, 0.0, 0.0]
        };
        let gamma = s.gamma[0] + (s.gamma[1] - s.gamma[0]) * rng.random::<f64>();
        let flip = rng.random::<f64>() < s.flip_probability;
        Self {
            flip,
            rotation_deg,
            scale,
            translation_mm,
            gamma,
            bias,
            bias_direction: dir,
        }
    }

    /// The world-to-world map from an output point to the subject point it shows:
    /// `p = c + R S F (w - c) + t` about the head's centre `c`.
    pub fn world_map(&self, centre: [f64; 3]) -> Affine {
        let mul3 = |a: [[f64; 3]; 3], b: [[f64; 3]; 3]| -> [[f64; 3]; 3] {
            std::array::from_fn(|i| {
                std::array::from_fn(|j| (0..3).map(|k| a[i][k] * b[k][j]).sum())
            })
        };
        let flip = if self.flip { -1.0 } else { 1.0 };
        let sf = [
            [self.scale[0] * flip, 0.0, 0.0],
            [0.0, self.scale[1], 0.0],
            [0.0, 0.0, self.scale[2]],
        ];
        let l = mul3(medddpm_mask::augment::rotation(self.rotation_deg), sf);
        let mut m = IDENTITY;
        for i in 0..3 {
            m[i][..3].copy_from_slice(&l[i]);
            m[i][3] = centre[i] + self.translation_mm[i]
                - (0..3).map(|k| l[i][k] * centre[k]).sum::<f64>();
        }
        m
    }
}

/// The output grid covering a label map's non-zero bounding box plus `margin_mm` on every
/// side, along the image's own axes, with one voxel size (the largest the box needs) so
/// voxels are cubes: its index map (output index -> input index) and the box centre in world
/// coordinates. `None` when the label map is empty.
pub fn head_grid(
    image: &Volume,
    labels: &[f32],
    grid: [usize; 3],
    margin_mm: f64,
) -> Option<(Affine, [f64; 3])> {
    let [ni, nj, _] = image.dims();
    let (mut lo, mut hi) = ([usize::MAX; 3], [0usize; 3]);
    for (at, _) in labels.iter().enumerate().filter(|(_, &l)| l > 0.0) {
        let ijk = [at % ni, (at / ni) % nj, at / (ni * nj)];
        for a in 0..3 {
            lo[a] = lo[a].min(ijk[a]);
            hi[a] = hi[a].max(ijk[a]);
        }
    }
    if lo[0] == usize::MAX {
        return None;
    }
    let sp = image.spacing();
    let extent = |a: usize| (hi[a] - lo[a] + 1) as f64 * sp[a] + 2.0 * margin_mm;
    let size = (0..3)
        .map(|a| extent(a) / grid[a] as f64)
        .fold(0.0, f64::max);
    let centre: [f64; 3] = std::array::from_fn(|a| (lo[a] + hi[a]) as f64 / 2.0);
    let mut m = IDENTITY;
    for a in 0..3 {
        m[a][a] = size / sp[a];
        m[a][3] = centre[a] - (grid[a] as f64 - 1.0) / 2.0 * m[a][a];
    }
    Some((m, image.world(centre)))
}

/// Gamma and bias on `image` (values as resampled from the subject, whose range is
/// `range`): scaled to [0, 1], raised to the gamma, multiplied by the bias ramp. The final
/// min-max to [-1, 1] comes after.
pub fn jitter_intensity(image: &mut Volume, range: (f32, f32), draw: &Draw, centre: [f64; 3]) {
    let (lo, span) = (
        range.0 as f64,
        (range.1 - range.0).max(f32::MIN_POSITIVE) as f64,
    );
    let [ni, nj, nk] = image.dims();
    let reach = {
        let far = image.world([ni as f64 - 0.5, nj as f64 - 0.5, nk as f64 - 0.5]);
        let near = image.world([-0.5; 3]);
        (0..3)
            .map(|a| (far[a] - near[a]).abs() / 2.0)
            .fold(0.0, f64::max)
            .max(1e-6)
    };
    let affine = *image.affine();
    for (at, x) in image.data_mut().iter_mut().enumerate() {
        let w = apply(
            &affine,
            [
                (at % ni) as f64,
                ((at / ni) % nj) as f64,
                (at / (ni * nj)) as f64,
            ],
        );
        let along: f64 = (0..3)
            .map(|a| draw.bias_direction[a] * (w[a] - centre[a]))
            .sum();
        let unit = ((*x as f64 - lo) / span).clamp(0.0, 1.0);
        *x = (unit.powf(draw.gamma) * (1.0 + draw.bias * along / reach)) as f32;
    }
}

/// The index map (output index -> subject index) of a copy: the output grid, the copy's world
/// map, back to the subject's voxels.
pub fn copy_index_map(
    subject_affine_inv: &Affine,
    out_affine: &Affine,
    world_map: &Affine,
) -> Affine {
    matmul(subject_affine_inv, &matmul(world_map, out_affine))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_repeat_for_a_seed_and_stay_in_range() {
        let s = AugmentSettings::default();
        assert_eq!(Draw::new(&s, 7, 1, 3), Draw::new(&s, 7, 1, 3));
        assert_ne!(Draw::new(&s, 7, 1, 3), Draw::new(&s, 7, 1, 4));
        assert_ne!(Draw::new(&s, 8, 1, 3), Draw::new(&s, 7, 1, 3));
        for c in 0..50 {
            let d = Draw::new(&s, 1, 0, c);
            assert!(d.rotation_deg.iter().all(|r| r.abs() <= 5.0));
            assert!(d.scale.iter().all(|x| (x - 1.0).abs() <= 0.05));
            assert!(d.translation_mm.iter().all(|t| t.abs() <= 4.0));
            assert!((0.9..=1.1).contains(&d.gamma));
        }
    }

    #[test]
    fn world_map_keeps_the_centre_up_to_the_translation() {
        let d = Draw {
            flip: true,
            rotation_deg: [3.0, -4.0, 5.0],
            scale: [1.02, 0.97, 1.0],
            translation_mm: [1.0, 2.0, -3.0],
            gamma: 1.0,
            bias: 0.0,
            bias_direction: [1.0, 0.0, 0.0],
        };
        let c = [10.0, -20.0, 5.0];
        let p = apply(&d.world_map(c), c);
        assert!(
            (p[0] - 11.0).abs() < 1e-9 && (p[1] + 18.0).abs() < 1e-9 && (p[2] - 2.0).abs() < 1e-9
        );
        // The flip sends a point right of the centre to the left (no rotation, no scale).
        let flip_only = Draw {
            rotation_deg: [0.0; 3],
            scale: [1.0; 3],
            translation_mm: [0.0; 3],
            ..d
        };
        let q = apply(&flip_only.world_map(c), [15.0, -20.0, 5.0]);
        assert!((q[0] - 5.0).abs() < 1e-9);
    }
}
