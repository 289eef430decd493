//! Binary-image tools for masks: Otsu's threshold, the largest connected component, hole
//! filling, and erosion, dilation, opening and closing by a ball given in mm (through an exact
//! Euclidean distance transform, so a radius costs the same at any size and anisotropic voxels
//! are handled).
//!
//! Masks are `bool` slices in file order (`i + ni * (j + nj * k)`) with their dims.

/// Otsu's threshold of `values` over a histogram of `bins` bins between their minimum and
/// maximum: the value that best splits them into a dark and a bright class (maximum
/// between-class variance). Voxels strictly above it are the bright class. `None` when there
/// are no finite values or all are equal.
pub fn otsu(values: impl Iterator<Item = f32> + Clone, bins: usize) -> Option<f64> {
    otsu_multi(values, bins, 2).map(|t| t[0])
}

/// Otsu's method for `classes` (2 or 3) classes: the `classes - 1` thresholds, ascending,
/// that maximise the between-class variance (Liao, Chen & Chung's multilevel form). A value
/// above threshold `n` and not above threshold `n + 1` is in class `n + 1`. `None` when there
/// are no finite values or all are equal; more than 3 classes are treated as 3.
pub fn otsu_multi(
    values: impl Iterator<Item = f32> + Clone,
    bins: usize,
    classes: usize,
) -> Option<Vec<f64>> {
    let bins = bins.max(3);
    let (lo, hi) = values.clone().filter(|v| v.is_finite()).fold(
        None,
        |acc: Option<(f32, f32)>, v| match acc {
            None => Some((v, v)),
            Some((a, b)) => Some((a.min(v), b.max(v))),
        },
    )?;
    if hi <= lo {
        return None;
    }
    let (lo, width) = (lo as f64, (hi - lo) as f64 / bins as f64);
    let mut hist = vec![0u64; bins];
    for v in values.filter(|v| v.is_finite()) {
        let b = ((v as f64 - lo) / width) as usize;
        hist[b.min(bins - 1)] += 1;
    }
    // Prefix sums of counts and of counts times bin centres: class [a, b) in O(1).
    let (mut count, mut moment) = (vec![0.0; bins + 1], vec![0.0; bins + 1]);
    for (b, &c) in hist.iter().enumerate() {
        count[b + 1] = count[b] + c as f64;
        moment[b + 1] = moment[b] + c as f64 * (lo + (b as f64 + 0.5) * width);
    }
    // Sum over classes of w * mu^2, which the split maximising between-class variance also
    // maximises.
    let score = |a: usize, b: usize| {
        let w = count[b] - count[a];
        if w == 0.0 {
            None
        } else {
            Some((moment[b] - moment[a]).powi(2) / w)
        }
    };
    let edge = |b: usize| lo + b as f64 * width;
    let mut best: (f64, Vec<f64>) = (f64::MIN, Vec::new());
    for k1 in 1..bins {
        let Some(s0) = score(0, k1) else { continue };
        if classes <= 2 {
            if let Some(s1) = score(k1, bins) {
                if s0 + s1 > best.0 {
                    best = (s0 + s1, vec![edge(k1)]);
                }
            }
            continue;
        }
        for k2 in k1 + 1..bins {
            let (Some(s1), Some(s2)) = (score(k1, k2), score(k2, bins)) else {
                continue;
            };
            if s0 + s1 + s2 > best.0 {
                best = (s0 + s1 + s2, vec![edge(k1), edge(k2)]);
            }
        }
    }
    (!best.1.is_empty()).then_some(best.1)
}

/// The six face neighbours of voxel `at` inside the grid.
fn neighbours(at: usize, dims: [usize; 3]) -> impl Iterator<Item = usize> {
    let [ni, nj, nk] = dims;
    let (i, j, k) = (at % ni, (at / ni) % nj, at / (ni * nj));
    let plane = ni * nj;
    [
        (i > 0).then(|| at - 1),
        (i + 1 < ni).then(|| at + 1),
        (j > 0).then(|| at - ni),
        (j + 1 < nj).then(|| at + ni),
        (k > 0).then(|| at - plane),
        (k + 1 < nk).then(|| at + plane),
    ]
    .into_iter()
    .flatten()
}

/// Marks every voxel of `mask` reachable from `seeds` through face neighbours in `mask`.
fn flood(mask: &[bool], dims: [usize; 3], seeds: impl Iterator<Item = usize>) -> Vec<bool> {
    let mut seen = vec![false; mask.len()];
    let mut stack: Vec<usize> = Vec::new();
    for s in seeds {
        if mask[s] && !seen[s] {
            seen[s] = true;
            stack.push(s);
        }
    }
    while let Some(at) = stack.pop() {
        for n in neighbours(at, dims) {
            if mask[n] && !seen[n] {
                seen[n] = true;
                stack.push(n);
            }
        }
    }
    seen
}

