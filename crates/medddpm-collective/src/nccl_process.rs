//! NCCL across processes, one device each: a communicator joined from an id the first
//! process made, and the packed all-reduce enqueued on the stream cubecl runs the device's
//! kernels on (from cubecl's device thread, as the cuDNN convolutions are), so no event or
//! second stream orders it after the backward pass or the update after it.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use burn::tensor::backend::DeviceOps;
use burn_cubecl::{BoolElement, FloatElement, IntElement};
use burn_fusion::stream::Operation;
use burn_fusion::FusionBackend;
use burn_ir::CustomOpIr;

use super::nccl::{check_call, register_packed, status, Gradient, Handles, Packed};
use super::watchdog::{CommGuard, Watchdog, Watched};
use super::{CollectiveUnavailable, NcclId, ProcessGroup};
use crate::cuda::Cube;
use crate::panics::quiet_catch;

use crate::cuda::CudaServer;

/// See [`super::nccl_unique_id`].
pub(super) fn unique_id() -> Result<NcclId, CollectiveUnavailable> {
    status()?;
    let id = quiet_catch(cudarc::nccl::result::get_uniqueid)
        .map_err(|p| CollectiveUnavailable(format!("ncclGetUniqueId: {p}")))?
        .map_err(|e| CollectiveUnavailable(format!("ncclGetUniqueId failed: {:?}", e.0)))?;
    Ok(NcclId(id.internal.iter().map(|&c| c as u8).collect()))
}

/// One process's NCCL communicator and the device thread its calls are enqueued from.
struct ProcessComm {
    comm: usize,
    ctx: usize,
    index: usize,
    thread: cubecl::device_handle::DeviceHandle<CudaServer>,
    /// Keeps the calls' enqueuing and the watch's abort apart.
    guard: Arc<CommGuard>,
    /// The watch over the calls, with a step timeout.
    watchdog: Option<Watchdog>,
}

/// Joins communicator `id` on `device`'s thread, with the device's primary context current
/// (NCCL takes its device from the context; cubecl's device thread may have none current);
/// with a `timeout`, a watch aborts the communicator when a call takes longer (`watchdog`).
pub(super) fn join(
    device: &cubecl_cuda::CudaDevice,
    id: &NcclId,
    (rank, world): (usize, usize),
    timeout: Option<Duration>,
) -> Result<ProcessGroup, CollectiveUnavailable> {
    use cubecl::device::Device as _;
    status()?;
    let bytes: [u8; 128] = id.0.as_slice().try_into().map_err(|_| {
        CollectiveUnavailable(format!("an NCCL id has 128 bytes, this one {}", id.0.len()))
    })?;
    let unavailable =
        |what: String| CollectiveUnavailable(format!("CUDA device {}: {what}", device.index));
    let ctx = quiet_catch(|| {
        use cudarc::driver::result;
        result::init()?;
        let dev = result::device::get(device.index as i32)?;
        // SAFETY: a valid device; cubecl retains the same primary context.
        unsafe { result::primary_ctx::retain(dev) }
    })
    .map_err(|p| unavailable(p.to_string()))?
    .map_err(|e| unavailable(format!("CUDA context: {e}")))? as usize;
    let thread = cubecl::device_handle::DeviceHandle::<CudaServer>::new(device.to_id());
    let internal = bytes.map(|b| b as std::ffi::c_char);
    let comm = thread
        .submit_blocking(move |_server: &mut CudaServer| {
            // SAFETY: the retained primary context; `comm` receives NCCL's communicator.
            unsafe {
                cudarc::driver::result::ctx::set_current(ctx as cudarc::driver::sys::CUcontext)
                    .map_err(|e| e.to_string())?;
                let mut comm = std::ptr::null_mut();
                cudarc::nccl::result::comm_init_rank(
                    &mut comm,
                    world as i32,
                    cudarc::nccl::sys::ncclUniqueId { internal },
                    rank as i32,
                )
                .map_err(|e| format!("ncclCommInitRank: {:?}", e.0))?;
                Ok::<usize, String>(comm as usize)
            }
        })
        .map_err(|e| unavailable(format!("device thread: {e:?}")))?
        .map_err(unavailable)?;
    let guard = Arc::new(CommGuard::default());
    let watchdog = timeout
        .map(|timeout| {
            Watchdog::start(Watched {
                comm,
                ctx,
                device: device.index,
                rank,
                world,
                timeout,
                guard: guard.clone(),
            })
        })
        .transpose()
        .map_err(unavailable)?;
    Ok(ProcessGroup {
        comm: Arc::new(ProcessComm {
            comm,
            ctx,
            index: device.index,
            thread,
            guard,
            watchdog,
        }),
        rank,
        world,
    })
}

