//! The voxel-level pieces of the memorisation check: the head of a pair of volumes, Pearson's
//! correlation over it, and the block-averaged copies the prefilter ranks.

/// The head of a pair: voxels above `threshold` in `a` or in `b` (lengths equal, checked by
/// the caller).
pub(super) fn head(a: &[f32], b: &[f32], threshold: f32) -> Vec<bool> {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| x > threshold || y > threshold)
        .collect()
}

/// Pearson's correlation of `a` and `b` over the voxels where `mask` is true, in f64; `None`
/// when the mask is empty, 0 when either volume is constant there (no pattern to share).
pub(super) fn pearson(a: &[f32], b: &[f32], mask: &[bool]) -> Option<f64> {
    let (mut n, mut sa, mut sb) = (0usize, 0.0f64, 0.0f64);
    for ((&x, &y), _) in a.iter().zip(b).zip(mask).filter(|(_, &m)| m) {
        n += 1;
        sa += x as f64;
        sb += y as f64;
    }
    if n == 0 {
        return None;
    }
    let (ma, mb) = (sa / n as f64, sb / n as f64);
    let (mut saa, mut sbb, mut sab) = (0.0f64, 0.0f64, 0.0f64);
    for ((&x, &y), _) in a.iter().zip(b).zip(mask).filter(|(_, &m)| m) {
        let (dx, dy) = (x as f64 - ma, y as f64 - mb);
        saa += dx * dx;
        sbb += dy * dy;
        sab += dx * dy;
    }
    if saa <= 0.0 || sbb <= 0.0 {
        return Some(0.0);
    }
    Some((sab / (saa * sbb).sqrt()).clamp(-1.0, 1.0))
}

/// `data` averaged over blocks of `factor` voxels per axis (fewer along an axis shorter than
/// `factor`); voxels past the last whole block are dropped.
pub(super) fn block_mean(data: &[f32], dims: [usize; 3], factor: usize) -> Vec<f32> {
    let f = dims.map(|d| factor.clamp(1, d.max(1)));
    let od = [dims[0] / f[0], dims[1] / f[1], dims[2] / f[2]];
    let mut sums = vec![0.0f64; od.iter().product()];
    for k in 0..od[2] * f[2] {
        for j in 0..od[1] * f[1] {
            let row = &data[dims[0] * (j + dims[1] * k)..][..od[0] * f[0]];
            let out = od[0] * (j / f[1] + od[1] * (k / f[2]));
            for (i, &v) in row.iter().enumerate() {
                sums[out + i / f[0]] += v as f64;
            }
        }
    }
    let cells = (f[0] * f[1] * f[2]) as f64;
    sums.into_iter().map(|s| (s / cells) as f32).collect()
}

#[cfg(test)]
mod tests {
    use super::{block_mean, head, pearson};

    #[test]
    fn head_is_the_union_of_both_foregrounds() {
        let a = [-1.0, 0.2, -1.0, -0.95];
        let b = [-1.0, -1.0, 0.5, -0.95];
        assert_eq!(head(&a, &b, -0.9), vec![false, true, true, false]);
    }

    #[test]
    fn pearson_of_affine_copies_and_edge_cases() {
        let a = [0.1f32, 0.5, -0.3, 0.9, 0.0];
        let b: Vec<f32> = a.iter().map(|x| 0.5 * x - 0.2).collect();
        let all = [true; 5];
        assert!((pearson(&a, &b, &all).unwrap() - 1.0).abs() < 1e-6);
        let neg: Vec<f32> = a.iter().map(|x| -x).collect();
        assert!((pearson(&a, &neg, &all).unwrap() + 1.0).abs() < 1e-6);
        assert_eq!(pearson(&a, &[0.3; 5], &all), Some(0.0));
        assert_eq!(pearson(&a, &b, &[false; 5]), None);
        // Only the masked voxels count: a disagreement outside the mask changes nothing.
        let mut c = b.clone();
        c[4] = 5.0;
        let mask = [true, true, true, true, false];
        assert!((pearson(&a, &c, &mask).unwrap() - 1.0).abs() < 1e-6);
    }

    #[test]
    fn block_mean_averages_whole_blocks() {
        let dims = [5, 4, 2];
        let data: Vec<f32> = (0..40).map(|x| x as f32).collect();
        let m = block_mean(&data, dims, 2);
        // Blocks of 2x2x2 over i 0..4 (i = 4 dropped), j 0..4, k 0..2: 2 x 2 x 1.
        assert_eq!(m.len(), 4);
        let at = |i: usize, j: usize, k: usize| (i + 5 * (j + 4 * k)) as f32;
        let first = [at(0, 0, 0), at(1, 0, 0), at(0, 1, 0), at(1, 1, 0)]
            .iter()
            .chain(&[at(0, 0, 1), at(1, 0, 1), at(0, 1, 1), at(1, 1, 1)])
            .sum::<f32>()
            / 8.0;
        assert_eq!(m[0], first);
        assert_eq!(m[1], first + 2.0);
        assert_eq!(m[2], first + 10.0);
        // A factor larger than an axis takes the whole axis.
        assert_eq!(block_mean(&data, dims, 8).len(), 1);
    }
}
