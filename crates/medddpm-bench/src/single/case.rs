//! A measured case in the shape of burn's backend-comparison benchmarks
//! (`burn_common::benchmark::Benchmark`: `prepare`, `execute`, `sync`): the case is prepared
//! once, untimed (each case's `prepare` constructor), then run step by step, each step its
//! `execute` (the work, enqueued) followed by its `sync` (waiting for the device). A step's
//! time spans both. Unlike burn's, a case keeps its state from one step to the next (the
//! sampling chain, the model being trained).

use std::time::Instant;

use super::ms_since;
use crate::error::Result;
use crate::gpu_trace::{
    mark, summarise_recording, GpuTime, TraceError, Tracer, STEP_START, SYNCHRONISED,
};

/// One kind of step, run again and again.
pub(super) trait Case {
    /// What the host learns from one step besides its time.
    type Output;
    /// Runs one step: enqueues its work on the device.
    fn execute(&mut self) -> Result<Self::Output>;
    /// Waits until the device has finished the work enqueued so far.
    fn sync(&self) -> Result<()>;
}

/// One step's time and output.
pub(super) struct Step<O> {
    /// Milliseconds, from the start of `execute` to the end of `sync`.
    pub ms: f64,
    /// What `execute` returned.
    pub output: O,
}

/// Runs one step of `case` and times it.
pub(super) fn step<C: Case>(case: &mut C) -> Result<Step<C::Output>> {
    let start = Instant::now();
    let output = case.execute()?;
    case.sync()?;
    Ok(Step {
        ms: ms_since(start),
        output,
    })
}

/// `steps` steps of `case` enqueued one after another and waited for once at the end, in ms a
/// step: the mean as `../shared/peer/torch_bench.py` times PyTorch (CUDA events around the
/// loop), where a step's start overlaps the previous step's work as in training.
pub(super) fn back_to_back<C: Case>(case: &mut C, steps: usize) -> Result<f64> {
    case.sync()?;
    let start = Instant::now();
    for _ in 0..steps {
        case.execute()?;
    }
    case.sync()?;
    Ok(ms_since(start) / steps.max(1) as f64)
}

/// The first step of `case`, in seconds: it compiles and tunes the step's kernels.
pub(super) fn first_step<C: Case>(case: &mut C) -> Result<f64> {
    let start = Instant::now();
    case.execute()?;
    case.sync()?;
    Ok(start.elapsed().as_secs_f64())
}

/// The timed steps, and what ran before the first of them returned (none without steps).
pub(super) type Timed<O, T> = (Vec<Step<O>>, Option<T>);

/// `warmup` untimed steps, then `steps` timed ones. `at_timed` runs just before the first
/// timed step (when there is one); what it returns comes back with the steps.
pub(super) fn timed_steps<C: Case, T>(
    case: &mut C,
    warmup: usize,
    steps: usize,
    at_timed: impl FnOnce() -> Result<T>,
) -> Result<Timed<C::Output, T>> {
    let mut at_timed = Some(at_timed);
    let mut started = None;
    let mut timed = Vec::with_capacity(steps);
    for i in 0..warmup + steps {
        if i == warmup {
            started = at_timed.take().map(|f| f()).transpose()?;
        }
        let step = step(case)?;
        if i >= warmup {
            timed.push(step);
        }
    }
    Ok((timed, started))
}

/// `steps` steps of `case` with the device's activities and the host's driver calls recorded
/// ([`Tracer`]), each step marked at its start, after it was enqueued and after its
/// synchronisation: the GPU's time per step and what the host did while it idled, or why it
/// could not be recorded.
pub(super) fn traced_steps<C: Case>(
    case: &mut C,
    steps: usize,
) -> Result<std::result::Result<GpuTime, TraceError>> {
    case.sync()?;
    let tracer = match Tracer::start() {
        Ok(t) => t,
        Err(why) => return Ok(Err(why)),
    };
    let start = Instant::now();
    for _ in 0..steps {
        mark(STEP_START);
        case.execute()?;
        mark("enqueued");
        case.sync()?;
        mark(SYNCHRONISED);
    }
    let wall_ms = ms_since(start) / steps.max(1) as f64;
    Ok(tracer
        .finish()
        .map(|recording| summarise_recording(&recording, steps, wall_ms)))
}
