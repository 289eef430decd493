//! The all-reduce against known answers, one thread per device as training runs it: each rank
//! passes `base * (rank + 1) + call`, whose mean over `n` ranks is `base * (n + 1) / 2 + call`,
//! for tensors of a few shapes in f32 and bf16, uniquely held, also held by the caller, and
//! transposed (not contiguous), several calls in a row before anything is read back: one
//! tensor at a time, all in one call, and all packed into one f32 all-reduce (what training
//! does with a step's gradients).

use burn::tensor::backend::DeviceOps;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Shape, Tensor, TensorData, TensorMetadata};
use serde::Serialize;

use super::{CollectiveBackend, CollectiveUnavailable};
use crate::dtype::cast_to;
use crate::primitive::{float, tensor};

/// Largest error of an f32 mean, relative to the largest expected magnitude (NCCL's mean
/// scales each rank's values by `1 / n` before summing).
pub const F32_TOLERANCE: f64 = 1e-6;
/// The same for bf16 (8-bit mantissa: a few roundings of `2^-9` relative each; the values are
/// small integers and halves, exact in bf16 for groups of one or two).
pub const BF16_TOLERANCE: f64 = 1.0 / 128.0;

/// Calls in a row, cycling through [`How`].
const CALLS: usize = 6;

/// How a call hands its tensors to the collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum How {
    /// `all_reduce_mean`, one tensor at a time.
    Each,
    /// `all_reduce_mean_many`, all tensors in one call.
    Many,
    /// `all_reduce_mean_packed`: all tensors in one call, packed into one f32 buffer.
    Packed,
}

impl How {
    fn of_call(call: usize) -> How {
        [How::Each, How::Many, How::Packed][call % 3]
    }
}

/// How a case's tensor reaches the collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Input {
    /// Held by the collective only: reduced in place.
    Owned,
    /// Also held by the caller, whose reference must keep the rank's own values.
    Shared,
    /// A transposed view (not contiguous) of a `[shape[1], shape[0]]` buffer.
    Transposed,
}

#[derive(Debug, Clone)]
struct Case {
    shape: Vec<usize>,
    dtype: DType,
    input: Input,
}

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for dtype in [DType::F32, DType::BF16] {
        let owned: [&[usize]; 5] = [&[1], &[7], &[3, 5, 4], &[64, 32, 3, 3, 3], &[(1 << 20) + 3]];
        for shape in owned {
            cases.push(Case {
                shape: shape.to_vec(),
                dtype,
                input: Input::Owned,
            });
        }
        cases.push(Case {
            shape: vec![3, 5, 4],
            dtype,
            input: Input::Shared,
        });
        cases.push(Case {
            shape: vec![33, 17],
            dtype,
            input: Input::Transposed,
        });
    }
    cases
}

/// One case of one call, over all ranks.
#[derive(Debug, Clone, Serialize)]
pub struct CollectiveRow {
    /// The tensor's shape.
    pub shape: Vec<usize>,
    /// `F32` or `BF16`.
    pub dtype: String,
    /// `owned`, `shared` or `transposed`.
    pub input: String,
    /// Which call in the row (0-based).
    pub call: usize,
    /// How the call handed its tensors over: `each`, `many` or `packed`.
    pub how: String,
    /// Largest `|mean - expected|` over the ranks, relative to the largest `|expected|` (at
    /// least 1).
    pub error: f64,
    /// Whether the caller's own reference kept its values (always true but for `shared`).
    pub input_kept: bool,
    /// Allowed `error`.
    pub tolerance: f64,
    /// Within tolerance, finite, and the input kept.
    pub pass: bool,
}

/// What [`check_all_reduce`] found.
#[derive(Debug, Clone, Serialize)]
pub struct CollectiveCheck {
    /// What ran the collective (e.g. "NCCL 2.21.5, 2 ranks").
    pub collective: String,
    /// Devices in the group.
    pub ranks: usize,
    /// One per case and call.
    pub rows: Vec<CollectiveRow>,
}

impl CollectiveCheck {
    /// Rows outside tolerance.
    pub fn failed(&self) -> usize {
        self.rows.iter().filter(|r| !r.pass).count()
    }
}

/// The pattern every rank scales: small integers, exact in bf16.
fn base(i: usize) -> f32 {
    (i % 13) as f32 - 6.0
}

/// Rank `rank`'s values in logical (row-major) order of the case's shape.
pub(super) fn rank_values(numel: usize, rank: usize, call: usize) -> Vec<f32> {
    (0..numel)
        .map(|i| base(i) * (rank + 1) as f32 + call as f32)
        .collect()
}

/// The mean over `ranks` ranks of [`rank_values`].
pub(super) fn expected_mean(numel: usize, ranks: usize, call: usize) -> Vec<f32> {
    (0..numel)
        .map(|i| base(i) * (ranks + 1) as f32 / 2.0 + call as f32)
        .collect()
}

/// The buffer of shape `[cols, rows]` whose transpose holds `values` (`[rows, cols]`,
/// row-major) in order.
pub(super) fn transposed_buffer(values: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut buf = vec![0.0; values.len()];
    for r in 0..rows {
        for c in 0..cols {
            buf[c * rows + r] = values[r * cols + c];
        }
    }
    buf
}

/// Largest `|got - want|`, relative to the largest `|want|` (at least 1); infinite when a value
/// is not finite or the lengths differ.
pub(super) fn relative_error(got: &[f32], want: &[f32]) -> f64 {
    if got.len() != want.len() || got.iter().any(|v| !v.is_finite()) {
        return f64::INFINITY;
    }
    let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs() as f64));
    let worst = got
        .iter()
        .zip(want)
        .fold(0.0f64, |m, (g, w)| m.max((*g as f64 - *w as f64).abs()));
    worst / scale
}

