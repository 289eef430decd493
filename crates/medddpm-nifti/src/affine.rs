//! Voxel-to-world affines: choosing one from a header, and encoding one back as sform/qform.

use crate::NiftiHeader;

/// A 4x4 voxel-index -> world (mm) matrix, row-major, last row `[0, 0, 0, 1]`.
pub type Affine = [[f64; 4]; 4];

/// The identity affine.
pub const IDENTITY: Affine = [
    [1.0, 0.0, 0.0, 0.0],
    [0.0, 1.0, 0.0, 0.0],
    [0.0, 0.0, 1.0, 0.0],
    [0.0, 0.0, 0.0, 1.0],
];

/// Picks the affine the way nibabel's `get_best_affine` does for NIfTI-1: sform if
/// `sform_code > 0`, else qform if `qform_code > 0`, else NIfTI "method 1", `diag(pixdim)`
/// with a zero origin (nibabel centres that last fallback instead; no file here needs it).
pub fn header_affine(h: &NiftiHeader) -> Affine {
    if h.sform_code > 0 {
        let r = |row: [f32; 4]| row.map(f64::from);
        return [r(h.srow_x), r(h.srow_y), r(h.srow_z), [0.0, 0.0, 0.0, 1.0]];
    }
    let zoom = |p: f32| {
        if p.is_finite() && p > 0.0 {
            p as f64
        } else {
            1.0
        }
    };
    let [dx, dy, dz] = [zoom(h.pixdim[1]), zoom(h.pixdim[2]), zoom(h.pixdim[3])];
    if h.qform_code > 0 {
        let qfac = if h.pixdim[0] < 0.0 { -1.0 } else { 1.0 };
        let r = quaternion_to_rotation(h.quatern_b as f64, h.quatern_c as f64, h.quatern_d as f64);
        let s = [dx, dy, dz * qfac];
        let off = [h.qoffset_x, h.qoffset_y, h.qoffset_z].map(f64::from);
        let mut a = IDENTITY;
        for i in 0..3 {
            for j in 0..3 {
                a[i][j] = r[i][j] * s[j];
            }
            a[i][3] = off[i];
        }
        return a;
    }
    let mut a = IDENTITY;
    a[0][0] = dx;
    a[1][1] = dy;
    a[2][2] = dz;
    a
}

/// Rotation matrix of the unit quaternion (a, b, c, d), with `a` recovered from b, c, d as in
/// nifti1_io.c (if rounding makes b²+c²+d² exceed 1, `a` is 0 and (b, c, d) is renormalised).
fn quaternion_to_rotation(mut b: f64, mut c: f64, mut d: f64) -> [[f64; 3]; 3] {
    let sum = b * b + c * c + d * d;
    let a = if 1.0 - sum < 1e-7 {
        let n = sum.sqrt().max(f64::MIN_POSITIVE);
        (b, c, d) = (b / n, c / n, d / n);
        0.0
    } else {
        (1.0 - sum).sqrt()
    };
    [
        [
            a * a + b * b - c * c - d * d,
            2.0 * (b * c - a * d),
            2.0 * (b * d + a * c),
        ],
        [
            2.0 * (b * c + a * d),
            a * a + c * c - b * b - d * d,
            2.0 * (c * d - a * b),
        ],
        [
            2.0 * (b * d - a * c),
            2.0 * (c * d + a * b),
            a * a + d * d - c * c - b * b,
        ],
    ]
}

