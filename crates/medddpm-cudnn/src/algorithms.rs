//! Choosing a shape's algorithm: cuDNN's heuristics for the workspace, a timed search of the
//! candidates (`cudnnFind*Ex`, what PyTorch's `cudnn.benchmark` does), the winners shared by the
//! devices of one GPU model, and the JSON cache file that keeps them across runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use cudarc::cudnn::sys;
use serde::{Deserialize, Serialize};

use super::descriptors::Descriptors;
use super::layout::Tensor;
use super::library::{check, GpuModel};
use super::operands::{vp, ConvOp, Ptrs};
use crate::error::{cubecl, EngineError};

/// Largest workspace an algorithm may use, in bytes. At 128^3 the precomputed-index implicit
/// GEMM that strict FP32 needs in channels-last asks for about 1 GiB for the 64-channel
/// convolutions (with a 1 GiB cap, on an H100, none of those shapes had an algorithm left and
/// they fell back to burn's kernels), while FFT algorithms ask for several GiB.
const MAX_WORKSPACE: usize = 3 << 30;

/// Among candidates whose time is within this factor of the fastest, the one with the smallest
/// workspace wins: burn's pool keeps what it once allocated, so memory matters as much as a few
/// percent of speed.
const NEAR_FASTEST: f32 = 1.05;

/// Candidates asked of cuDNN per query.
const CANDIDATES: usize = 8;

/// One chosen algorithm.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(super) struct Choice {
    pub algo: u32,
    pub workspace: usize,
    /// Milliseconds cuDNN measured for it.
    pub ms: f32,
}

/// The algorithm choices of one GPU model, shared by the devices of that model in the process
/// (a choice is a timing, and devices of one model time alike; data-parallel replicas run the
/// same shapes at the same time, so each shape is searched about once instead of once per
/// device). Only the first call of a shape on each device reads it (see `engine::run`); later
/// calls use the device's own copy, so the hot path never takes this lock.
pub(super) struct AlgoTable {
    /// The model whose timings these are.
    pub model: GpuModel,
    /// Where the choices are kept across runs, if anywhere.
    pub file: Option<PathBuf>,
    choices: Mutex<BTreeMap<String, Choice>>,
    /// The graph API's plans for the same shapes (`cudnn-plans.json` beside `file`).
    pub plans: super::graph::PlanTable,
}