/// The largest 6-connected component of `mask` (empty if `mask` is).
pub fn largest_component(mask: &[bool], dims: [usize; 3]) -> Vec<bool> {
    let mut label = vec![0u32; mask.len()];
    let mut sizes: Vec<usize> = vec![0];
    let mut stack = Vec::new();
    for start in 0..mask.len() {
        if !mask[start] || label[start] != 0 {
            continue;
        }
        let id = sizes.len() as u32;
        let mut size = 0;
        label[start] = id;
        stack.push(start);
        while let Some(at) = stack.pop() {
            size += 1;
            for n in neighbours(at, dims) {
                if mask[n] && label[n] == 0 {
                    label[n] = id;
                    stack.push(n);
                }
            }
        }
        sizes.push(size);
    }
    let best = (1..sizes.len()).max_by_key(|&c| sizes[c]).unwrap_or(0) as u32;
    label.iter().map(|&l| l != 0 && l == best).collect()
}

/// `mask` with its holes filled: background is what is 6-connected to the grid's border
/// through background; everything else becomes foreground.
pub fn fill_holes(mask: &[bool], dims: [usize; 3]) -> Vec<bool> {
    let [ni, nj, nk] = dims;
    let background: Vec<bool> = mask.iter().map(|&m| !m).collect();
    let border = (0..mask.len()).filter(|&at| {
        let (i, j, k) = (at % ni, (at / ni) % nj, at / (ni * nj));
        i == 0 || j == 0 || k == 0 || i + 1 == ni || j + 1 == nj || k + 1 == nk
    });
    let outside = flood(&background, dims, border);
    outside.iter().map(|&o| !o).collect()
}

/// Squared distance transform along one line: `f` (0 at sites, infinity elsewhere, or the
/// result of a previous axis) becomes `min_q f(q) + (s (p - q))^2` (Felzenszwalb &
/// Huttenlocher's lower envelope of parabolas).
fn edt_line(f: &mut [f64], s2: f64, v: &mut Vec<usize>, z: &mut Vec<f64>) {
    v.clear();
    z.clear();
    let value = |f: &[f64], q: usize| f[q] + s2 * (q * q) as f64;
    for q in 0..f.len() {
        if !f[q].is_finite() {
            continue;
        }
        loop {
            let Some(&p) = v.last() else {
                v.push(q);
                z.push(f64::NEG_INFINITY);
                break;
            };
            let s = (value(f, q) - value(f, p)) / (2.0 * s2 * (q - p) as f64);
            if s <= *z.last().unwrap_or(&f64::NEG_INFINITY) && v.len() > 1 {
                v.pop();
                z.pop();
                continue;
            }
            v.push(q);
            z.push(s);
            break;
        }
    }
    if v.is_empty() {
        return;
    }
    let sites: Vec<(usize, f64)> = v.iter().map(|&q| (q, f[q])).collect();
    let mut k = 0;
    for (p, out) in f.iter_mut().enumerate() {
        while k + 1 < sites.len() && z[k + 1] < p as f64 {
            k += 1;
        }
        let (q, fq) = sites[k];
        let d = p as f64 - q as f64;
        *out = fq + s2 * d * d;
    }
}

/// Squared distance in mm² from every voxel to the nearest voxel of `mask` (0 inside it,
/// infinity everywhere when it is empty). `spacing` is the voxel size in mm along i, j, k.
pub fn distance_sq(mask: &[bool], dims: [usize; 3], spacing: [f64; 3]) -> Vec<f64> {
    let mut d: Vec<f64> = mask
        .iter()
        .map(|&m| if m { 0.0 } else { f64::INFINITY })
        .collect();
    let strides = [1, dims[0], dims[0] * dims[1]];
    let (mut v, mut z, mut line) = (Vec::new(), Vec::new(), Vec::new());
    for axis in 0..3 {
        let n = dims[axis];
        let s2 = spacing[axis] * spacing[axis];
        let stride = strides[axis];
        for start in 0..d.len() {
            // Line starts: voxels whose index along `axis` is 0.
            if !(start / stride).is_multiple_of(n) {
                continue;
            }
            line.clear();
            line.extend((0..n).map(|t| d[start + t * stride]));
            edt_line(&mut line, s2, &mut v, &mut z);
            for (t, &x) in line.iter().enumerate() {
                d[start + t * stride] = x;
            }
        }
    }
    d
}

