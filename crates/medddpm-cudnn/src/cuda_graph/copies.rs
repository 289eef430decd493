//! A replay's two halves on the device thread (inputs copied in and the graph launched; the
//! outputs copied out), and the driver's copies and stream ordering they use: device-to-device
//! copies (batched where the driver can), and one stream made to wait for another.

use cubecl::stream_id::StreamId;
use cudarc::driver::sys::{self, CUstream};

use super::{addresses, CudaStepGraph, GRAPH_STREAM};
use crate::cuda::CudaServer;
use crate::error::{cubecl, driver, EngineError};

/// Copies `len` bytes from `src` to `dst` on `cuda`.
pub(super) fn memcpy(dst: u64, src: u64, len: usize, cuda: CUstream) -> Result<(), EngineError> {
    // SAFETY: two live buffers of at least `len` bytes, held by the caller until enqueued.
    let copied = unsafe { sys::cuMemcpyDtoDAsync_v2(dst, src, len, cuda) };
    match copied {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        other => Err(driver("cuMemcpyDtoDAsync")(cudarc::driver::DriverError(
            other,
        ))),
    }
}

/// `cuMemcpyBatchAsync`'s attributes (`CUmemcpyAttributes`, CUDA 12.8 and later; declared
/// here because cudarc's bindings depend on the CUDA version it was built for).
#[repr(C)]
struct BatchAttributes {
    src_access_order: u32,
    src_location_hint: [u32; 2],
    dst_location_hint: [u32; 2],
    flags: u32,
}

/// `CU_MEMCPY_SRC_ACCESS_ORDER_STREAM`: a source is read in stream order.
const SRC_ACCESS_ORDER_STREAM: u32 = 1;

type BatchV2 = unsafe extern "C" fn(
    *mut u64,
    *mut u64,
    *mut usize,
    usize,
    *mut BatchAttributes,
    *mut usize,
    usize,
    CUstream,
) -> sys::CUresult;

/// The driver's `cuMemcpyBatchAsync_v2` (CUDA 13), if this driver exports it.
fn batch_copy() -> Option<BatchV2> {
    static BATCH: std::sync::OnceLock<Option<BatchV2>> = std::sync::OnceLock::new();
    *BATCH.get_or_init(|| {
        // SAFETY: the driver library the process already uses; the symbol's signature is
        // CUDA 13's `cuMemcpyBatchAsync`.
        unsafe {
            let library = libloading::Library::new("libcuda.so.1").ok()?;
            let f = *library.get::<BatchV2>(b"cuMemcpyBatchAsync_v2\0").ok()?;
            // The driver stays loaded for the process's life.
            std::mem::forget(library);
            Some(f)
        }
    })
}

/// Enqueues the device-to-device copies `(dst, src, len)` on `cuda`: one driver call for all
/// of them where the driver has batched copies, else a call each (a replay copies a few
/// hundred tensors each way).
pub(super) fn memcpy_all(copies: &[(u64, u64, usize)], cuda: CUstream) -> Result<(), EngineError> {
    if copies.is_empty() {
        return Ok(());
    }
    let one_by_one = || {
        copies
            .iter()
            .try_for_each(|&(dst, src, len)| memcpy(dst, src, len, cuda))
    };
    static REFUSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let batch = match batch_copy() {
        Some(batch) if !REFUSED.load(std::sync::atomic::Ordering::Relaxed) => batch,
        _ => return one_by_one(),
    };
    let mut dsts: Vec<u64> = copies.iter().map(|c| c.0).collect();
    let mut srcs: Vec<u64> = copies.iter().map(|c| c.1).collect();
    let mut sizes: Vec<usize> = copies.iter().map(|c| c.2).collect();
    let mut attributes = BatchAttributes {
        src_access_order: SRC_ACCESS_ORDER_STREAM,
        src_location_hint: [0; 2],
        dst_location_hint: [0; 2],
        flags: 0,
    };
    let mut first = 0usize;
    // SAFETY: `copies.len()` entries in each array, live buffers held by the caller until
    // enqueued, one attribute set applying from the first copy on.
    let copied = unsafe {
        batch(
            dsts.as_mut_ptr(),
            srcs.as_mut_ptr(),
            sizes.as_mut_ptr(),
            copies.len(),
            &mut attributes,
            &mut first,
            1,
            cuda,
        )
    };
    if copied != sys::CUresult::CUDA_SUCCESS {
        // A driver that exports the call but refuses these copies: one call each from now on
        // (copying again what the batch may have copied writes the same bytes).
        REFUSED.store(true, std::sync::atomic::Ordering::Relaxed);
        return one_by_one();
    }
    Ok(())
}

