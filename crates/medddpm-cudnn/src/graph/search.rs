//! Choosing a shape's plan: the heuristics' proposals timed on the call's own buffers, then the
//! fastest one's knobs.

use cudarc::cudnn::sys;
use cudarc::driver::result::{event, free_sync, malloc_sync};
use cudarc::driver::sys::CUstream;

use super::super::operands::Ptrs;
use super::ffi::Desc;
use super::{
    allowed, execute, knob_variants, Described, Geometry, OpGraph, Plan, PlanChoice, MAX_WORKSPACE,
    NEAR_FASTEST,
};
use crate::compute::Precision;
use crate::error::{driver, EngineError};

/// Timed runs of each candidate (after one untimed run).
const RUNS: usize = 2;

/// A shape whose fastest proposal takes at least this long (ms) has that proposal's knobs
/// tried too: below it, a better knob could save little and the search costs first-step time.
const TUNE_KNOBS_FROM_MS: f32 = 0.25;

/// Knob configurations tried at most per shape.
const KNOB_VARIANTS: usize = 32;

/// A plan that built: the plan, its workspace, and what it is made of.
type Candidate = (Desc, usize, Described);

/// Times the heuristics' proposals for `geometry` on the call's own buffers `p` (on `stream`,
/// synchronising it), then the fastest one's knobs one at a time if it is slow enough, and
/// returns the chosen plan, built. Each round of timing shares one workspace allocated (and
/// freed) outside burn's pools: this runs on cubecl's device thread, once per shape (the
/// choice is then kept in the plan table).
pub(in super::super) fn search(
    handle: sys::cudnnHandle_t,
    geometry: &Geometry,
    p: &Ptrs,
    stream: CUstream,
) -> Result<(Plan, PlanChoice), EngineError> {
    let mut graph = OpGraph::new(handle, geometry)?;
    let mut plans = candidates(&mut graph, handle, geometry.precision)?;
    let mut times = time_round(handle, geometry, p, stream, &plans, 0)?;
    let proposed = fastest(&times).copied();
    if let Some((best, _)) = proposed.filter(|t| t.1 >= TUNE_KNOBS_FROM_MS) {
        let first = plans.len();
        let variants = knob_candidates(&mut graph, handle, &plans[best].2);
        plans.extend(variants);
        let more = time_round(handle, geometry, p, stream, &plans[first..], first)?;
        times.extend(more);
    }
    let quickest = fastest(&times)
        .ok_or_else(|| EngineError::Unsupported("no engine configuration ran".into()))?
        .1;
    let &(i, ms) = times
        .iter()
        .filter(|t| t.1 <= quickest * NEAR_FASTEST)
        .min_by_key(|t| plans[t.0].1)
        .ok_or_else(|| EngineError::Unsupported("no engine configuration ran".into()))?;
    let (_, workspace, d) = &plans[i];
    let choice = PlanChoice {
        engine: d.engine,
        knobs: d.knobs.clone(),
        workspace: *workspace,
        ms,
        proposed_ms: proposed.map(|t| t.1),
    };
    let plan = Plan::rebuild(handle, geometry, &choice)?;
    Ok((plan, choice))
}

/// Plans one knob away from `base` (see [`knob_variants`]) that build within the workspace cap.
fn knob_candidates(
    graph: &mut OpGraph,
    handle: sys::cudnnHandle_t,
    base: &Described,
) -> Vec<Candidate> {
    let mut plans = Vec::new();
    for knobs in knob_variants(&base.knobs, &base.ranges, KNOB_VARIANTS) {
        let Ok(cfg) = graph.config(base.engine, &knobs) else {
            continue;
        };
        let Ok((plan, ws)) = graph.plan(handle, cfg) else {
            continue;
        };
        if ws > MAX_WORKSPACE {
            continue;
        }
        let described = Described {
            engine: base.engine,
            knobs,
            notes: base.notes.clone(),
            ranges: Vec::new(),
        };
        plans.push((plan, ws as usize, described));
    }
    plans
}

/// The fastest `(index, ms)` of `times`.
fn fastest(times: &[(usize, f32)]) -> Option<&(usize, f32)> {
    times.iter().min_by(|a, b| a.1.total_cmp(&b.1))
}

/// Times `plans` (whose first is candidate `offset`) with one workspace as large as the
/// largest needs: `(candidate index, ms)` of each that ran.
fn time_round(
    handle: sys::cudnnHandle_t,
    geometry: &Geometry,
    p: &Ptrs,
    stream: CUstream,
    plans: &[Candidate],
    offset: usize,
) -> Result<Vec<(usize, f32)>, EngineError> {
    let Some(max_ws) = plans.iter().map(|c| c.1).max() else {
        return Ok(Vec::new());
    };
    // SAFETY: a plain device allocation, freed below.
    let ws = unsafe { malloc_sync(max_ws.max(256)) }.map_err(driver("plan search workspace"))?;
    let times = time_each(handle, geometry, p, stream, plans, ws);
    // SAFETY: cubecl's live stream, then the allocation above, unused once the stream is done.
    unsafe {
        let _ = cudarc::driver::result::stream::synchronize(stream);
        free_sync(ws).map_err(driver("plan search workspace"))?;
    }
    Ok(times?.into_iter().map(|(i, ms)| (i + offset, ms)).collect())
}

/// The proposals that build a plan within the workspace cap and whose numerics `precision`
/// allows (the others are skipped).
fn candidates(
    graph: &mut OpGraph,
    handle: sys::cudnnHandle_t,
    precision: Precision,
) -> Result<Vec<Candidate>, EngineError> {
    let mut plans = Vec::new();
    for cfg in graph.proposals()? {
        let Ok(described) = graph.describe(cfg) else {
            continue;
        };
        if !allowed(precision, described.notes.as_deref()) {
            continue;
        }
        let Ok((plan, ws)) = graph.plan(handle, cfg) else {
            continue;
        };
        if ws > MAX_WORKSPACE {
            continue;
        }
        plans.push((plan, ws as usize, described));
    }
    if plans.is_empty() {
        return Err(EngineError::Unsupported(
            "no engine configuration builds".into(),
        ));
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
