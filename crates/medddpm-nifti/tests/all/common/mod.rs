//! Helpers shared by the integration tests.
#![allow(dead_code, unused_imports)]

pub use medddpm_testdata::shared_dir;

pub use medddpm_testdata::dataset;

/// Affine with diagonal `d` and origin `o`.
pub fn diag_affine(d: [f64; 3], o: [f64; 3]) -> [[f64; 4]; 4] {
    [
        [d[0], 0.0, 0.0, o[0]],
        [0.0, d[1], 0.0, o[1]],
        [0.0, 0.0, d[2], o[2]],
        [0.0, 0.0, 0.0, 1.0],
    ]
}

/// Max absolute elementwise difference of two affines.
pub fn affine_diff(a: &[[f64; 4]; 4], b: &[[f64; 4]; 4]) -> f64 {
    a.iter()
        .flatten()
        .zip(b.iter().flatten())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

/// Voxel count of each integer label 0..n.
pub fn label_counts(data: &[f32], n: usize) -> Vec<usize> {
    let mut c = vec![0; n];
    for &v in data {
        assert!(
            v.fract() == 0.0 && v >= 0.0 && (v as usize) < n,
            "unexpected label {v}"
        );
        c[v as usize] += 1;
    }
    c
}