/// Makes `waiter` wait for the work enqueued on `signaller` so far.
pub(super) fn order(signaller: CUstream, waiter: CUstream) -> Result<(), EngineError> {
    use cudarc::driver::result::{event, stream};
    // SAFETY: an event made, recorded, waited on and destroyed here, on two live streams.
    unsafe {
        let e = event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
            .map_err(driver("CUDA event"))?;
        event::record(e, signaller).map_err(driver("CUDA event"))?;
        stream::wait_event(waiter, e, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)
            .map_err(driver("CUDA event"))?;
        event::destroy(e).map_err(driver("CUDA event"))
    }
}

/// A replay's first half on the device thread: `given` (the inputs, on the caller's `stream`)
/// copied into the graph's input buffers, then the graph launched on its own stream after them.
pub(super) fn copy_in_and_launch(
    server: &mut CudaServer,
    exec: &CudaStepGraph,
    given: Vec<cubecl::server::Binding>,
    stream: StreamId,
) -> Result<(), EngineError> {
    use cubecl_common::busy::{GRAPH_COPIES, GRAPH_LAUNCH, IN_CALL};
    let (caller, graphs) = streams(server, stream)?;
    let since = std::time::Instant::now();
    let sources = addresses(server, given, stream)?;
    let copies: Vec<_> = (exec.inputs.iter().zip(sources))
        .map(|(&(dst, len), src)| (dst, src, len))
        .collect();
    memcpy_all(&copies, caller)?;
    order(caller, graphs)?;
    IN_CALL[GRAPH_COPIES].add(since);
    let graph = exec.graph.lock().unwrap_or_else(|e| e.into_inner());
    let graph = graph.as_ref().ok_or_else(|| EngineError::Cubecl {
        what: "graph",
        message: "the graph was released".into(),
    })?;
    let since = std::time::Instant::now();
    // SAFETY: the graph stream's pool keeps every buffer of the capture (no graph is released
    // while the caller holds `exec`), and only graphs run there.
    unsafe { graph.launch(graphs) }.map_err(|message| EngineError::Cubecl {
        what: "graph launch",
        message,
    })?;
    IN_CALL[GRAPH_LAUNCH].add(since);
    Ok(())
}

/// A replay's second half: the graph's outputs copied into `fresh` on the caller's `stream`,
/// once the graph has run.
pub(super) fn copy_out(
    server: &mut CudaServer,
    exec: &CudaStepGraph,
    fresh: Vec<cubecl::server::Binding>,
    stream: StreamId,
) -> Result<(), EngineError> {
    use cubecl_common::busy::{GRAPH_COPIES, IN_CALL};
    let (caller, graphs) = streams(server, stream)?;
    let since = std::time::Instant::now();
    order(graphs, caller)?;
    let targets = addresses(server, fresh, stream)?;
    let copies: Vec<_> = (exec.outputs.iter().zip(targets))
        .map(|(&(src, len), dst)| (dst, src, len))
        .collect();
    memcpy_all(&copies, caller)?;
    IN_CALL[GRAPH_COPIES].add(since);
    Ok(())
}

/// The CUDA streams of cubecl's `stream` (the caller's) and of the graphs.
fn streams(server: &mut CudaServer, stream: StreamId) -> Result<(CUstream, CUstream), EngineError> {
    let caller = server.cuda_stream(stream).map_err(cubecl("stream"))?;
    let graphs = server
        .cuda_stream(GRAPH_STREAM)
        .map_err(cubecl("graphs' stream"))?;
    Ok((caller, graphs))
}
