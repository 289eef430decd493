//! Convolutions of already searched shapes handed to cubecl's device thread without waiting,
//! and the record of the first one that failed there.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::cudnn::sys;

use super::algorithms::{AlgoTable, Choice};
use super::calls::launch;
use super::descriptors::Descriptors;
use super::graph::{self, Plan, PlanChoice};
use super::library::check;
use super::operands::{ConvOp, Ptrs};

use crate::cuda::CudaServer;
use crate::error::{cubecl, driver, EngineError};

/// What one device's device-thread tasks use: a cuDNN handle of their own (only that thread
/// calls it, one task at a time, so it needs no lock, and the first-call path's handle can be
/// busy meanwhile) and a handle on cubecl's device thread for that device.
pub(super) struct DeviceSide {
    index: usize,
    handle: sys::cudnnHandle_t,
    ctx: cudarc::driver::sys::CUcontext,
    thread: cubecl::device_handle::DeviceHandle<CudaServer>,
    /// The graph API's plans built on this handle, per shape (`None`: that shape's plan did
    /// not build here, it stays on the legacy calls). Only the device thread touches it.
    plans: Mutex<HashMap<String, Option<Arc<Plan>>>>,
}

// The cuDNN handle is only used on cubecl's device thread.
unsafe impl Send for DeviceSide {}
unsafe impl Sync for DeviceSide {}

/// Whether `MEDDDPM_CUDNN_LEGACY=1` keeps every call on cuDNN's legacy functions (no graph API
/// plans): for comparisons, and a way out should a cuDNN build misbehave with the plans.
pub(super) fn legacy_requested() -> bool {
    static LEGACY: OnceLock<bool> = OnceLock::new();
    *LEGACY.get_or_init(|| std::env::var("MEDDDPM_CUDNN_LEGACY").is_ok_and(|v| v == "1"))
}

/// How a device-thread call runs: cuDNN's legacy function, a graph API plan already chosen, or
/// the legacy function after timing the plans for this shape (its first call here; the
/// outcome goes into the table).
pub(super) enum Graph {
    Legacy,
    Plan(Arc<PlanChoice>),
    Search(Arc<AlgoTable>),
}

impl DeviceSide {
    /// The device thread's side for `device`, whose primary context is `ctx` (made on a
    /// device's first hand-over: the engine keeps one per device).
    pub(super) fn new(
        device: &cubecl_cuda::CudaDevice,
        ctx: cudarc::driver::sys::CUcontext,
    ) -> Result<Self, EngineError> {
        use cubecl::device::Device as _;
        let on_device = |e: EngineError| e.context(format!("CUDA device {}", device.index));
        // SAFETY: the primary context, retained in `init`, is made current first.
        unsafe { cudarc::driver::result::ctx::set_current(ctx) }
            .map_err(|e| on_device(driver("CUDA context")(e)))?;
        let mut handle = std::ptr::null_mut();
        // SAFETY: plain handle creation with the context current.
        check(unsafe { sys::cudnnCreate(&mut handle) }, "cudnnCreate").map_err(on_device)?;
        Ok(DeviceSide {
            index: device.index,
            handle,
            ctx,
            // The device thread of the client that burn already made for this device.
            thread: cubecl::device_handle::DeviceHandle::new(device.to_id()),
            plans: Mutex::new(HashMap::new()),
        })
    }
}

/// The buffers of one call, held until the device thread has enqueued it.
pub(super) struct OperandHandles {
    pub x: cubecl::server::Handle,
    pub w: Option<cubecl::server::Handle>,
    pub dy: Option<cubecl::server::Handle>,
    pub out: cubecl::server::Handle,
    pub workspace: Option<cubecl::server::Handle>,
}

