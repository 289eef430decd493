//! Flip, rotation and scaling of a whole label map on its own grid, by nearest neighbour.
//!
//! Rotations and scalings are done in world space (mm), about the grid's centre, so voxels
//! that are not cubes are not sheared: output voxel `v` takes the label of input voxel
//! `c + M (v - c)` (rounded), where `c` is the grid's centre in voxels and
//! `M = L^-1 R^T L / s` with `L` the affine's 3x3 part, `R` the rotation and `s` the scale.

use medddpm_nifti::Affine;

use super::error::AugmentError;

/// A 3x3 matrix, rows first.
pub(crate) type Mat3 = [[f64; 3]; 3];

/// The voxel axis that runs left-right: the one whose affine column points most along world
/// x (largest |x| share of the column's length).
pub(crate) fn lr_axis(affine: &Affine) -> Result<usize, AugmentError> {
    let share = |a: usize| {
        let len = (0..3).map(|r| affine[r][a].powi(2)).sum::<f64>().sqrt();
        affine[0][a].abs() / len
    };
    let shares = [0, 1, 2].map(share);
    if shares.iter().any(|s| !s.is_finite()) {
        return Err(AugmentError::DegenerateAffine {
            affine: Box::new(*affine),
        });
    }
    Ok((0..3).fold(0, |best, a| if shares[a] > shares[best] { a } else { best }))
}

/// `data` (file order, `dims`) mirrored along voxel axis `axis`: index `x` of that axis takes
/// the value of index `n - 1 - x`.
pub(crate) fn mirror(data: &[f32], dims: [usize; 3], axis: usize) -> Vec<f32> {
    let [ni, nj, _] = dims;
    let n = dims[axis];
    let mut out = Vec::with_capacity(data.len());
    for (at, _) in data.iter().enumerate() {
        let mut ijk = [at % ni, (at / ni) % nj, at / (ni * nj)];
        ijk[axis] = n - 1 - ijk[axis];
        out.push(data[ijk[0] + ni * (ijk[1] + nj * ijk[2])]);
    }
    out
}

/// The rotation by `deg` degrees about world x, then y, then z: `Rz Ry Rx` (also
/// `medddpm-prepare`'s demo augmentation's).
pub fn rotation(deg: [f64; 3]) -> Mat3 {
    let [x, y, z] = deg.map(f64::to_radians);
    let rx = [
        [1.0, 0.0, 0.0],
        [0.0, x.cos(), -x.sin()],
        [0.0, x.sin(), x.cos()],
    ];
    let ry = [
        [y.cos(), 0.0, y.sin()],
        [0.0, 1.0, 0.0],
        [-y.sin(), 0.0, y.cos()],
    ];
    let rz = [
        [z.cos(), -z.sin(), 0.0],
        [z.sin(), z.cos(), 0.0],
        [0.0, 0.0, 1.0],
    ];
    mul(&rz, &mul(&ry, &rx))
}

fn mul(a: &Mat3, b: &Mat3) -> Mat3 {
    std::array::from_fn(|i| std::array::from_fn(|j| (0..3).map(|k| a[i][k] * b[k][j]).sum()))
}

fn transpose(a: &Mat3) -> Mat3 {
    std::array::from_fn(|i| std::array::from_fn(|j| a[j][i]))
}

fn scaled(a: &Mat3, s: f64) -> Mat3 {
    a.map(|row| row.map(|x| x * s))
}

/// The inverse of `a`, or `None` when it is (nearly) singular.
fn invert(a: &Mat3) -> Option<Mat3> {
    let det = a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1])
        - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0])
        + a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0]);
    if !det.is_finite() || det.abs() < 1e-12 {
        return None;
    }
    Some(std::array::from_fn(|i| {
        std::array::from_fn(|j| {
            // Cofactor of (j, i), divided by the determinant.
            let (r0, r1) = ((j + 1) % 3, (j + 2) % 3);
            let (c0, c1) = ((i + 1) % 3, (i + 2) % 3);
            (a[r0][c0] * a[r1][c1] - a[r0][c1] * a[r1][c0]) / det
        })
    }))
}

/// Rotation and scale in voxel terms: `back` maps an output voxel's offset from the centre
/// to the input's, `forward` the other way.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct VoxelMap {
    pub back: Mat3,
    pub forward: Mat3,
}

