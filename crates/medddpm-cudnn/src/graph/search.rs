//! Choosing a shape's plan: the heuristics' proposals timed on the call's own buffers.

use cudarc::cudnn::sys;
use cudarc::driver::result::{event, free_sync, malloc_sync};
use cudarc::driver::sys::CUstream;

use super::super::operands::Ptrs;
use super::ffi::Desc;
use super::{execute, Geometry, OpGraph, Plan, PlanChoice, MAX_WORKSPACE, NEAR_FASTEST};
use crate::error::{driver, EngineError};

/// Timed runs of each candidate (after one untimed run).
const RUNS: usize = 2;

/// A plan that built: the plan, its workspace, and its engine's index and knobs.
type Candidate = (Desc, usize, (i64, Vec<(u32, i64)>));

/// Times the heuristics' proposals for `geometry` on the call's own buffers `p` (on `stream`,
/// synchronising it) and returns the chosen one, built. The timing runs share one workspace
/// allocated here (and freed) outside burn's pools: this runs on cubecl's device thread, once
/// per shape (the choice is then kept in the plan table).
pub(in super::super) fn search(
    handle: sys::cudnnHandle_t,
    geometry: &Geometry,
    p: &Ptrs,
    stream: CUstream,
) -> Result<(Plan, PlanChoice), EngineError> {
    let mut graph = OpGraph::new(handle, geometry)?;
    let plans = candidates(&mut graph, handle)?;
    let max_ws = plans
        .iter()
        .map(|c| c.1)
        .max()
        .ok_or_else(|| EngineError::Unsupported("no engine configuration builds".into()))?;
    // SAFETY: a plain device allocation, freed below.
    let ws = unsafe { malloc_sync(max_ws.max(256)) }.map_err(driver("plan search workspace"))?;
    let times = time_each(handle, geometry, p, stream, &plans, ws);
    // SAFETY: cubecl's live stream, then the allocation above, unused once the stream is done.
    unsafe {
        let _ = cudarc::driver::result::stream::synchronize(stream);
        free_sync(ws).map_err(driver("plan search workspace"))?;
    }
    let times = times?;
    let fastest = times.iter().map(|t| t.1).fold(f32::INFINITY, f32::min);
    let &(i, ms) = times
        .iter()
        .filter(|t| t.1 <= fastest * NEAR_FASTEST)
        .min_by_key(|t| plans[t.0].1)
        .ok_or_else(|| EngineError::Unsupported("no engine configuration ran".into()))?;
    let (_, workspace, (engine, knobs)) = &plans[i];
    let choice = PlanChoice {
        engine: *engine,
        knobs: knobs.clone(),
        workspace: *workspace,
        ms,
    };
    let plan = Plan::rebuild(handle, geometry, &choice)?;
    Ok((plan, choice))
}

/// The proposals that build a plan within the workspace cap (the others are skipped).
fn candidates(
    graph: &mut OpGraph,
    handle: sys::cudnnHandle_t,
) -> Result<Vec<Candidate>, EngineError> {
    let mut plans = Vec::new();
    for cfg in graph.proposals()? {
        let Ok((plan, ws)) = graph.plan(handle, cfg) else {
            continue;
        };
        if ws > MAX_WORKSPACE {
            continue;
        }
        let Ok(described) = graph.describe(cfg) else {
            continue;
        };
        plans.push((plan, ws as usize, described));
    }
    Ok(plans)
}

/// Milliseconds per run of each candidate that ran, by index.
fn time_each(
    handle: sys::cudnnHandle_t,
    geometry: &Geometry,
    p: &Ptrs,
    stream: CUstream,
    plans: &[Candidate],
    ws: u64,
) -> Result<Vec<(usize, f32)>, EngineError> {
    let flags = cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT;
    let start = event::create(flags).map_err(driver("CUDA event"))?;
    let end = event::create(flags).map_err(driver("CUDA event"))?;
    let mut times = Vec::new();
    for (i, (plan, _, _)) in plans.iter().enumerate() {
        // SAFETY: events of this context, recorded on cubecl's stream around runs of a plan on
        // the call's buffers (their results are overwritten by the real call).
        let ms = unsafe {
            if execute(handle, *plan, geometry.op, p, ws).is_err() {
                continue;
            }
            event::record(start, stream).map_err(driver("CUDA event"))?;
            let ok = (0..RUNS).all(|_| execute(handle, *plan, geometry.op, p, ws).is_ok());
            event::record(end, stream).map_err(driver("CUDA event"))?;
            event::synchronize(end).map_err(driver("CUDA event"))?;
            if !ok {
                continue;
            }
            event::elapsed(start, end).map_err(driver("CUDA event"))? / RUNS as f32
        };
        times.push((i, ms));
    }
    // SAFETY: events created above, no longer used.
    unsafe {
        let _ = event::destroy(start);
        let _ = event::destroy(end);
    }
    Ok(times)
}
