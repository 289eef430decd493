//! Deterministic test data: a splitmix64 generator and smooth synthetic volumes.
#![allow(dead_code)]

/// splitmix64: tiny, deterministic, good enough for test noise.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [-1, 1).
    pub fn sym(&mut self) -> f64 {
        2.0 * self.unit() - 1.0
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u = 1.0 - self.unit();
        let v = self.unit();
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
}

pub fn voxels(dims: [usize; 3]) -> usize {
    dims.iter().product()
}

/// Calls `f(i, j, k)` in file order.
pub fn volume(dims: [usize; 3], mut f: impl FnMut(usize, usize, usize) -> f64) -> Vec<f32> {
    let mut v = Vec::with_capacity(voxels(dims));
    for k in 0..dims[2] {
        for j in 0..dims[1] {
            for i in 0..dims[0] {
                v.push(f(i, j, k) as f32);
            }
        }
    }
    v
}

/// A smooth pattern in about [-0.8, 0.8], evaluated at `i + shift`.
pub fn smooth_at(i: f64, j: f64, k: f64) -> f64 {
    use std::f64::consts::PI;
    0.5 * (2.0 * PI * i / 12.0).sin() * (2.0 * PI * j / 16.0).cos()
        + 0.3 * (2.0 * PI * k / 10.0).sin()
}

pub fn smooth(dims: [usize; 3], shift: f64) -> Vec<f32> {
    volume(dims, |i, j, k| {
        smooth_at(i as f64 + shift, j as f64, k as f64)
    })
}

pub fn add_noise(v: &[f32], scale: f64, seed: u64) -> Vec<f32> {
    let mut r = Rng(seed);
    v.iter()
        .map(|&x| (x as f64 + scale * r.sym()) as f32)
        .collect()
}

/// Head-like labels in file order: 2 within `r_core` of `center`, 1 within `r_head`, 0 beyond.
pub fn ball_labels(dims: [usize; 3], center: [f64; 3], r_head: f64, r_core: f64) -> Vec<u32> {
    let mut out = Vec::new();
    for k in 0..dims[2] {
        for j in 0..dims[1] {
            for i in 0..dims[0] {
                let r = ((i as f64 - center[0]).powi(2)
                    + (j as f64 - center[1]).powi(2)
                    + (k as f64 - center[2]).powi(2))
                .sqrt();
                out.push(if r < r_core {
                    2
                } else if r < r_head {
                    1
                } else {
                    0
                });
            }
        }
    }
    out
}

/// An image of `labels`: each voxel its label's mean plus uniform noise of half-width `noise`.
pub fn labelled_image(labels: &[u32], means: [f64; 3], noise: f64, seed: u64) -> Vec<f32> {
    let mut r = Rng(seed);
    labels
        .iter()
        .map(|&l| (means[l as usize] + noise * r.sym()) as f32)
        .collect()
}

/// Whether `r` is the error for an input of length `got` where `expected` was needed.
pub fn is_length_mismatch<T>(r: &medddpm_metrics::Result<T>, expected: usize, got: usize) -> bool {
    matches!(
        r,
        Err(medddpm_metrics::MetricsError::LengthMismatch { expected: e, got: g, .. })
            if (*e, *g) == (expected, got)
    )
}
