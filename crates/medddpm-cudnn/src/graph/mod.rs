//! Convolutions through cuDNN's graph ("backend") API with execution plans built once per shape
//! and kept, for the device thread's calls.
//!
//! cuDNN 9's legacy calls (`cudnnConvolutionForward` and the two gradients) build and finalize an
//! execution plan inside every call: about 80 us of host time a call on an H200, with one shape
//! repeated or several alternating, where PyTorch's `conv3d` through the graph API and its plan
//! cache takes 16 us (`scripts/cudnn-legacy-overhead.py`; the figures are in the optimisation
//! log). cubecl's device thread makes about 130 such calls a training step. Here a shape's
//! plan is finalized once and each call only fills a variant pack (the buffers) and executes it.
//!
//! Which plan: the engine configurations cuDNN's heuristics (mode A) propose whose numerics the
//! precision allows (TF32: no inputs converted down to 16 bits, no reduced-precision sums),
//! each timed on the call's own buffers the first time a shape reaches the device thread (what
//! `cudnnFind*` does for the legacy algorithms), the fastest kept (the smallest workspace among
//! those within 5 % of it). For a shape that takes long enough to matter, the fastest
//! proposal's knobs (tile sizes and the like) are then tried one at a time over their ranges:
//! the heuristics propose one value of each, not always the fastest (TF32's largest weight
//! gradient: 8.10 ms as proposed, 7.72 with one knob changed, docs/benchmarks). Heuristics
//! modes B and fallback, timed too, proposed nothing faster for the weight gradients and
//! saved 0.6 ms over the two one-channel convolutions, at over a minute of searching in the
//! first training step; they are not asked. Choices are shared by the devices of one GPU model and
//! kept in `cudnn-plans.json` beside the algorithm cache, as the engine's global index and knob
//! values, from which a later run rebuilds the plan without timing again.

mod ffi;
mod op_graph;
mod search;
mod table;

use std::ffi::c_void;

use cudarc::cudnn::sys;
use serde::{Deserialize, Serialize};

use super::library::check;
use super::operands::{ConvOp, Ptrs};
use crate::compute::Precision;
use crate::error::EngineError;
use ffi::{finalize, set, set_i64, Desc, Owned, A, D, T};
use op_graph::OpGraph;
pub(super) use search::search;
pub(super) use table::PlanTable;

/// Byte alignment promised for every operand: a call whose buffers are not aligned so runs on
/// the legacy path instead.
pub(super) const ALIGNMENT: u64 = 16;

/// Largest workspace a plan may use (the legacy search's cap).
const MAX_WORKSPACE: i64 = 3 << 30;

/// Engine configurations asked of the heuristics.
const CANDIDATES: usize = 16;

/// Among plans within this factor of the fastest, the smallest workspace wins.
const NEAR_FASTEST: f32 = 1.05;

/// Operand ids in the graph: the input, the filter, the output-side tensor (`y` or `dy`).
const X: i64 = 1;
const W: i64 = 2;
const Y: i64 = 3;

/// One shape as the graph API describes it: every tensor's dimensions and strides in elements
/// (logical order `[n, c, d, h, w]`, the filter `[k, c, kd, kh, kw]`), the convolution's
/// padding and stride, the data type.
#[derive(Debug, Clone)]
pub(super) struct Geometry {
    pub op: ConvOp,
    pub dtype: sys::cudnnDataType_t,
    pub x: ([i64; 5], [i64; 5]),
    pub w: ([i64; 5], [i64; 5]),
    pub y: ([i64; 5], [i64; 5]),
    pub padding: [i64; 3],
    pub stride: [i64; 3],
    /// Which engines' numerics are acceptable (see [`allowed`]).
    pub precision: Precision,
}

/// A plan chosen for a shape: enough to rebuild it (engine and knobs) and its workspace.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(super) struct PlanChoice {
    pub engine: i64,
    /// `(knob type, value)` pairs.
    pub knobs: Vec<(u32, i64)>,
    pub workspace: usize,
    /// Milliseconds it took when timed.
    pub ms: f32,
    /// Milliseconds the fastest of the heuristics' own proposals took, before its knobs were
    /// tried (a record of what the knob search gained; absent in older tables).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposed_ms: Option<f32>,
}

/// What a heuristics proposal is made of (see [`OpGraph::describe`]).
pub(super) struct Described {
    /// The engine's global index.
    pub engine: i64,
    /// `(knob type, value)` pairs of the configuration.
    pub knobs: Vec<(u32, i64)>,
    /// The engine's numerical notes (`cudnnBackendNumericalNote_t` values), if cuDNN said.
    pub notes: Option<Vec<u32>>,
    /// The values each of the engine's knobs accepts (empty if cuDNN did not say: no knob
    /// search).
    pub ranges: Vec<KnobRange>,
}

/// The values one knob of an engine accepts: `min..=max` in steps of `stride`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct KnobRange {
    pub ty: u32,
    pub min: i64,
    pub max: i64,
    pub stride: i64,
}

/// Values tried of one knob at most: all of a short range, else its powers of two.
const VALUES_PER_KNOB: usize = 16;

/// The configurations one knob away from `knobs`: each knob in turn set to the other values
/// its range accepts (all of them when there are at most [`VALUES_PER_KNOB`], else the powers
/// of two within the range), at most `limit` in all, in knob order.
pub(super) fn knob_variants(
    knobs: &[(u32, i64)],
    ranges: &[KnobRange],
    limit: usize,
) -> Vec<Vec<(u32, i64)>> {
    let mut variants = Vec::new();
    for (i, &(ty, value)) in knobs.iter().enumerate() {
        let Some(r) = ranges.iter().find(|r| r.ty == ty) else {
            continue;
        };
        for v in range_values(r) {
            if v == value || variants.len() >= limit {
                continue;
            }
            let mut k = knobs.to_vec();
            k[i].1 = v;
            variants.push(k);
        }
    }
    variants
}