impl VoxelMap {
    /// The map of rotation `deg` and scale `s` on a grid with affine `affine`.
    pub fn new(affine: &Affine, deg: [f64; 3], s: f64) -> Result<Self, AugmentError> {
        let l: Mat3 = std::array::from_fn(|i| std::array::from_fn(|j| affine[i][j]));
        let l_inv = invert(&l).ok_or_else(|| AugmentError::DegenerateAffine {
            affine: Box::new(*affine),
        })?;
        let r = rotation(deg);
        Ok(Self {
            back: scaled(&mul(&l_inv, &mul(&transpose(&r), &l)), 1.0 / s),
            forward: scaled(&mul(&l_inv, &mul(&r, &l)), s),
        })
    }
}

/// The grid's centre, in voxels.
pub(crate) fn centre(dims: [usize; 3]) -> [f64; 3] {
    dims.map(|n| (n as f64 - 1.0) / 2.0)
}

/// The voxel nearest to position `p` along an axis of `n` voxels, if it is on the grid.
pub(crate) fn nearest(p: f64, n: usize) -> Option<usize> {
    let r = (p + 0.5).floor();
    (r >= 0.0 && r < n as f64).then_some(r as usize)
}

/// `data` resampled through `m.back` about the grid's centre, by nearest neighbour; output
/// voxels whose source lies off the grid take background (0).
pub(crate) fn resample(data: &[f32], dims: [usize; 3], m: &Mat3) -> Vec<f32> {
    let [ni, nj, nk] = dims;
    let c = centre(dims);
    let mut out = Vec::with_capacity(data.len());
    for k in 0..nk {
        for j in 0..nj {
            let d = [-c[0], j as f64 - c[1], k as f64 - c[2]];
            let start: [f64; 3] =
                std::array::from_fn(|r| c[r] + m[r][0] * d[0] + m[r][1] * d[1] + m[r][2] * d[2]);
            for i in 0..ni {
                let u: [f64; 3] = std::array::from_fn(|r| start[r] + m[r][0] * i as f64);
                let value = match (nearest(u[0], ni), nearest(u[1], nj), nearest(u[2], nk)) {
                    (Some(a), Some(b), Some(g)) => data[a + ni * (b + nj * g)],
                    _ => 0.0,
                };
                out.push(value);
            }
        }
    }
    out
}

/// How many of the voxels `which` selects land off the grid when mapped by `m.forward` about
/// the grid's centre.
pub(crate) fn off_grid(
    data: &[f32],
    dims: [usize; 3],
    m: &Mat3,
    which: impl Fn(f32) -> bool,
) -> usize {
    let [ni, nj, _] = dims;
    let c = centre(dims);
    data.iter()
        .enumerate()
        .filter(|(_, &v)| which(v))
        .filter(|(at, _)| {
            let ijk = [at % ni, (at / ni) % nj, at / (ni * nj)];
            let d: [f64; 3] = std::array::from_fn(|r| ijk[r] as f64 - c[r]);
            (0..3).any(|r| {
                let p = c[r] + m[r][0] * d[0] + m[r][1] * d[1] + m[r][2] * d[2];
                nearest(p, dims[r]).is_none()
            })
        })
        .count()
}

#[cfg(test)]
mod tests {
    use medddpm_nifti::IDENTITY;

    use super::*;