/// Quaternion parameters (b, c, d, qfac) of an affine whose 3x3 part is a rotation times a
/// positive scaling, or `None` when it shears (no qform can represent it).
pub(crate) fn affine_to_quaternion(a: &Affine) -> Option<[f64; 4]> {
    let mut r = [[0.0f64; 3]; 3];
    for j in 0..3 {
        let n = (0..3).map(|i| a[i][j] * a[i][j]).sum::<f64>().sqrt();
        if n == 0.0 || !n.is_finite() {
            return None;
        }
        for i in 0..3 {
            r[i][j] = a[i][j] / n;
        }
    }
    let det = r[0][0] * (r[1][1] * r[2][2] - r[1][2] * r[2][1])
        - r[0][1] * (r[1][0] * r[2][2] - r[1][2] * r[2][0])
        + r[0][2] * (r[1][0] * r[2][1] - r[1][1] * r[2][0]);
    let qfac = if det < 0.0 { -1.0 } else { 1.0 };
    for row in r.iter_mut() {
        row[2] *= qfac;
    }
    // Orthonormal columns, else there is shear.
    for j in 0..3 {
        for k in (j + 1)..3 {
            let dot: f64 = (0..3).map(|i| r[i][j] * r[i][k]).sum();
            if dot.abs() > 1e-4 {
                return None;
            }
        }
    }
    // Standard rotation-matrix -> quaternion conversion, branch chosen for stability.
    let t = r[0][0] + r[1][1] + r[2][2];
    let (qa, qb, qc, qd) = if t > 0.0 {
        let s = (t + 1.0).sqrt() * 2.0;
        (
            0.25 * s,
            (r[2][1] - r[1][2]) / s,
            (r[0][2] - r[2][0]) / s,
            (r[1][0] - r[0][1]) / s,
        )
    } else if r[0][0] > r[1][1] && r[0][0] > r[2][2] {
        let s = (1.0 + r[0][0] - r[1][1] - r[2][2]).sqrt() * 2.0;
        (
            (r[2][1] - r[1][2]) / s,
            0.25 * s,
            (r[0][1] + r[1][0]) / s,
            (r[0][2] + r[2][0]) / s,
        )
    } else if r[1][1] > r[2][2] {
        let s = (1.0 + r[1][1] - r[0][0] - r[2][2]).sqrt() * 2.0;
        (
            (r[0][2] - r[2][0]) / s,
            (r[0][1] + r[1][0]) / s,
            0.25 * s,
            (r[1][2] + r[2][1]) / s,
        )
    } else {
        let s = (1.0 + r[2][2] - r[0][0] - r[1][1]).sqrt() * 2.0;
        (
            (r[1][0] - r[0][1]) / s,
            (r[0][2] + r[2][0]) / s,
            (r[1][2] + r[2][1]) / s,
            0.25 * s,
        )
    };
    // NIfTI stores only b, c, d and assumes a >= 0.
    let sign = if qa < 0.0 { -1.0 } else { 1.0 };
    Some([sign * qb, sign * qc, sign * qd, qfac])
}

/// `a * b` for 4x4 matrices.
pub(crate) fn matmul(a: &Affine, b: &Affine) -> Affine {
    let mut c = [[0.0; 4]; 4];
    for i in 0..4 {
        for j in 0..4 {
            c[i][j] = (0..4).map(|k| a[i][k] * b[k][j]).sum();
        }
    }
    c
}

/// Affine that maps new voxel indices to old ones by a per-axis scale and offset.
pub(crate) fn index_map(scale: [f64; 3], offset: [f64; 3]) -> Affine {
    let mut m = IDENTITY;
    for a in 0..3 {
        m[a][a] = scale[a];
        m[a][3] = offset[a];
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &Affine, b: &Affine, tol: f64) -> bool {
        a.iter()
            .flatten()
            .zip(b.iter().flatten())
            .all(|(x, y)| (x - y).abs() < tol)
    }

    #[test]
    fn quaternion_round_trip_for_rotations_and_flips() {
        let cases: [Affine; 3] = [
            [
                [-1.0, 0.0, 0.0, -24.0],
                [0.0, -1.0, 0.0, 215.0],
                [0.0, 0.0, 1.0, 6.0],
                [0.0, 0.0, 0.0, 1.0],
            ],
            [
                [0.0, 0.0, 2.0, 1.0],
                [-1.5, 0.0, 0.0, 2.0],
                [0.0, 1.5, 0.0, 3.0],
                [0.0, 0.0, 0.0, 1.0],
            ],
            [
                [1.5, 0.0, 0.0, 0.0],
                [0.0, 1.5, 0.0, 0.0],
                [0.0, 0.0, -1.5, 0.0],
                [0.0, 0.0, 0.0, 1.0],
            ],
        ];
        for a in cases {
            let [b, c, d, qfac] = affine_to_quaternion(&a).unwrap();
            let mut h = NiftiHeader {
                qform_code: 1,
                quatern_b: b as f32,
                quatern_c: c as f32,
                quatern_d: d as f32,
                qoffset_x: a[0][3] as f32,
                qoffset_y: a[1][3] as f32,
                qoffset_z: a[2][3] as f32,
                ..Default::default()
            };
            h.pixdim[0] = qfac as f32;
            for (j, p) in h.pixdim[1..4].iter_mut().enumerate() {
                *p = a
                    .iter()
                    .take(3)
                    .map(|row| row[j] * row[j])
                    .sum::<f64>()
                    .sqrt() as f32;
            }
            assert!(close(&header_affine(&h), &a, 1e-5), "{a:?}");
        }
    }

    #[test]
    fn shear_has_no_quaternion() {
        let mut a = IDENTITY;
        a[0][1] = 0.5;
        assert!(affine_to_quaternion(&a).is_none());
    }

    #[test]
    fn fallback_is_diag_pixdim() {
        let mut h = NiftiHeader::default();
        h.pixdim[1..4].copy_from_slice(&[2.0, 3.0, 4.0]);
        let a = header_affine(&h);
        assert_eq!([a[0][0], a[1][1], a[2][2], a[0][3]], [2.0, 3.0, 4.0, 0.0]);
    }
}