impl AlgoTable {
    /// The table of `model`, its choices read from `file`.
    pub fn open(model: GpuModel, file: Option<PathBuf>) -> Self {
        let choices = Mutex::new(load_cache(file.as_deref()));
        let plans = super::graph::PlanTable::open(
            file.as_ref().map(|f| f.with_file_name("cudnn-plans.json")),
        );
        AlgoTable {
            model,
            file,
            choices,
            plans,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Choice>> {
        self.choices.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many shapes have a choice.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// The choice for `key`, if one was made.
    pub fn get(&self, key: &str) -> Option<Choice> {
        self.lock().get(key).copied()
    }

    /// Records `choice` for `key` and saves the table; returns the choice that stands, which is
    /// another device's where one searched the same shape at the same time (so that every
    /// device of the model runs the same algorithm).
    pub fn insert(&self, key: &str, choice: Choice) -> Choice {
        let mut choices = self.lock();
        if let Some(first) = choices.get(key) {
            return *first;
        }
        choices.insert(key.to_string(), choice);
        save_cache(self.file.as_deref(), &choices);
        choice
    }

    /// Replaces the choice for `key` (one that cuDNN refused on this machine) and saves the
    /// table.
    pub fn replace(&self, key: &str, choice: Choice) {
        let mut choices = self.lock();
        choices.insert(key.to_string(), choice);
        save_cache(self.file.as_deref(), &choices);
    }
}

/// The algorithm cache in `file` (empty when there is none or it does not parse).
fn load_cache(file: Option<&Path>) -> BTreeMap<String, Choice> {
    file.and_then(|f| std::fs::read_to_string(f).ok())
        .and_then(|text| serde_json::from_str::<BTreeMap<String, Choice>>(&text).ok())
        .unwrap_or_default()
}

/// Writes the algorithm cache atomically (see `medddpm_atomic`); a failure is reported and
/// otherwise ignored (the next run searches again).
fn save_cache(file: Option<&Path>, algos: &BTreeMap<String, Choice>) {
    let Some(file) = file else { return };
    let Ok(text) = serde_json::to_string_pretty(algos) else {
        return;
    };
    if let Err(e) = medddpm_atomic::write(file, text.as_bytes()) {
        log::warn!(
            "cannot write the cuDNN algorithm cache {}: {e}",
            file.display()
        );
    }
}

/// Times the candidate algorithms once and returns the fastest that fits [`MAX_WORKSPACE`].
pub(super) fn find(
    op: ConvOp,
    handle: sys::cudnnHandle_t,
    d: &Descriptors,
    p: &Ptrs,
    x: &Tensor,
) -> Result<Choice, EngineError> {
    // Heuristic candidates first, for the workspace they need.
    let ws_needed = heuristic_workspace(op, handle, d)?;
    let ws_handle = x.client.empty(ws_needed.max(256));
    let ws = x
        .client
        .get_resource(ws_handle.clone())
        .map_err(cubecl("workspace"))?
        .resource()
        .ptr;
    let best = timed_search(op, handle, d, p, ws, ws_needed);
    drop(ws_handle);
    best
}

/// The largest workspace among cuDNN's heuristic candidates for `op` (see [`max_fitting`]).
fn heuristic_workspace(
    op: ConvOp,
    handle: sys::cudnnHandle_t,
    d: &Descriptors,
) -> Result<usize, EngineError> {
    // SAFETY: plain queries on live descriptors.
    let results = unsafe {
        match op {
            ConvOp::Forward => candidates::<sys::cudnnConvolutionFwdAlgoPerf_t>(
                "forward heuristics",
                |n, returned, perf| {
                    sys::cudnnGetConvolutionForwardAlgorithm_v7(
                        handle, d.x, d.w, d.conv, d.y, n, returned, perf,
                    )
                },
            ),
            ConvOp::DataGrad => candidates::<sys::cudnnConvolutionBwdDataAlgoPerf_t>(
                "data-gradient heuristics",
                |n, returned, perf| {
                    sys::cudnnGetConvolutionBackwardDataAlgorithm_v7(
                        handle, d.w, d.y, d.conv, d.x, n, returned, perf,
                    )
                },
            ),
            ConvOp::WeightGrad => candidates::<sys::cudnnConvolutionBwdFilterAlgoPerf_t>(
                "weight-gradient heuristics",
                |n, returned, perf| {
                    sys::cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                        handle, d.x, d.y, d.conv, d.w, n, returned, perf,
                    )
                },
            ),
        }
    }?;
    Ok(max_fitting(&results))
}

/// Runs and times the candidates for `op` on the call's own buffers with a workspace of
/// `ws_size` bytes at `ws`, and picks among them (see [`pick`]).
fn timed_search(
    op: ConvOp,
    handle: sys::cudnnHandle_t,
    d: &Descriptors,
    p: &Ptrs,
    ws: u64,
    ws_size: usize,
) -> Result<Choice, EngineError> {
    let (x, w, dy, out, ws) = (vp(p.x), vp(p.w), vp(p.dy), vp(p.out), vp(ws));
    // SAFETY: as in `launch`; the workspace buffer holds `ws_size` bytes.
    let results = unsafe {
        match op {
            ConvOp::Forward => candidates::<sys::cudnnConvolutionFwdAlgoPerf_t>(
                "forward search",
                |n, returned, perf| {
                    sys::cudnnFindConvolutionForwardAlgorithmEx(
                        handle, d.x, x, d.w, w, d.conv, d.y, out, n, returned, perf, ws, ws_size,
                    )
                },
            ),
            ConvOp::DataGrad => candidates::<sys::cudnnConvolutionBwdDataAlgoPerf_t>(
                "data-gradient search",
                |n, returned, perf| {
                    sys::cudnnFindConvolutionBackwardDataAlgorithmEx(
                        handle, d.w, w, d.y, dy, d.conv, d.x, out, n, returned, perf, ws, ws_size,
                    )
                },
            ),
            ConvOp::WeightGrad => candidates::<sys::cudnnConvolutionBwdFilterAlgoPerf_t>(
                "weight-gradient search",
                |n, returned, perf| {
                    sys::cudnnFindConvolutionBackwardFilterAlgorithmEx(
                        handle, d.x, x, d.y, dy, d.conv, d.w, out, n, returned, perf, ws, ws_size,
                    )
                },
            ),
        }
    }?;
    pick(&results, ws_size)
}

/// What cuDNN reports of one candidate algorithm: algorithm, status, workspace bytes and time
/// (ms).
type Candidate = (u32, sys::cudnnStatus_t, usize, f32);

/// One of cuDNN's candidate queries, `query(room, &mut returned, results)`, with room for
/// [`CANDIDATES`] results of type `P`: what it reported of each candidate it returned.
///
/// # Safety
/// `query` is a cuDNN call that writes at most `room` results of type `P`.
unsafe fn candidates<P: AlgoPerf>(
    what: &str,
    query: impl FnOnce(i32, &mut i32, *mut P) -> sys::cudnnStatus_t,
) -> Result<Vec<Candidate>, EngineError> {
    // SAFETY: cuDNN's result structs are plain C data, for which all zeros is a valid value.
    let mut perf: [P; CANDIDATES] = unsafe { std::mem::zeroed() };
    let mut returned = 0i32;
    check(
        query(CANDIDATES as i32, &mut returned, perf.as_mut_ptr()),
        what,
    )?;
    Ok(perf[..returned as usize]
        .iter()
        .map(AlgoPerf::result)
        .collect())
}

/// What [`candidates`] reads from each of cuDNN's three per-algorithm result types.
trait AlgoPerf {
    fn result(&self) -> Candidate;
}

macro_rules! algo_perf {
    ($($t:ty),*) => {$(
        impl AlgoPerf for $t {
            fn result(&self) -> Candidate {
                (self.algo as u32, self.status, self.memory, self.time)
            }
        }
    )*};
}

algo_perf!(
    sys::cudnnConvolutionFwdAlgoPerf_t,
    sys::cudnnConvolutionBwdDataAlgoPerf_t,
    sys::cudnnConvolutionBwdFilterAlgoPerf_t
);

/// The fastest candidate that ran within the workspace, or what each candidate reported.
fn pick(results: &[Candidate], ws: usize) -> Result<Choice, EngineError> {
    let ran =
        |r: &&Candidate| r.1 == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS && r.2 <= ws && r.3 >= 0.0;
    let fastest = results
        .iter()
        .filter(ran)
        .map(|r| r.3)
        .fold(f32::INFINITY, f32::min);
    results
        .iter()
        .filter(ran)
        .filter(|r| r.3 <= fastest * NEAR_FASTEST)
        .min_by_key(|r| r.2)
        .map(|r| Choice {
            algo: r.0,
            workspace: r.2,
            ms: r.3,
        })
        .ok_or_else(|| {
            let tried: Vec<String> = results
                .iter()
                .map(|(a, st, m, _)| format!("algo {a}: {st:?}, {} MiB", m >> 20))
                .collect();
            EngineError::Unsupported(format!(
                "no algorithm ran within a {} MiB workspace ({})",
                ws >> 20,
                tried.join("; ")
            ))
        })
}

/// The largest workspace among the usable candidates, capped at [`MAX_WORKSPACE`].
fn max_fitting(results: &[Candidate]) -> usize {
    results
        .iter()
        .filter(|(_, status, _, _)| *status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS)
        .map(|(_, _, memory, _)| *memory)
        .filter(|m| *m <= MAX_WORKSPACE)
        .max()
        .unwrap_or(0)
}