/// The values of `r` tried (see [`knob_variants`]).
fn range_values(r: &KnobRange) -> Vec<i64> {
    let stride = r.stride.max(1);
    if r.max < r.min {
        return Vec::new();
    }
    let count = (r.max - r.min) / stride + 1;
    if count as usize <= VALUES_PER_KNOB {
        return (0..count).map(|i| r.min + i * stride).collect();
    }
    let on_grid = |v: &i64| (v - r.min) % stride == 0;
    std::iter::once(r.min)
        .chain(
            (0..62)
                .map(|e| 1i64 << e)
                .filter(|&v| v > r.min && v <= r.max),
        )
        .filter(on_grid)
        .take(VALUES_PER_KNOB)
        .collect()
}

/// Whether an engine with cuDNN's numerical notes `notes` computes what `precision` promises.
/// TF32 allows tensor cores (TF32 operands, f32 sums) but not inputs converted down to 16 bits
/// or sums in reduced precision; FP32 allows neither tensor cores; 16-bit precisions take the
/// heuristics' proposals as they come (their operands are already 16-bit, sums are f32 by the
/// convolution descriptor). An engine whose notes are not known is 16-bit precisions' only.
pub(super) fn allowed(precision: Precision, notes: Option<&[u32]>) -> bool {
    use sys::cudnnBackendNumericalNote_t as N;
    let forbidden: &[N] = match precision {
        Precision::Bf16 | Precision::F16 => &[],
        Precision::Tf32 => &[
            N::CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS,
            N::CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION,
        ],
        Precision::Fp32 => &[
            N::CUDNN_NUMERICAL_NOTE_TENSOR_CORE,
            N::CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS,
            N::CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION,
        ],
    };
    let Some(notes) = notes else {
        return matches!(precision, Precision::Bf16 | Precision::F16);
    };
    !notes
        .iter()
        .any(|n| forbidden.iter().any(|f| *f as u32 == *n))
}

/// A finalized plan for one shape on one handle.
pub(super) struct Plan {
    _graph: OpGraph,
    plan: Desc,
    pub workspace: usize,
}

// Used by cubecl's device thread only (the engine keeps plans per device side).
unsafe impl Send for Plan {}
unsafe impl Sync for Plan {}

impl Plan {
    /// Rebuilds the plan `choice` names for `geometry`.
    pub(super) fn rebuild(
        handle: sys::cudnnHandle_t,
        geometry: &Geometry,
        choice: &PlanChoice,
    ) -> Result<Self, EngineError> {
        let mut graph = OpGraph::new(handle, geometry)?;
        let cfg = graph.config(choice.engine, &choice.knobs)?;
        let (plan, ws) = graph.plan(handle, cfg)?;
        Ok(Plan {
            _graph: graph,
            plan,
            workspace: ws.max(0) as usize,
        })
    }

    /// Enqueues the convolution on `handle`'s stream with `p`'s buffers and a workspace of at
    /// least [`Plan::workspace`] bytes.
    pub(super) fn execute(
        &self,
        handle: sys::cudnnHandle_t,
        op: ConvOp,
        p: &Ptrs,
        ws: u64,
    ) -> Result<(), EngineError> {
        execute(handle, self.plan, op, p, ws)
    }
}

/// Whether every operand of `p` (and the workspace) is aligned as the plans promise.
pub(super) fn aligned(op: ConvOp, p: &Ptrs) -> bool {
    let (x, w, y) = operands(op, p);
    [x, w, y].iter().all(|v| v % ALIGNMENT == 0)
}

/// `(x, w, y)` in the graph's terms: for the data gradient `x` is the output, for the weight
/// gradient `w` is.
fn operands(op: ConvOp, p: &Ptrs) -> (u64, u64, u64) {
    match op {
        ConvOp::Forward => (p.x, p.w, p.out),
        ConvOp::DataGrad => (p.out, p.w, p.dy),
        ConvOp::WeightGrad => (p.x, p.out, p.dy),
    }
}

/// Enqueues `plan` on `handle`'s stream with one variant pack: `p`'s buffers and workspace `ws`.
fn execute(
    handle: sys::cudnnHandle_t,
    plan: Desc,
    op: ConvOp,
    p: &Ptrs,
    ws: u64,
) -> Result<(), EngineError> {
    let mut owned = Owned::new();
    let pack = owned.make(D::CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)?;
    let (x, w, y) = operands(op, p);
    let ptrs: [*mut c_void; 3] = [x, w, y].map(|v| v as usize as *mut c_void);
    let ws_ptr = ws as usize as *mut c_void;
    set_i64(pack, A::CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, &[X, W, Y])?;
    // SAFETY: three device pointers, then one.
    unsafe {
        set(
            pack,
            A::CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
            T::CUDNN_TYPE_VOID_PTR,
            3,
            ptrs.as_ptr(),
        )?;
        set(
            pack,
            A::CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
            T::CUDNN_TYPE_VOID_PTR,
            1,
            &ws_ptr,
        )?;
    }
    finalize(pack, "variant pack")?;
    // SAFETY: a finalized plan of this handle; the buffers are live and as the plan's tensors
    // describe them (built from the same shapes).
    check(
        unsafe { sys::cudnnBackendExecute(handle, plan, pack) },
        "execute plan",
    )
}
