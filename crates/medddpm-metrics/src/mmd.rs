//! Maximum mean discrepancy between a real and a synthetic set of feature vectors.
//!
//! With the handful of volumes an evaluation usually has, MMD is noisy: compare values only
//! between runs with the same set sizes, and read small differences as noise.

use serde::{Deserialize, Serialize};

use crate::error::{check_len, MetricsError, Result};

/// Which MMD^2 estimator produced a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MmdEstimator {
    /// Within-set sums exclude the diagonal; unbiased, can be slightly negative.
    Unbiased,
    /// Within-set sums include the diagonal (V-statistic); always >= 0, biased upwards.
    Biased,
}

/// An MMD^2 value with how it was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Mmd {
    /// The squared MMD.
    pub value: f64,
    /// RBF bandwidth used.
    pub sigma: f64,
    /// Estimator used (biased when a set has a single element).
    pub estimator: MmdEstimator,
    /// Size of the first (real) set.
    pub n_x: usize,
    /// Size of the second (synthetic) set.
    pub n_y: usize,
}

fn sq_dist(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

fn check_sets(x: &[Vec<f64>], y: &[Vec<f64>]) -> Result<usize> {
    if x.is_empty() {
        return Err(MetricsError::Empty {
            what: "first (real) feature set".into(),
        });
    }
    if y.is_empty() {
        return Err(MetricsError::Empty {
            what: "second (synthetic) feature set".into(),
        });
    }
    let dim = x[0].len();
    if dim == 0 {
        return Err(MetricsError::Empty {
            what: "feature vector".into(),
        });
    }
    for (n, v) in x.iter().enumerate() {
        check_len(&format!("first set, feature vector {n}"), dim, v.len())?;
    }
    for (n, v) in y.iter().enumerate() {
        check_len(&format!("second set, feature vector {n}"), dim, v.len())?;
    }
    if x.iter().chain(y).flatten().any(|v| !v.is_finite()) {
        return Err(MetricsError::InvalidParameter {
            name: "features",
            value: "non-finite".into(),
            reason: "feature vectors must be finite",
        });
    }
    Ok(dim)
}

/// Median of the pairwise Euclidean distances of the pooled sets.
///
/// When the median is 0 (more than half the pairs coincide) the mean of the non-zero distances
/// is used, and 1.0 when every point is the same, so the kernel stays defined.
pub fn median_heuristic(x: &[Vec<f64>], y: &[Vec<f64>]) -> f64 {
    let pooled: Vec<&Vec<f64>> = x.iter().chain(y).collect();
    let mut d: Vec<f64> = Vec::new();
    for (n, a) in pooled.iter().enumerate() {
        for b in &pooled[n + 1..] {
            d.push(sq_dist(a, b).sqrt());
        }
    }
    if d.is_empty() {
        return 1.0;
    }
    d.sort_by(f64::total_cmp);
    let m = d.len();
    let median = if m % 2 == 1 {
        d[m / 2]
    } else {
        0.5 * (d[m / 2 - 1] + d[m / 2])
    };
    if median > 0.0 {
        return median;
    }
    let nonzero: Vec<f64> = d.into_iter().filter(|&v| v > 0.0).collect();
    if nonzero.is_empty() {
        1.0
    } else {
        nonzero.iter().sum::<f64>() / nonzero.len() as f64
    }
}

fn resolve_sigma(x: &[Vec<f64>], y: &[Vec<f64>], sigma: Option<f64>) -> Result<f64> {
    match sigma {
        None => Ok(median_heuristic(x, y)),
        Some(s) if s.is_finite() && s > 0.0 => Ok(s),
        Some(s) => Err(MetricsError::InvalidParameter {
            name: "sigma",
            value: s.to_string(),
            reason: "RBF bandwidth must be finite and > 0",
        }),
    }
}

/// Sum of `k(a, b)` over pairs; `skip_diagonal` drops `a_i` with `b_i` (within-set sums).
fn kernel_sum(a: &[Vec<f64>], b: &[Vec<f64>], gamma: f64, skip_diagonal: bool) -> f64 {
    let mut s = 0.0;
    for (i, u) in a.iter().enumerate() {
        for (j, v) in b.iter().enumerate() {
            if !(skip_diagonal && i == j) {
                s += (-gamma * sq_dist(u, v)).exp();
            }
        }
    }
    s
}

fn mmd2(x: &[Vec<f64>], y: &[Vec<f64>], sigma: f64, estimator: MmdEstimator) -> Mmd {
    let gamma = 1.0 / (2.0 * sigma * sigma);
    let (m, n) = (x.len() as f64, y.len() as f64);
    let cross = kernel_sum(x, y, gamma, false) / (m * n);
    let value = match estimator {
        MmdEstimator::Unbiased => {
            kernel_sum(x, x, gamma, true) / (m * (m - 1.0))
                + kernel_sum(y, y, gamma, true) / (n * (n - 1.0))
                - 2.0 * cross
        }
        MmdEstimator::Biased => {
            kernel_sum(x, x, gamma, false) / (m * m) + kernel_sum(y, y, gamma, false) / (n * n)
                - 2.0 * cross
        }
    };
    Mmd {
        value,
        sigma,
        estimator,
        n_x: x.len(),
        n_y: y.len(),
    }
}

/// Unbiased MMD^2 with the Gaussian kernel `exp(-|a - b|^2 / (2 sigma^2))`.
///
/// `sigma: None` picks the bandwidth by [`median_heuristic`]. The unbiased estimator needs two
/// elements in each set; with a single element in either, the biased estimator is used instead
/// and `estimator` says so.
pub fn mmd2_unbiased(x: &[Vec<f64>], y: &[Vec<f64>], sigma: Option<f64>) -> Result<Mmd> {
    check_sets(x, y)?;
    let sigma = resolve_sigma(x, y, sigma)?;
    let estimator = if x.len() >= 2 && y.len() >= 2 {
        MmdEstimator::Unbiased
    } else {
        MmdEstimator::Biased
    };
    Ok(mmd2(x, y, sigma, estimator))
}

/// Biased (V-statistic) MMD^2, always >= 0 and exactly 0 for identical sets.
pub fn mmd2_biased(x: &[Vec<f64>], y: &[Vec<f64>], sigma: Option<f64>) -> Result<Mmd> {
    check_sets(x, y)?;
    let sigma = resolve_sigma(x, y, sigma)?;
    Ok(mmd2(x, y, sigma, MmdEstimator::Biased))
}

/// Intensity-histogram features: what MMD compares when no pretrained network is available.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FeatureOptions {
    /// Histogram bins.
    pub bins: usize,
    /// Lower edge of the first bin; values below are counted in it.
    pub low: f64,
    /// Upper edge of the last bin; values above are counted in it.
    pub high: f64,
}