    const EYE: Mat3 = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];

    /// The BraTS samples' affine: i runs right-to-left, j anterior-to-posterior.
    const LAS: Affine = [
        [-1.0, 0.0, 0.0, -24.0],
        [0.0, -1.0, 0.0, 215.0],
        [0.0, 0.0, 1.0, 6.0],
        [0.0, 0.0, 0.0, 1.0],
    ];

    #[test]
    fn the_left_right_axis_comes_from_the_affine() {
        assert_eq!(lr_axis(&IDENTITY).unwrap(), 0);
        assert_eq!(lr_axis(&LAS).unwrap(), 0);
        // Axes stored (j, k, i)-first: x runs along voxel axis 2; a longer column elsewhere
        // does not win by its length.
        let permuted = [
            [0.0, 0.0, 1.5, 0.0],
            [3.0, 0.0, 0.1, 0.0],
            [0.0, 2.0, 0.0, 0.0],
            [0.0, 0.0, 0.0, 1.0],
        ];
        assert_eq!(lr_axis(&permuted).unwrap(), 2);
        let mut flat = IDENTITY;
        flat[0][1] = 0.0;
        flat[1][1] = 0.0;
        assert!(matches!(
            lr_axis(&flat),
            Err(AugmentError::DegenerateAffine { .. })
        ));
    }

    #[test]
    fn mirror_reverses_one_axis_and_twice_is_identity() {
        let dims = [3, 2, 2];
        let data: Vec<f32> = (0..12).map(|x| x as f32).collect();
        let m = mirror(&data, dims, 0);
        assert_eq!(&m[..6], &[2.0, 1.0, 0.0, 5.0, 4.0, 3.0]);
        assert_eq!(&mirror(&data, dims, 2)[..3], &[6.0, 7.0, 8.0]);
        assert_eq!(mirror(&m, dims, 0), data);
    }

    #[test]
    fn rotations_keep_lengths_and_turn_the_right_way() {
        let r = rotation([0.0, 0.0, 90.0]);
        // About z, x goes to y.
        let x_to = [r[0][0], r[1][0], r[2][0]];
        assert!((x_to[1] - 1.0).abs() < 1e-12 && x_to[0].abs() < 1e-12);
        let r = rotation([7.0, -3.0, 11.0]);
        let rtr = mul(&transpose(&r), &r);
        for (i, row) in rtr.iter().enumerate() {
            for (j, x) in row.iter().enumerate() {
                assert!((x - EYE[i][j]).abs() < 1e-12);
            }
        }
    }

    #[test]
    fn zero_rotation_and_unit_scale_resample_to_the_same_labels() {
        let dims = [5, 4, 3];
        let data: Vec<f32> = (0..60).map(|x| (x % 5) as f32).collect();
        let m = VoxelMap::new(&LAS, [0.0; 3], 1.0).unwrap();
        assert_eq!(resample(&data, dims, &m.back), data);
        assert_eq!(off_grid(&data, dims, &m.forward, |v| v > 0.0), 0);
    }

    #[test]
    fn a_quarter_turn_in_world_space_on_anisotropic_voxels() {
        // 2 mm voxels along i, 1 mm along j: voxel centres lie at -4..4 mm from the centre
        // on both axes, so a quarter turn about z maps them onto each other.
        let affine = [
            [2.0, 0.0, 0.0, 0.0],
            [0.0, 1.0, 0.0, 0.0],
            [0.0, 0.0, 1.0, 0.0],
            [0.0, 0.0, 0.0, 1.0],
        ];
        let dims = [5, 9, 1];
        let mut data = vec![0.0; 5 * 9];
        data[4] = 1.0; // i = 4, j = 0: (+4, -4) mm
        let m = VoxelMap::new(&affine, [0.0, 0.0, 90.0], 1.0).unwrap();
        let out = resample(&data, dims, &m.back);
        // (+4, -4) mm turns to (+4, +4) mm: i = 4, j = 8. The voxel is 2 mm wide along x, so
        // turned it spans y = 3..5 mm, and j = 7 (y = 3 mm, a tie at its edge) takes it too.
        let labelled: Vec<usize> = (0..45).filter(|&at| out[at] == 1.0).collect();
        assert_eq!(labelled, [4 + 5 * 7, 4 + 5 * 8]);
        assert_eq!(off_grid(&data, dims, &m.forward, |v| v == 1.0), 0);
    }

    #[test]
    fn scaling_up_pushes_edge_voxels_off_the_grid() {
        let dims = [10, 10, 10];
        let mut data = vec![0.0; 1000];
        data[0] = 2.0;
        data[555] = 2.0;
        let m = VoxelMap::new(&IDENTITY, [0.0; 3], 1.2).unwrap();
        assert_eq!(off_grid(&data, dims, &m.forward, |v| v == 2.0), 1);
        let m = VoxelMap::new(&IDENTITY, [0.0; 3], 0.8).unwrap();
        assert_eq!(off_grid(&data, dims, &m.forward, |v| v == 2.0), 0);
    }
}
