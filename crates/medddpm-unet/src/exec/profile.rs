//! The per-operation timer's results: time per operation class, and summary statistics of each
//! operation's output for comparing layouts, backends and dtypes.

use std::collections::BTreeMap;

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;
use medddpm_kernels::Layout;
use serde::{Deserialize, Serialize};

/// Operation classes of the per-operation breakdown (the paper's kernel mix).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpClass {
    /// 3-D convolutions (including the strided downsampling ones).
    Convolution,
    /// GroupNorm.
    Normalisation,
    /// The attention blocks' projections, products and softmax.
    Attention,
    /// SiLU, residual additions, time-embedding addition, skip concatenation, layout changes.
    Elementwise,
    /// Trilinear x2 upsampling.
    Upsample,
}

impl OpClass {
    /// Every class, in the order reports list them.
    pub const ALL: [OpClass; 5] = [
        OpClass::Convolution,
        OpClass::Normalisation,
        OpClass::Attention,
        OpClass::Elementwise,
        OpClass::Upsample,
    ];

    /// Name used in reports.
    pub const fn name(self) -> &'static str {
        match self {
            OpClass::Convolution => "convolution",
            OpClass::Normalisation => "normalisation",
            OpClass::Attention => "attention",
            OpClass::Elementwise => "elementwise",
            OpClass::Upsample => "upsample",
        }
    }
}

/// Time spent per operation class in one or more profiled forward passes.
///
/// Each operation is synchronised on its own, so kernels that burn's fusion would otherwise
/// merge run separately: the sum is larger than an unprofiled forward and the split shows
/// where the unfused work goes.
#[derive(Debug, Clone, Default, Serialize)]
pub struct OpProfile {
    /// Milliseconds per class.
    pub ms: BTreeMap<String, f64>,
    /// Operations timed per class.
    pub calls: BTreeMap<String, usize>,
    /// A device synchronisation failed while profiling; the numbers are not trustworthy.
    pub sync_failed: bool,
    /// Set before the pass to test every operation's output for NaN and infinity (a read-back
    /// per operation: for locating a defect, not for timing).
    pub check_finite: bool,
    /// The first operation whose output was not finite (class, its index in that class, shape),
    /// when `check_finite` is set.
    pub first_non_finite: Option<String>,
    /// Set before the pass to record summary statistics of every operation's output in
    /// `stats` (a read-back per operation: for locating a wrong kernel, not for timing).
    pub record_stats: bool,
    /// One entry per operation, in execution order, when `record_stats` is set.
    pub stats: Vec<OpStats>,
}

/// Summary of one operation's output that can be compared between layouts, backends and
/// dtypes: a wrong kernel changes its output's moments or where its values lie.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpStats {
    /// Operation class and its 1-based index within the class (`convolution #12`).
    pub op: String,
    /// Shape as produced.
    pub dims: Vec<usize>,
    /// Shape in channels-first order (the channel axis moved from last to 1 under `Ndhwc`).
    pub canonical_dims: Vec<usize>,
    /// Sum of the values.
    pub sum: f64,
    /// Sum of squares.
    pub sum_sq: f64,
    /// Sum of absolute values.
    pub sum_abs: f64,
    /// Sum of the values weighted by a fixed pseudo-random function of their position in
    /// `dims` order: catches values that are right but in the wrong place.
    pub weighted: f64,
    /// The same in `canonical_dims` order.
    pub weighted_canonical: f64,
}

impl OpStats {
    /// Statistics of `out`, an operation's output in `layout`.
    pub fn of<B: Backend, const D: usize>(op: String, out: &Tensor<B, D>, layout: Layout) -> Self {
        let dims = out.dims().to_vec();
        let (mut sum, mut sum_sq, mut sum_abs, mut weighted) = (0.0, 0.0, 0.0, 0.0);
        for (i, v) in out.clone().into_data().iter::<f64>().enumerate() {
            sum += v;
            sum_sq += v * v;
            sum_abs += v.abs();
            weighted += position_weight(i) * v;
        }
        let (canonical_dims, weighted_canonical) = match layout {
            Layout::Ndhwc if D >= 3 => {
                let mut axes: [usize; D] = std::array::from_fn(|i| i);
                axes[1..].rotate_right(1);
                let canonical = out.clone().permute(axes);
                let canonical_dims = canonical.dims().to_vec();
                let weighted_canonical = canonical
                    .into_data()
                    .iter::<f64>()
                    .enumerate()
                    .map(|(i, v)| position_weight(i) * v)
                    .sum();
                (canonical_dims, weighted_canonical)
            }
            // Already channels-first: one read-back.
            _ => (dims.clone(), weighted),
        };
        Self {
            op,
            dims,
            canonical_dims,
            sum,
            sum_sq,
            sum_abs,
            weighted,
            weighted_canonical,
        }
    }

    /// How far this output is from `reference`'s, relative to the reference's size: about the
    /// relative error of the values for small errors, of order one for a wrong result. Infinite
    /// when the shapes differ or a value is not finite.
    pub fn deviation(&self, reference: &OpStats) -> f64 {
        let weighted = if self.canonical_dims == reference.dims {
            self.weighted_canonical
        } else if self.dims == reference.dims {
            self.weighted
        } else {
            return f64::INFINITY;
        };
        let rel = |a: f64, b: f64, scale: f64| (a - b).abs() / scale.max(f64::MIN_POSITIVE);
        let norm = reference.sum_sq.sqrt();
        let d = rel(self.sum_sq, reference.sum_sq, reference.sum_sq)
            .max(rel(self.sum_abs, reference.sum_abs, reference.sum_abs))
            .max(rel(weighted, reference.weighted, norm))
            .max(rel(
                self.sum,
                reference.sum,
                norm * (self.count() as f64).sqrt(),
            ));
        if d.is_nan() {
            f64::INFINITY
        } else {
            d
        }
    }

    /// Number of values.
    pub fn count(&self) -> usize {
        self.dims.iter().product()
    }
}

/// A fixed weight in [-0.5, 0.5) for position `i` (Fibonacci hashing).
fn position_weight(i: usize) -> f64 {
    let h = (i as u64)
        .wrapping_add(1)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        >> 40;
    h as f64 / (1u64 << 24) as f64 - 0.5
}

impl OpProfile {
    /// Sum over all classes, milliseconds.
    pub fn total_ms(&self) -> f64 {
        self.ms.values().sum()
    }

    /// Divides every time by `n` (to average over `n` profiled passes).
    pub fn scaled(&self, n: usize) -> OpProfile {
        let n = n.max(1) as f64;
        OpProfile {
            ms: self.ms.iter().map(|(k, v)| (k.clone(), v / n)).collect(),
            calls: self.calls.clone(),
            sync_failed: self.sync_failed,
            check_finite: self.check_finite,
            first_non_finite: self.first_non_finite.clone(),
            record_stats: self.record_stats,
            stats: self.stats.clone(),
        }
    }
}
