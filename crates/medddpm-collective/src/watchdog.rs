//! A watch over one process's NCCL calls, so that a rank whose peer stopped, hung or died never
//! waits on its GPU for ever: NCCL's kernel of an all-reduce spins until every rank has joined
//! it, and the thread that next reads from the device (the loss, a checkpoint) would wait with
//! it. Each call is followed by an event on its stream; a thread polls the oldest event and
//! NCCL's asynchronous error, and when the call has not finished within the run's step timeout
//! (or NCCL reports a broken connection) it records why as the device error and aborts the
//! communicator (`ncclCommAbort`), which ends the spinning kernel. The stream then runs on with
//! a meaningless sum, and the trainer stops at the end of that step on the device error,
//! before anything of the step is saved (what PyTorch's NCCL watchdog does with
//! `TORCH_NCCL_ASYNC_ERROR_HANDLING`).

use std::collections::VecDeque;
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use cudarc::driver::sys::{CUcontext, CUevent, CUstream};
use cudarc::nccl::sys::{ncclComm_t, ncclResult_t};

/// How often the watch looks at the oldest call and NCCL's error state.
const POLL: Duration = Duration::from_millis(100);

/// How long an abort waits for a call being enqueued to leave NCCL before aborting under it (a
/// call can block inside NCCL, e.g. connecting to a peer that is gone: the abort ends it).
const ENQUEUE_WAIT: Duration = Duration::from_secs(2);

/// What keeps the communicator's calls and its abort apart: NCCL frees an aborted
/// communicator, so no call may start after the abort or run beside it when avoidable.
#[derive(Default)]
pub(super) struct CommGuard {
    aborted: std::sync::atomic::AtomicBool,
    calls: std::sync::Mutex<()>,
}

impl CommGuard {
    /// Runs `call` (which enqueues on the communicator) unless the communicator was aborted.
    pub fn enqueue<T>(&self, call: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
        let _running = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        if self.aborted.load(std::sync::atomic::Ordering::Acquire) {
            return Err("the communicator was aborted after an earlier failure".to_string());
        }
        call()
    }

    /// Marks the communicator aborted (no later call starts), waits up to [`ENQUEUE_WAIT`] for
    /// a call being enqueued, then runs `abort`.
    fn abort(&self, abort: impl FnOnce()) {
        self.aborted
            .store(true, std::sync::atomic::Ordering::Release);
        let since = Instant::now();
        let _running = loop {
            match self.calls.try_lock() {
                Ok(guard) => break Some(guard),
                Err(std::sync::TryLockError::Poisoned(e)) => break Some(e.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) if since.elapsed() < ENQUEUE_WAIT => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(std::sync::TryLockError::WouldBlock) => break None,
            }
        };
        abort();
    }
}

/// Where the watch is and what it is told.
pub(super) struct Watchdog {
    calls: Sender<(usize, Instant)>,
}

/// What the watch needs of the communicator, by value (raw handles as integers).
pub(super) struct Watched {
    /// The communicator (`ncclComm_t`).
    pub comm: usize,
    /// The device's retained primary context (`CUcontext`).
    pub ctx: usize,
    /// The CUDA device, rank and world, for the message.
    pub device: usize,
    /// See `device`.
    pub rank: usize,
    /// See `device`.
    pub world: usize,
    /// How long one call may take.
    pub timeout: Duration,
    /// Shared with the calls' enqueuing.
    pub guard: std::sync::Arc<CommGuard>,
}