/// Voxels within `radius` mm of `mask` (dilation by a ball).
pub fn dilate(mask: &[bool], dims: [usize; 3], spacing: [f64; 3], radius: f64) -> Vec<bool> {
    let r2 = radius * radius + 1e-9;
    distance_sq(mask, dims, spacing)
        .into_iter()
        .map(|d| d <= r2)
        .collect()
}

/// Voxels of `mask` further than `radius` mm from every voxel outside it (erosion by a ball);
/// the grid's border does not erode.
pub fn erode(mask: &[bool], dims: [usize; 3], spacing: [f64; 3], radius: f64) -> Vec<bool> {
    let outside: Vec<bool> = mask.iter().map(|&m| !m).collect();
    dilate(&outside, dims, spacing, radius)
        .into_iter()
        .map(|o| !o)
        .collect()
}

/// Dilation then erosion: closes gaps and dents narrower than the ball.
pub fn close(mask: &[bool], dims: [usize; 3], spacing: [f64; 3], radius: f64) -> Vec<bool> {
    erode(&dilate(mask, dims, spacing, radius), dims, spacing, radius)
}

/// Erosion then dilation: removes strands and specks thinner than the ball.
pub fn open(mask: &[bool], dims: [usize; 3], spacing: [f64; 3], radius: f64) -> Vec<bool> {
    dilate(&erode(mask, dims, spacing, radius), dims, spacing, radius)
}

/// Dice overlap of two masks (1 for two empty masks).
pub fn dice(a: &[bool], b: &[bool]) -> f64 {
    let both = a.iter().zip(b).filter(|(x, y)| **x && **y).count();
    let sum = a.iter().filter(|x| **x).count() + b.iter().filter(|x| **x).count();
    if sum == 0 {
        1.0
    } else {
        2.0 * both as f64 / sum as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn otsu_splits_two_clusters() {
        let v: Vec<f32> = (0..100)
            .map(|x| {
                if x < 60 {
                    10.0 + (x % 5) as f32
                } else {
                    100.0 + (x % 7) as f32
                }
            })
            .collect();
        let t = otsu(v.iter().copied(), 256).unwrap();
        assert!(t > 14.0 && t < 100.0, "{t}");
        assert!(otsu([3.0f32; 4].iter().copied(), 256).is_none());
        let three: Vec<f32> = (0..300)
            .map(|x| [10.0, 50.0, 90.0][x % 3] + (x % 4) as f32)
            .collect();
        let t = otsu_multi(three.iter().copied(), 256, 3).unwrap();
        assert!(
            t[0] > 13.0 && t[0] < 50.0 && t[1] > 53.0 && t[1] < 90.0,
            "{t:?}"
        );
    }

    #[test]
    fn distance_is_euclidean_in_mm() {
        let dims = [7, 5, 3];
        let mut m = vec![false; 105];
        m[3 + 7 * (2 + 5)] = true; // (3, 2, 1)
        let d = distance_sq(&m, dims, [1.0, 2.0, 3.0]);
        let at = |i: usize, j: usize, k: usize| d[i + 7 * (j + 5 * k)];
        assert_eq!(at(3, 2, 1), 0.0);
        assert_eq!(at(0, 2, 1), 9.0);
        assert_eq!(at(3, 0, 1), 16.0);
        assert_eq!(at(3, 2, 0), 9.0);
        assert_eq!(at(6, 4, 2), 9.0 + 16.0 + 9.0);
        assert!(distance_sq(&[false; 8], [2, 2, 2], [1.0; 3])[0].is_infinite());
    }

    #[test]
    fn components_holes_and_balls() {
        let dims = [9, 9, 9];
        let idx = |i: usize, j: usize, k: usize| i + 9 * (j + 9 * k);
        // A hollow cube shell (1..=7) and a lone voxel.
        let mut m = vec![false; 729];
        for k in 1..=7 {
            for j in 1..=7 {
                for i in 1..=7 {
                    let edge = [i, j, k].iter().any(|&x| x == 1 || x == 7);
                    m[idx(i, j, k)] = edge;
                }
            }
        }
        m[idx(0, 0, 0)] = true;
        let big = largest_component(&m, dims);
        assert!(!big[idx(0, 0, 0)] && big[idx(1, 1, 1)]);
        let filled = fill_holes(&big, dims);
        assert_eq!(filled.iter().filter(|x| **x).count(), 343);
        let eroded = erode(&filled, dims, [1.0; 3], 1.0);
        assert_eq!(eroded.iter().filter(|x| **x).count(), 125);
        let back = dilate(&eroded, dims, [1.0; 3], 1.0);
        // A 1 mm ball adds face neighbours only: the 5^3 cube plus 6 faces of 25.
        assert_eq!(back.iter().filter(|x| **x).count(), 125 + 6 * 25);
        assert_eq!(dice(&filled, &filled), 1.0);
    }
}