/// The case's input on `device` (a primitive of the case's shape and dtype) holding `values`.
fn make_input<B: CollectiveBackend>(
    case: &Case,
    values: &[f32],
    device: &B::Device,
) -> FloatTensor<B> {
    let numel = values.len();
    let data = match case.input {
        Input::Transposed => transposed_buffer(values, case.shape[0], case.shape[1]),
        _ => values.to_vec(),
    };
    let flat = Tensor::<B, 1>::from_data(TensorData::new(data, [numel]), device);
    let flat = float(cast_to(flat, case.dtype));
    match case.input {
        Input::Transposed => {
            let stored = B::float_reshape(flat, Shape::from(vec![case.shape[1], case.shape[0]]));
            B::float_swap_dims(stored, 0, 1)
        }
        _ => B::float_reshape(flat, Shape::from(case.shape.clone())),
    }
}

/// A primitive's values, as f32 in logical order.
fn read<B: CollectiveBackend>(t: FloatTensor<B>) -> Vec<f32> {
    let numel = t.shape().num_elements();
    let flat: Tensor<B, 1> = tensor(B::float_reshape(t, Shape::from(vec![numel])));
    let flat = cast_to(flat, DType::F32);
    flat.into_data().to_vec::<f32>().unwrap_or_default()
}

/// One call's outputs and, for shared inputs, the caller's references.
type Issued<B> = Vec<(FloatTensor<B>, Option<FloatTensor<B>>)>;

/// One rank's calls: all issued first, then read back. Returns (error, input kept) per call
/// and case.
fn run_rank<B: CollectiveBackend>(
    device: &B::Device,
    rank: usize,
    group: &[burn::tensor::backend::DeviceId],
) -> Result<Vec<(f64, bool)>, CollectiveUnavailable> {
    let cases = cases();
    let mut issued: Vec<Issued<B>> = Vec::new();
    for call in 0..CALLS {
        let mut inputs = Vec::new();
        let mut kept = Vec::new();
        for case in &cases {
            let numel = case.shape.iter().product();
            let x = make_input::<B>(case, &rank_values(numel, rank, call), device);
            kept.push((case.input == Input::Shared).then(|| x.clone()));
            inputs.push(x);
        }
        let outputs = match How::of_call(call) {
            How::Each => {
                let each = inputs.into_iter().map(|x| B::all_reduce_mean(x, group));
                each.collect::<Result<Vec<_>, _>>()?
            }
            How::Many => B::all_reduce_mean_many(inputs, group)?,
            How::Packed => B::all_reduce_mean_packed(inputs, group)?,
        };
        issued.push(outputs.into_iter().zip(kept).collect());
    }
    let mut found = Vec::new();
    for (call, outputs) in issued.into_iter().enumerate() {
        for (out, kept) in outputs {
            let numel = out.shape().num_elements();
            let want = expected_mean(numel, group.len(), call);
            let error = relative_error(&read::<B>(out), &want);
            let input_kept = kept.is_none_or(|k| read::<B>(k) == rank_values(numel, rank, call));
            found.push((error, input_kept));
        }
    }
    Ok(found)
}

/// Runs the all-reduce over `devices` (one thread each, a group of all of them) and compares
/// every mean with its known answer. Fails at once, before any device waits on another, when
/// the backend has no collective for this group.
pub fn check_all_reduce<B: CollectiveBackend>(
    devices: &[B::Device],
) -> Result<CollectiveCheck, CollectiveUnavailable> {
    let group: Vec<_> = devices.iter().map(|d| d.id()).collect();
    let collective = B::collective_available(&group)?;
    let per_rank: Vec<Result<Vec<(f64, bool)>, CollectiveUnavailable>> = std::thread::scope(|s| {
        let threads: Vec<_> = devices
            .iter()
            .enumerate()
            .map(|(rank, device)| {
                let group = &group;
                s.spawn(move || run_rank::<B>(device, rank, group))
            })
            .collect();
        threads
            .into_iter()
            .map(|t| {
                t.join().unwrap_or_else(|panic| {
                    let msg = crate::panics::panic_message(panic.as_ref()).to_string();
                    Err(CollectiveUnavailable(format!("a rank panicked: {msg}")))
                })
            })
            .collect()
    });
    let per_rank = per_rank.into_iter().collect::<Result<Vec<_>, _>>()?;
    Ok(CollectiveCheck {
        collective,
        ranks: devices.len(),
        rows: rows(&per_rank),
    })
}

/// The rows, each the worst over the ranks.
fn rows(per_rank: &[Vec<(f64, bool)>]) -> Vec<CollectiveRow> {
    let cases = cases();
    let mut rows = Vec::new();
    for call in 0..CALLS {
        for (i, case) in cases.iter().enumerate() {
            let at = call * cases.len() + i;
            let results = per_rank.iter().filter_map(|r| r.get(at));
            let (error, input_kept) = results.fold((0.0f64, true), |(e, k), (re, rk)| {
                (
                    if re.is_nan() {
                        f64::INFINITY
                    } else {
                        e.max(*re)
                    },
                    k && *rk,
                )
            });
            let how = How::of_call(call);
            // The packed call averages in f32 whatever the input's dtype.
            let tolerance = match (case.dtype, how) {
                (DType::BF16, How::Each | How::Many) => BF16_TOLERANCE,
                _ => F32_TOLERANCE,
            };
            rows.push(CollectiveRow {
                shape: case.shape.clone(),
                dtype: format!("{:?}", case.dtype),
                input: format!("{:?}", case.input).to_lowercase(),
                call,
                how: format!("{how:?}").to_lowercase(),
                error,
                input_kept,
                tolerance,
                pass: error.is_finite() && error <= tolerance && input_kept,
            });
        }
    }
    rows
}
