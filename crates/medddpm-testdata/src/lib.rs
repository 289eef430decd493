//! Test-only helper: where the shared real data and the reference's golden fixtures live, and
//! the seeded draws and comparisons that tests in several crates share.
//!
//! Tests read the data from `../shared` beside the checkout (CI has the same folder), or from
//! `MEDDDPM_SHARED_DIR`. They are never copied into the repository.
#![warn(missing_docs)]

use std::path::PathBuf;

/// The shared folder: `$MEDDDPM_SHARED_DIR`, else `<workspace>/../shared`.
///
/// # Panics
/// If the folder has no `datasets/`, with a message saying where it looked.
pub fn shared_dir() -> PathBuf {
    let dir = std::env::var_os("MEDDDPM_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"));
    assert!(
        dir.join("datasets").is_dir(),
        "shared data folder not found at {} (set MEDDDPM_SHARED_DIR)",
        dir.display()
    );
    dir
}

/// A file or folder under `shared/datasets`.
pub fn dataset(relative: &str) -> PathBuf {
    shared_dir().join("datasets").join(relative)
}

/// A file under `shared/fixtures`.
pub fn fixture(relative: &str) -> PathBuf {
    shared_dir().join("fixtures").join(relative)
}

/// Uniform draws in (0, 1) from xorshift64 seeded with `seed`: a generator of the test's own,
/// so its values stay the same whatever other tests running beside it draw.
pub fn xorshift_uniform(seed: u64) -> impl FnMut() -> f64 {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        ((state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
}

/// Standard normal draws from [`xorshift_uniform`]`(seed)` (Box-Muller, one pair of uniforms
/// a value): like it, the same values whatever other tests draw beside it.
pub fn xorshift_normal(seed: u64) -> impl FnMut() -> f64 {
    let mut uniform = xorshift_uniform(seed);
    move || {
        let (u, v) = (uniform(), uniform());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

/// A texture of three plane waves whose directions and phases are drawn from `state` (a
/// linear congruential generator): its value at `p`, a voxel's position relative to the
/// volume's centre, in about [-0.6, 0.8]. Distinct states make volumes that differ everywhere.
pub fn wave_texture(state: u64) -> impl Fn([f64; 3]) -> f32 {
    let mut state = state;
    let mut draw = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) as f64 / (1u64 << 31) as f64
    };
    let waves: Vec<[f64; 4]> = (0..3)
        .map(|_| [draw() - 0.5, draw() - 0.5, draw() - 0.5, 6.3 * draw()])
        .collect();
    move |p| {
        let t: f64 = waves
            .iter()
            .map(|w| (1.2 * (w[0] * p[0] + w[1] * p[1] + w[2] * p[2]) + w[3]).sin())
            .sum();
        (0.1 + 0.23 * t) as f32
    }
}

/// The largest absolute difference between `a` and `b`, value by value (NaN differences pass
/// unnoticed, as `f32::max` skips them).
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}
