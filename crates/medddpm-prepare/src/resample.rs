//! Resampling a volume onto another grid through an index map, so the output's affine and
//! its voxels agree: output voxel `x` holds the input's value at input index `M x`, and the
//! output affine is `A_in M`, so both name the same world point.

use medddpm_nifti::{Affine, Interpolation, NiftiError, Volume, IDENTITY};

/// `a * b` for 4x4 matrices.
pub fn matmul(a: &Affine, b: &Affine) -> Affine {
    let mut c = [[0.0; 4]; 4];
    for (i, row) in c.iter_mut().enumerate() {
        for (j, x) in row.iter_mut().enumerate() {
            *x = (0..4).map(|k| a[i][k] * b[k][j]).sum();
        }
    }
    c
}

/// The inverse of an affine (last row `[0, 0, 0, 1]`), or `None` when it is singular.
pub fn invert(a: &Affine) -> Option<Affine> {
    let m = |i: usize, j: usize| a[i][j];
    let det = m(0, 0) * (m(1, 1) * m(2, 2) - m(1, 2) * m(2, 1))
        - m(0, 1) * (m(1, 0) * m(2, 2) - m(1, 2) * m(2, 0))
        + m(0, 2) * (m(1, 0) * m(2, 1) - m(1, 1) * m(2, 0));
    if det.abs() < 1e-12 || !det.is_finite() {
        return None;
    }
    let mut r = IDENTITY;
    for (i, row) in r.iter_mut().take(3).enumerate() {
        for (j, x) in row.iter_mut().take(3).enumerate() {
            // Cofactor of (j, i), divided by the determinant.
            let (r0, r1) = ((j + 1) % 3, (j + 2) % 3);
            let (c0, c1) = ((i + 1) % 3, (i + 2) % 3);
            *x = (m(r0, c0) * m(r1, c1) - m(r0, c1) * m(r1, c0)) / det;
        }
        row[3] = -(0..3).map(|k| row[k] * a[k][3]).sum::<f64>();
    }
    Some(r)
}

/// Applies an affine to a point.
pub fn apply(a: &Affine, p: [f64; 3]) -> [f64; 3] {
    std::array::from_fn(|r| a[r][0] * p[0] + a[r][1] * p[1] + a[r][2] * p[2] + a[r][3])
}

/// Index map (output index -> input index) of a grid of `dims` at `spacing` mm, along the
/// input's own axes and centred on the input's centre: the field of view is cropped or padded
/// to `dims * spacing`.
pub fn centred_index_map(input: &Volume, dims: [usize; 3], spacing: [f64; 3]) -> Affine {
    let mut m = IDENTITY;
    for a in 0..3 {
        let scale = spacing[a] / input.spacing()[a];
        let centre_in = (input.dims()[a] as f64 - 1.0) / 2.0;
        let centre_out = (dims[a] as f64 - 1.0) / 2.0;
        m[a][a] = scale;
        m[a][3] = centre_in - centre_out * scale;
    }
    m
}

/// Samples `input` on a grid of `dims` whose index `x` lies at input index `index_map * x`;
/// the result's affine is `input.affine() * index_map`. Linear interpolation clamps positions
/// within half a voxel of the grid to its edge (as ITK and [`Volume::resize`] do); positions
/// further out, and for nearest those outside the input's voxels, take `fill`.
pub fn resample(
    input: &Volume,
    dims: [usize; 3],
    index_map: &Affine,
    interp: Interpolation,
    fill: f32,
) -> Result<Volume, NiftiError> {
    let [ni, nj, nk] = input.dims();
    let n = input.dims().map(|d| d as f64);
    let src = input.data();
    let at = |i: usize, j: usize, k: usize| src[i + ni * (j + nj * k)];
    let mut data = Vec::with_capacity(dims.iter().product());
    for z in 0..dims[2] {
        for y in 0..dims[1] {
            for x in 0..dims[0] {
                let p = apply(index_map, [x as f64, y as f64, z as f64]);
                if (0..3).any(|a| !(p[a] >= -0.5 && p[a] <= n[a] - 0.5)) {
                    data.push(fill);
                    continue;
                }
                let v = match interp {
                    Interpolation::Nearest => {
                        let q: [usize; 3] = std::array::from_fn(|a| {
                            ((p[a] + 0.5).floor() as usize).min(input.dims()[a] - 1)
                        });
                        at(q[0], q[1], q[2])
                    }
                    Interpolation::Linear => {
                        let c: [f64; 3] = std::array::from_fn(|a| p[a].clamp(0.0, n[a] - 1.0));
                        let i0: [usize; 3] = std::array::from_fn(|a| c[a].floor() as usize);
                        let i1: [usize; 3] =
                            std::array::from_fn(|a| (i0[a] + 1).min(input.dims()[a] - 1));
                        let w: [f64; 3] = std::array::from_fn(|a| c[a] - i0[a] as f64);
                        let lerp = |a: f64, b: f64, t: f64| a + (b - a) * t;
                        let plane = |k: usize| {
                            let r0 =
                                lerp(at(i0[0], i0[1], k) as f64, at(i1[0], i0[1], k) as f64, w[0]);
                            let r1 =
                                lerp(at(i0[0], i1[1], k) as f64, at(i1[0], i1[1], k) as f64, w[0]);
                            lerp(r0, r1, w[1])
                        };
                        lerp(plane(i0[2]), plane(i1[2]), w[2]) as f32
                    }
                };
                data.push(v);
            }
        }
    }
    let _ = nk;
    Volume::new(dims, data, matmul(input.affine(), index_map))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inverse_of_a_rotation_with_offset() {
        let (s, c) = (0.3f64.sin(), 0.3f64.cos());
        let a: Affine = [
            [c * 2.0, -s, 0.0, 5.0],
            [s * 2.0, c, 0.0, -3.0],
            [0.0, 0.0, -1.5, 7.0],
            [0.0, 0.0, 0.0, 1.0],
        ];
        let inv = invert(&a).unwrap();
        let id = matmul(&a, &inv);
        for (i, row) in id.iter().enumerate() {
            for (j, x) in row.iter().enumerate() {
                assert!((x - IDENTITY[i][j]).abs() < 1e-12, "{id:?}");
            }
        }
        let mut singular = a;
        singular[2][2] = 0.0;
        assert!(invert(&singular).is_none());
    }

    #[test]
    fn identity_map_copies_and_out_of_grid_is_filled() {
        let v = Volume::new([3, 2, 1], (0..6).map(|x| x as f32).collect(), IDENTITY).unwrap();
        let r = resample(&v, [3, 2, 1], &IDENTITY, Interpolation::Linear, -9.0).unwrap();
        assert_eq!(r.data(), v.data());
        // Shift by one voxel along i: the last column falls one voxel outside.
        let mut m = IDENTITY;
        m[0][3] = 1.0;
        let r = resample(&v, [3, 2, 1], &m, Interpolation::Nearest, -9.0).unwrap();
        assert_eq!(r.data(), &[1.0, 2.0, -9.0, 4.0, 5.0, -9.0]);
        assert_eq!(r.affine()[0][3], 1.0);
        // Half a voxel: linear interpolates between neighbours and clamps at the edge.
        m[0][3] = 0.5;
        let r = resample(&v, [3, 2, 1], &m, Interpolation::Linear, -9.0).unwrap();
        assert_eq!(r.data(), &[0.5, 1.5, 2.0, 3.5, 4.5, 5.0]);
    }
}