impl Default for FeatureOptions {
    /// 32 bins over [-1, 1], the range of our normalised and generated volumes.
    fn default() -> Self {
        Self {
            bins: 32,
            low: -1.0,
            high: 1.0,
        }
    }
}

/// [`volume_features_with`] with 32 bins over [-1, 1].
pub fn volume_features(data: &[f32], mask: Option<&[bool]>) -> Result<Vec<f64>> {
    volume_features_with(data, mask, &FeatureOptions::default())
}

/// A feature vector of the voxels inside `mask`: the histogram as fractions summing to 1
/// (values clamped into the range), then the mean and the population standard deviation.
///
/// All entries have comparable scales for [-1, 1] data, so one RBF bandwidth suits them.
pub fn volume_features_with(
    data: &[f32],
    mask: Option<&[bool]>,
    opts: &FeatureOptions,
) -> Result<Vec<f64>> {
    if opts.bins == 0 || !(opts.low.is_finite() && opts.high.is_finite() && opts.high > opts.low) {
        return Err(MetricsError::InvalidParameter {
            name: "feature options",
            value: format!("{opts:?}"),
            reason: "need bins >= 1 and finite low < high",
        });
    }
    if data.is_empty() {
        return Err(MetricsError::Empty {
            what: "volume".into(),
        });
    }
    if let Some(m) = mask {
        check_len("mask", data.len(), m.len())?;
    }
    let mut hist = vec![0.0f64; opts.bins];
    let (mut n, mut sum, mut sum_sq) = (0usize, 0.0f64, 0.0f64);
    let scale = opts.bins as f64 / (opts.high - opts.low);
    for (v, &x) in data.iter().enumerate() {
        if mask.is_some_and(|m| !m[v]) {
            continue;
        }
        let x = x as f64;
        // NaN lands in bin 0 (`max` drops it); it still poisons mean and std, as it should.
        let bin = (((x - opts.low) * scale).floor().max(0.0) as usize).min(opts.bins - 1);
        hist[bin] += 1.0;
        n += 1;
        sum += x;
        sum_sq += x * x;
    }
    if n == 0 {
        return Err(MetricsError::EmptyMask {
            what: "feature mask".into(),
        });
    }
    let nf = n as f64;
    hist.iter_mut().for_each(|h| *h /= nf);
    let mean = sum / nf;
    hist.push(mean);
    hist.push((sum_sq / nf - mean * mean).max(0.0).sqrt());
    Ok(hist)
}
