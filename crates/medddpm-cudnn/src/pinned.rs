//! Page-locked host memory that data threads fill and the GPU copies from, for burn's fused
//! CUDA backend.
//!
//! A copy from ordinary (pageable) memory makes CUDA wait for the stream to go idle before it
//! starts (the driver stages the data itself): in `medddpm train` that left the GPU idle for
//! 8-18 ms an optimizer step, right before each batch's first copy. Here the loader's threads
//! write a batch straight into page-locked buffers, and the device thread only enqueues an
//! asynchronous copy from them (cubecl's `write_to_gpu` copies page-locked data as it is). A
//! buffer goes back to its device's pool when cubecl drops it, after the stream has passed the
//! copy (cubecl's drop queue waits for that), so a run reuses a few buffers for all its steps.

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::sync::{Arc, Mutex};

use burn::tensor::ops::{FloatTensor, FloatTensorOps};
use burn::tensor::{DType, Shape, TensorData};
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::{BoolElement, FloatElement, IntElement};
use burn_fusion::NoOp;
use burn_ir::{BackendIr, InitOperationIr, OperationIr, OperationOutput};
use cubecl::server::CopyDescriptor;
use cubecl::stream_id::StreamId;
use cubecl_common::bytes::{AllocationController, AllocationProperty, Bytes};
use cubecl_cuda::{CudaDevice, CudaRuntime};

use crate::cuda::{device_thread, Cube, CudaServer, Fused};

/// The alignment cubecl gives its own page-locked buffers (the driver's are page-aligned).
const ALIGN: usize = core::mem::size_of::<u128>();

/// One page-locked allocation, never freed (a device's pool lives as long as the process).
struct Buffer {
    ptr: *mut u8,
    capacity: usize,
}

// SAFETY: plain host memory, owned by one pool or one `Bytes` at a time.
unsafe impl Send for Buffer {}

/// A device's idle buffers.
#[derive(Default)]
struct Pool {
    idle: Mutex<Vec<Buffer>>,
}

impl Pool {
    /// The smallest idle buffer that holds `len` bytes, if any.
    fn take(&self, len: usize) -> Option<Buffer> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let best = (0..idle.len())
            .filter(|&i| idle[i].capacity >= len)
            .min_by_key(|&i| idle[i].capacity)?;
        Some(idle.swap_remove(best))
    }
}

/// `Bytes` over a pooled buffer: handed back to the pool when dropped.
struct Pooled {
    buffer: Option<Buffer>,
    len: usize,
    pool: Arc<Pool>,
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Some(buffer) = self.buffer.take() {
            let mut idle = self.pool.idle.lock().unwrap_or_else(|e| e.into_inner());
            idle.push(buffer);
        }
    }
}

impl AllocationController for Pooled {
    fn alloc_align(&self) -> usize {
        ALIGN
    }

    fn property(&self) -> AllocationProperty {
        AllocationProperty::Pinned
    }

    unsafe fn memory_mut(&mut self) -> &mut [MaybeUninit<u8>] {
        let buffer = self
            .buffer
            .as_ref()
            .expect("a pooled buffer is held until drop");
        // SAFETY: `len <= capacity` bytes of a live allocation this controller owns.
        unsafe { std::slice::from_raw_parts_mut(buffer.ptr.cast(), self.len) }
    }

    fn memory(&self) -> &[MaybeUninit<u8>] {
        let buffer = self
            .buffer
            .as_ref()
            .expect("a pooled buffer is held until drop");
        // SAFETY: as above.
        unsafe { std::slice::from_raw_parts(buffer.ptr.cast(), self.len) }
    }
}

/// The pool of `device`.
fn pool(device: &CudaDevice) -> Arc<Pool> {
    static POOLS: Mutex<Option<HashMap<usize, Arc<Pool>>>> = Mutex::new(None);
    let mut pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    pools
        .get_or_insert_with(HashMap::new)
        .entry(device.index)
        .or_default()
        .clone()
}

/// `parts`, one after another, in page-locked memory for `device` from its pool (allocated on
/// the device thread, where the device's context is current, when no idle buffer is large
/// enough); `None` when the driver refuses.
pub fn host_bytes(device: &CudaDevice, parts: &[&[u8]]) -> Option<Bytes> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let pool = pool(device);
    let buffer = match pool.take(len) {
        Some(buffer) => buffer,
        None => {
            let allocated = device_thread(device)
                .submit_blocking(move |server: &mut CudaServer| {
                    // Any command makes the device's context current on this thread.
                    server.cuda_stream(StreamId::current()).ok()?;
                    // SAFETY: a plain page-locked allocation in the current context.
                    unsafe { cudarc::driver::result::malloc_host(len.max(1), 0) }
                        .ok()
                        .map(|ptr| ptr as usize)
                })
                .ok()
                .flatten()?;
            Buffer {
                ptr: allocated as *mut u8,
                capacity: len.max(1),
            }
        }
    };
    let mut at = 0;
    for part in parts {
        // SAFETY: `at + part.len() <= len <= capacity` bytes of a buffer no one else holds.
        unsafe { std::ptr::copy_nonoverlapping(part.as_ptr(), buffer.ptr.add(at), part.len()) };
        at += part.len();
    }
    let controller = Pooled {
        buffer: Some(buffer),
        len,
        pool,
    };
    // SAFETY: the controller's first `len` bytes are initialised (the parts, copied above).
    Some(unsafe { Bytes::from_controller(Box::new(controller), len) })
}

/// `data` on `device`: copied asynchronously when it lies in page-locked memory (no wait for
/// the stream), else as burn uploads any data.
pub fn float_from_host<F: FloatElement, I: IntElement, BT: BoolElement>(
    data: TensorData,
    device: &CudaDevice,
) -> FloatTensor<Fused<F, I, BT>> {
    if data.bytes.property() != AllocationProperty::Pinned {
        return Fused::<F, I, BT>::float_from_data(data, device);
    }
    let (shape, dtype): (Shape, DType) = (data.shape.clone(), data.dtype);
    let client = <CudaRuntime as cubecl::Runtime>::client(device);
    let tensor = empty_device_contiguous_dtype(client, device.clone(), shape.clone(), dtype);
    let copy = CopyDescriptor::new(
        tensor.handle.clone().binding(),
        tensor.meta.shape().clone(),
        tensor.meta.strides().clone(),
        dtype.size(),
    );
    let (bytes, stream) = (data.bytes, StreamId::current());
    device_thread(device).submit(move |server: &mut CudaServer| {
        use cubecl::server::ComputeServer as _;
        server.write(vec![(copy, bytes)], stream);
    });
    // Registered with the fusion client as burn's own `float_from_data` registers an upload.
    let client = burn_fusion::get_client::<Cube<F, I, BT>>(device);
    let handle = <Cube<F, I, BT> as BackendIr>::float_tensor_handle(tensor);
    let desc = InitOperationIr::create(shape, dtype, || client.register_tensor_handle(handle));
    client
        .register(
            Default::default(),
            OperationIr::Init(desc),
            NoOp::<Cube<F, I, BT>>::new(),
        )
        .output()
}