/// The packed all-reduce over the processes of a group: the mean enqueued by NCCL on the
/// stream cubecl runs this device's kernels on, so no event or second stream is needed.
#[derive(Clone)]
struct AllReduceMeanAcross<B> {
    desc: CustomOpIr,
    comm: std::sync::Arc<dyn std::any::Any + Send + Sync>,
    _b: PhantomData<B>,
}

impl<B> std::fmt::Debug for AllReduceMeanAcross<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AllReduceMeanAcross({:?})", self.desc)
    }
}

impl<F: FloatElement, I: IntElement, BT: BoolElement>
    Operation<<Cube<F, I, BT> as FusionBackend>::FusionRuntime>
    for AllReduceMeanAcross<Cube<F, I, BT>>
{
    fn execute(&self, handles: &mut Handles<F, I, BT>) {
        Packed::reduce::<F, I, BT>(&self.desc, handles, |flat, total| {
            let comm = self
                .comm
                .clone()
                .downcast::<ProcessComm>()
                .expect("checked when registered");
            enqueue_all_reduce(comm, flat.handle.clone(), total);
        });
    }
}

/// Hands `ncclAllReduce(ncclAvg)` of the `count` f32s of `buffer` (in place) to the device
/// thread, after the kernels queued before it; a failure is kept for `device_error`.
fn enqueue_all_reduce(
    comm: std::sync::Arc<ProcessComm>,
    buffer: cubecl::server::Handle,
    count: usize,
) {
    use cubecl::server::ComputeServer as _;
    let stream_id = cubecl::stream_id::StreamId::current();
    let thread = comm.thread.clone();
    thread.submit(move |server: &mut CudaServer| {
        let result = (|| {
            let managed = server
                .get_resource(buffer.clone().binding(), stream_id)
                .map_err(|e| format!("buffer: {e:?}"))?;
            let r = managed.resource();
            let (ptr, stream) = (r.ptr, r.stream);
            comm.guard.enqueue(|| {
                // SAFETY: the retained primary context; `ptr` holds `count` f32s (the packed
                // buffer, kept alive by `buffer` until enqueued; later reuse is ordered after
                // this call on the same stream), and the communicator is this process's, not
                // aborted (the guard).
                unsafe {
                    cudarc::driver::result::ctx::set_current(
                        comm.ctx as cudarc::driver::sys::CUcontext,
                    )
                    .map_err(|e| e.to_string())?;
                    cudarc::nccl::result::all_reduce(
                        ptr as *const std::ffi::c_void,
                        ptr as *mut std::ffi::c_void,
                        count,
                        cudarc::nccl::sys::ncclDataType_t::ncclFloat32,
                        cudarc::nccl::sys::ncclRedOp_t::ncclAvg,
                        comm.comm as cudarc::nccl::sys::ncclComm_t,
                        stream as cudarc::nccl::sys::cudaStream_t,
                    )
                    .map_err(|e| format!("ncclAllReduce: {:?}", e.0))?;
                }
                match &comm.watchdog {
                    Some(watchdog) => watchdog.watch(stream as usize),
                    None => Ok(()),
                }
            })?;
            Ok::<(), String>(())
        })();
        drop(buffer);
        if let Err(e) = result {
            crate::device_error::record_device_error(format!(
                "the gradient all-reduce failed on CUDA device {}'s device thread: {e}",
                comm.index
            ));
        }
    });
}

/// See [`super::CollectiveBackend::all_reduce_mean_packed_across`].
pub(super) fn all_reduce_mean_packed_across<F: FloatElement, I: IntElement, BT: BoolElement>(
    tensors: Vec<Gradient<F, I, BT>>,
    group: &ProcessGroup,
) -> Result<Vec<Gradient<F, I, BT>>, CollectiveUnavailable> {
    let Ok(comm) = group.comm.clone().downcast::<ProcessComm>() else {
        return Err(CollectiveUnavailable(
            "the process group is not an NCCL communicator of the CUDA backend".into(),
        ));
    };
    if let Some(first) = tensors.first() {
        let own = first.client.device().id();
        if own.index_id as usize != comm.index {
            return Err(CollectiveUnavailable(format!(
                "the gradients are on CUDA device {}, the process group on {}",
                own.index_id, comm.index
            )));
        }
        check_call::<F, I, BT>(&tensors, &[own])?;
    }
    let comm: std::sync::Arc<dyn std::any::Any + Send + Sync> = comm;
    register_packed::<F, I, BT, _>("medddpm_nccl_all_reduce_mean_across", tensors, |desc| {
        AllReduceMeanAcross::<Cube<F, I, BT>> {
            desc,
            comm,
            _b: PhantomData,
        }
    })
}