/// Hands one call of an already searched shape to cubecl's device thread without waiting: it
/// runs after the kernels queued before it, resolves the buffers there (no round trip) and
/// enqueues cuDNN on the buffers' stream. A failure is kept for [`device_error`].
pub(super) fn enqueue(
    side: &'static DeviceSide,
    (op, desc, choice, ws_bytes): (ConvOp, Arc<Descriptors>, Choice, usize),
    handles: OperandHandles,
    key: String,
    graph: Graph,
) {
    use cubecl::server::ComputeServer as _;
    let stream_id = cubecl::stream_id::StreamId::current();
    side.thread.submit(move |server: &mut CudaServer| {
        let mut resolve = |h: &cubecl::server::Handle| -> Result<(u64, usize), EngineError> {
            let managed = server
                .get_resource(h.clone().binding(), stream_id)
                .map_err(cubecl("buffer"))?;
            let r = managed.resource();
            Ok((r.ptr, r.stream as usize))
        };
        let result = (|| {
            let mut ptr_of = |h: &Option<cubecl::server::Handle>| match h {
                Some(h) => resolve(h).map(|r| r.0),
                None => Ok(0),
            };
            let w = ptr_of(&handles.w)?;
            let dy = ptr_of(&handles.dy)?;
            let ws = ptr_of(&handles.workspace)?;
            let (x, stream) = resolve(&handles.x)?;
            let out = resolve(&handles.out)?.0;
            let ptrs = Ptrs { x, w, dy, out };
            // SAFETY: the retained primary context; the handle is this thread's alone, and the
            // stream is the one cubecl enqueues these buffers' kernels on.
            unsafe { cudarc::driver::result::ctx::set_current(side.ctx) }
                .map_err(driver("CUDA context"))?;
            let stream = stream as sys::cudaStream_t;
            check(
                unsafe { sys::cudnnSetStream(side.handle, stream) },
                "set stream",
            )?;
            let since = std::time::Instant::now();
            let ran = match side.run_graph(graph, (op, &desc, &key), &ptrs, (ws, ws_bytes), stream)
            {
                true => Ok(()),
                false => launch(
                    op,
                    side.handle,
                    &desc,
                    &ptrs,
                    choice.algo,
                    ws,
                    choice.workspace,
                ),
            };
            cubecl_common::busy::IN_CALL[cubecl_common::busy::CUDNN].add(since);
            ran
        })();
        drop(handles);
        if let Err(e) = result {
            let message = format!(
                "cuDNN {key} failed on CUDA device {}'s device thread: {e}",
                side.index
            );
            crate::device_error::record_device_error(message);
        }
    });
}

impl DeviceSide {
    /// Runs the call with a graph API plan if `graph` says so and it can (its plan builds, the
    /// buffers are aligned as plans promise, the workspace is large enough); `false` leaves it
    /// to the legacy function. A `Graph::Search` times the shape's plans first (on these
    /// buffers, which the legacy call then overwrites) and records the outcome.
    fn run_graph(
        &self,
        graph: Graph,
        (op, desc, key): (ConvOp, &Descriptors, &str),
        ptrs: &Ptrs,
        (ws, ws_bytes): (u64, usize),
        stream: sys::cudaStream_t,
    ) -> bool {
        let Some(geometry) = desc.geometry.as_ref() else {
            return false;
        };
        if !graph::aligned(op, ptrs) {
            return false;
        }
        let mut plans = self.plans.lock().unwrap_or_else(|e| e.into_inner());
        match graph {
            Graph::Legacy => false,
            Graph::Search(table) => {
                let stream = stream as cudarc::driver::sys::CUstream;
                match graph::search(self.handle, geometry, ptrs, stream) {
                    Ok((plan, choice)) => {
                        plans.insert(key.to_string(), Some(Arc::new(plan)));
                        table.plans.settle(key, Some(choice));
                    }
                    Err(e) => {
                        note_once(format!("cuDNN graph API, {key}: {e}; legacy calls used"));
                        table.plans.settle(key, None);
                    }
                }
                false
            }
            Graph::Plan(choice) => {
                let plan = plans.entry(key.to_string()).or_insert_with(|| {
                    match Plan::rebuild(self.handle, geometry, &choice) {
                        Ok(plan) => Some(Arc::new(plan)),
                        Err(e) => {
                            note_once(format!("cuDNN graph API, {key}: {e}; legacy calls used"));
                            None
                        }
                    }
                });
                match plan {
                    Some(plan) if plan.workspace <= ws_bytes => {
                        plan.execute(self.handle, op, ptrs, ws).is_ok()
                    }
                    _ => false,
                }
            }
        }
    }
}

/// Reports the first graph API failure of the process (the calls concerned fall back to the
/// legacy functions, which compute the same convolution).
fn note_once(message: String) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        log::info!("{message}");
    }
}