impl Watchdog {
    /// Starts the watch over `w.comm`; it ends when the watchdog is dropped and every call it
    /// was told of has finished, or after it aborted the communicator.
    pub fn start(w: Watched) -> Result<Self, String> {
        let (tx, rx) = channel::<(usize, Instant)>();
        std::thread::Builder::new()
            .name(format!("nccl-watch-{}", w.device))
            .spawn(move || {
                // SAFETY: the primary context the communicator was made in, retained by `join`.
                if unsafe { cudarc::driver::result::ctx::set_current(w.ctx as CUcontext) }.is_err()
                {
                    return;
                }
                let mut pending: VecDeque<(usize, Instant)> = VecDeque::new();
                let mut open = true;
                while open || !pending.is_empty() {
                    match rx.recv_timeout(POLL) {
                        Ok(call) => pending.push_back(call),
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => open = false,
                    }
                    pending.extend(rx.try_iter());
                    finished(&mut pending);
                    if let Some(why) = failure(&w, pending.front()) {
                        abort(&w, why);
                        pending.drain(..).for_each(|(event, _)| destroy(event));
                        return;
                    }
                }
            })
            .map_err(|e| format!("starting the NCCL watch: {e}"))?;
        Ok(Self { calls: tx })
    }

    /// Records an event on `stream` after the call just enqueued there and hands it to the
    /// watch (on the thread that enqueued the call, with its context current).
    pub fn watch(&self, stream: usize) -> Result<(), String> {
        use cudarc::driver::sys::CUevent_flags::CU_EVENT_DISABLE_TIMING;
        let event = cudarc::driver::result::event::create(CU_EVENT_DISABLE_TIMING)
            .map_err(|e| format!("an event after the all-reduce: {e}"))?;
        // SAFETY: a fresh event and the stream the call was enqueued on.
        unsafe { cudarc::driver::result::event::record(event, stream as CUstream) }
            .map_err(|e| format!("an event after the all-reduce: {e}"))?;
        if self.calls.send((event as usize, Instant::now())).is_err() {
            // The watch already aborted the communicator; nothing is left to watch.
            destroy(event as usize);
        }
        Ok(())
    }
}

/// Drops the finished calls from the front of `pending`.
fn finished(pending: &mut VecDeque<(usize, Instant)>) {
    while let Some(&(event, _)) = pending.front() {
        // SAFETY: an event `watch` created and nothing destroyed yet.
        match unsafe { cudarc::driver::result::event::query(event as CUevent) } {
            Err(e) if e.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_NOT_READY => return,
            // Done, or an error the next device read reports itself.
            _ => {
                destroy(event);
                pending.pop_front();
            }
        }
    }
}

/// Why the communicator must be aborted now, if it must: NCCL's asynchronous error, or the
/// oldest unfinished call older than the timeout.
fn failure(w: &Watched, oldest: Option<&(usize, Instant)>) -> Option<String> {
    let mut state = ncclResult_t::ncclSuccess;
    // SAFETY: the live communicator; `state` receives its asynchronous error.
    let asked =
        unsafe { cudarc::nccl::sys::ncclCommGetAsyncError(w.comm as ncclComm_t, &mut state) };
    if asked == ncclResult_t::ncclSuccess
        && !matches!(
            state,
            ncclResult_t::ncclSuccess | ncclResult_t::ncclInProgress
        )
    {
        return Some(format!(
            "NCCL reported {state:?} during the gradient all-reduce (a rank's process or machine \
             is gone, or the network between them failed)"
        ));
    }
    let (_, since) = oldest?;
    (since.elapsed() > w.timeout).then(|| {
        format!(
            "the gradient all-reduce did not finish within {} s (a rank is stopped, hung or \
             gone; MEDDDPM_STEP_TIMEOUT sets the wait)",
            w.timeout.as_secs()
        )
    })
}

/// Keeps `why` as the device error and aborts the communicator, which ends its kernels.
fn abort(w: &Watched, why: String) {
    crate::device_error::record_device_error(format!(
        "CUDA device {} (rank {} of {}): {why}; NCCL's communicator was aborted",
        w.device, w.rank, w.world
    ));
    // SAFETY: the communicator this process joined, no call starting on it after this (the
    // guard); NCCL allows aborting it from another thread while its kernels, or a call, wait.
    w.guard.abort(|| {
        let _ = unsafe { cudarc::nccl::result::comm_abort(w.comm as ncclComm_t) };
    });
}

fn destroy(event: usize) {
    // SAFETY: an event `watch` created, destroyed once.
    let _ = unsafe { cudarc::driver::sys::cuEventDestroy_v2(event as CUevent) };
}
