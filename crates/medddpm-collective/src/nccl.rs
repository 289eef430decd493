//! NCCL's all-reduce on burn's CUDA backend: one burn-fusion custom operation in the device's
//! stream of work (as the cuDNN convolutions are), executed with cubecl-cuda's communicators.
//!
//! Order on the device: the operation runs on burn-fusion's device thread after the work queued
//! before it. cubecl then makes its communication stream wait for the compute stream, runs
//! `ncclAllReduce(ncclAvg)` in place on the communication stream, and (`sync_collective`)
//! makes the compute stream wait for the communication stream, so later kernels read the mean.
//! The first call for a group also creates the NCCL communicator on each device's thread
//! (`ncclCommInitRank`), which blocks that thread until every device of the group has called.

use std::marker::PhantomData;
use std::sync::OnceLock;

use burn::tensor::backend::{DeviceId, DeviceOps};
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Shape};
use burn_cubecl::cubecl::server::ReduceOperation;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, FloatElement, IntElement};
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::{FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, TensorIr};
use cubecl::prelude::*;
use cubecl::{calculate_cube_count_elemwise, CubeDim};
use cubecl_cuda::CudaRuntime;

use super::{pack_offsets, sorted_group, CollectiveUnavailable};
use crate::cuda::{Cube, Fused};
use crate::panics::quiet_catch;

/// The tensors a fusion operation executes on.
pub(super) type Handles<F, I, BT> = HandleContainer<
    <<Cube<F, I, BT> as FusionBackend>::FusionRuntime as FusionRuntime>::FusionHandle,
>;

/// A tensor the collectives average (a step's gradient).
pub(super) type Gradient<F, I, BT> = FloatTensor<Fused<F, I, BT>>;

/// Oldest NCCL accepted: 2.10 brought `ncclAvg` (the mean) and bf16 reductions.
pub const MIN_NCCL_VERSION: i32 = 21000;

/// `2.21.5` for NCCL's version code 22105 (`1000 * major + 100 * minor + patch` before 2.9).
pub(super) fn version_string(code: i32) -> String {
    let (major, rest) = if code >= 20900 {
        (code / 10000, code % 10000)
    } else {
        (code / 1000, code % 1000)
    };
    format!("{major}.{}.{}", rest / 100, rest % 100)
}

/// What to do when no NCCL library loads: the names cudarc tries (`candidates`) do not include
/// NCCL's own soname `libnccl.so.2`, which is all that PyTorch's wheel and Debian's `libnccl2`
/// install.
pub(super) fn missing_library_message(candidates: &[String]) -> String {
    format!(
        "NCCL could not be loaded: none of {} is on the library search path. NCCL installs itself \
         as libnccl.so.2, a name cudarc does not try, so setting LD_LIBRARY_PATH to its folder is \
         not enough: link it as libnccl.so in a folder on LD_LIBRARY_PATH, e.g. for PyTorch's \
         wheel nvidia-nccl-cu12: `mkdir -p ~/.local/nccl && ln -sf \"$(python3 -c 'import \
         nvidia.nccl as m; print(m.__path__[0])')/lib/libnccl.so.2\" ~/.local/nccl/libnccl.so \
         && export LD_LIBRARY_PATH=~/.local/nccl:$LD_LIBRARY_PATH`; or install the system \
         package that has the link (Debian/Ubuntu: libnccl-dev)",
        candidates.join(", ")
    )
}

/// See [`super::nccl_status`].
pub(super) fn status() -> Result<String, CollectiveUnavailable> {
    static STATUS: OnceLock<Result<i32, CollectiveUnavailable>> = OnceLock::new();
    let code = STATUS.get_or_init(load).clone()?;
    if code < MIN_NCCL_VERSION {
        return Err(CollectiveUnavailable(format!(
            "NCCL {} is too old: the mean all-reduce needs NCCL {} or newer",
            version_string(code),
            version_string(MIN_NCCL_VERSION)
        )));
    }
    Ok(format!("NCCL {}", version_string(code)))
}

/// Opens the library cudarc opens and asks its version.
fn load() -> Result<i32, CollectiveUnavailable> {
    // SAFETY: probing for the library only opens it.
    if !unsafe { cudarc::nccl::sys::is_culib_present() } {
        let mut names = cudarc::get_lib_name_candidates("nccl");
        names.dedup();
        return Err(CollectiveUnavailable(missing_library_message(&names)));
    }
    // A missing symbol panics inside cudarc's loader.
    match quiet_catch(cudarc::nccl::result::get_nccl_version) {
        Ok(Ok(code)) => Ok(code),
        Ok(Err(e)) => Err(CollectiveUnavailable(format!(
            "ncclGetVersion failed: {:?}",
            e.0
        ))),
        Err(panic) => Err(CollectiveUnavailable(format!(
            "NCCL loaded but is unusable: {panic}"
        ))),
    }
}

/// See [`super::cuda_device_count`].
pub(super) fn device_count() -> Result<usize, CollectiveUnavailable> {
    let count = quiet_catch(|| {
        cudarc::driver::result::init()?;
        cudarc::driver::result::device::get_count()
    });
    match count {
        Ok(Ok(n)) => Ok(n.max(0) as usize),
        Ok(Err(e)) => Err(CollectiveUnavailable(format!("CUDA: {e}"))),
        Err(panic) => Err(CollectiveUnavailable(format!("CUDA: {panic}"))),
    }
}

/// The mean all-reduce over `group` of each input into the output of the same position, or
/// (`packed`) of every input at once: packed into one f32 buffer, averaged by one NCCL call,
/// each output an f32 view of its part.
#[derive(Debug, Clone)]
pub(super) struct AllReduceMean<B> {
    pub desc: CustomOpIr,
    pub group: Vec<DeviceId>,
    pub packed: bool,
    pub _b: PhantomData<B>,
}

impl<F: FloatElement, I: IntElement, BT: BoolElement>
    Operation<<Cube<F, I, BT> as FusionBackend>::FusionRuntime> for AllReduceMean<Cube<F, I, BT>>
{
    fn execute(&self, handles: &mut Handles<F, I, BT>) {
        if self.packed {
            Packed::reduce::<F, I, BT>(&self.desc, handles, |flat, _| {
                self.mean_in_place(flat).sync_collective()
            });
            return;
        }
        let mut last_client = None;
        for (input, output) in self.desc.inputs.iter().zip(&self.desc.outputs) {
            let tensor = handles.get_float_tensor::<Cube<F, I, BT>>(input);
            // Every rank skips an empty tensor alike (the shapes agree across ranks).
            if tensor.meta.shape().num_elements() == 0 {
                handles.register_float_tensor::<Cube<F, I, BT>>(&output.id, tensor);
                continue;
            }
            let tensor = exclusive_contiguous(tensor);
            last_client = Some(self.mean_in_place(&tensor));
            handles.register_float_tensor::<Cube<F, I, BT>>(&output.id, tensor);
        }
        // One wait of the compute stream for the communication stream covers all of them.
        if let Some(client) = last_client {
            client.sync_collective();
        }
    }
}

impl<B> AllReduceMean<B> {
    /// `ncclAllReduce(ncclAvg)` of `tensor`'s buffer over the group, in place, queued on the
    /// communication stream: the client whose `sync_collective` orders later kernels after it.
    fn mean_in_place(&self, tensor: &CubeTensor<CudaRuntime>) -> ComputeClient<CudaRuntime> {
        let mut client = tensor.client.clone();
        client.all_reduce(
            tensor.handle.clone(),
            tensor.handle.clone(),
            tensor.dtype.into(),
            self.group.clone(),
            ReduceOperation::Mean,
        );
        client
    }
}

/// `tensor` itself when NCCL may overwrite it (this operation holds the only reference to a
/// buffer holding exactly its elements in order), else a copy that it may: as burn-cubecl's
/// own all-reduce, so the caller's other references never see the mean. NCCL's element count
/// is the buffer's size, so it must hold nothing else.
fn exclusive_contiguous<R: burn_cubecl::CubeRuntime>(tensor: CubeTensor<R>) -> CubeTensor<R> {
    if tensor.can_mut() && tensor.is_contiguous() && tensor.is_contiguous_buffer() {
        return tensor;
    }
    let (client, device, dtype) = (tensor.client.clone(), tensor.device.clone(), tensor.dtype);
    let copy =
        burn_cubecl::cubecl::std::tensor::into_contiguous(&client, tensor.binding(), dtype.into());
    CubeTensor::new(client, copy.handle, *copy.metadata, device, dtype)
}

/// Tensors packed into one f32 buffer, each part starting on the device's alignment.
pub(super) struct Packed {
    flat: CubeTensor<CudaRuntime>,
    offsets: Vec<usize>,
    /// Elements in use (the buffer holds at least one).
    total: usize,
}

impl Packed {
    /// The inputs of `desc` packed, `reduce` run on the buffer in place (given its elements in
    /// use, where there are any), and the outputs registered as f32 views of their parts.
    pub fn reduce<F: FloatElement, I: IntElement, BT: BoolElement>(
        desc: &CustomOpIr,
        handles: &mut Handles<F, I, BT>,
        reduce: impl FnOnce(&CubeTensor<CudaRuntime>, usize),
    ) {
        let Some(packed) = Self::inputs_of::<F, I, BT>(desc, handles) else {
            return;
        };
        if packed.total > 0 {
            reduce(&packed.flat, packed.total);
        }
        packed.register_views::<F, I, BT>(&desc.outputs, handles);
    }

    /// The inputs of `desc` packed.
    fn inputs_of<F: FloatElement, I: IntElement, BT: BoolElement>(
        desc: &CustomOpIr,
        handles: &mut Handles<F, I, BT>,
    ) -> Option<Self> {
        let inputs: Vec<CubeTensor<CudaRuntime>> = desc
            .inputs
            .iter()
            .map(|t| handles.get_float_tensor::<Cube<F, I, BT>>(t))
            .collect();
        Self::of(inputs)
    }

    /// `inputs` copied into a fresh buffer (none for no inputs).
    fn of(inputs: Vec<CubeTensor<CudaRuntime>>) -> Option<Self> {
        let first = inputs.first()?;
        let (client, device) = (first.client.clone(), first.device.clone());
        let align = packing_alignment(&client);
        let offsets = pack_offsets(inputs.iter().map(|t| t.meta.num_elements()), align);
        let total = *offsets.last().expect("one offset past the end");
        let flat = empty_device_contiguous_dtype::<CudaRuntime>(
            client,
            device,
            Shape::new([total.max(1)]),
            DType::F32,
        );
        for (input, &offset) in inputs.into_iter().zip(&offsets) {
            pack(input, &flat, offset);
        }
        Some(Self {
            flat,
            offsets,
            total,
        })
    }

    /// Registers each output as an f32 view of its part.
    fn register_views<F: FloatElement, I: IntElement, BT: BoolElement>(
        &self,
        outputs: &[TensorIr],
        handles: &mut Handles<F, I, BT>,
    ) {
        let (client, device) = (&self.flat.client, &self.flat.device);
        for (output, &offset) in outputs.iter().zip(&self.offsets) {
            let n = output.shape.num_elements();
            let end = self.total.max(1) - offset - n;
            let handle = self
                .flat
                .handle
                .clone()
                .offset_start(4 * offset as u64)
                .offset_end(4 * end as u64);
            let view = CubeTensor::new_contiguous(
                client.clone(),
                device.clone(),
                output.shape.clone(),
                handle,
                DType::F32,
            );
            handles.register_float_tensor::<Cube<F, I, BT>>(&output.id, view);
        }
    }
}

/// Elements between the starts of packed parts: the memory alignment of the device (a view
/// must start and end on it to stay a view), in f32 elements.
fn packing_alignment(client: &ComputeClient<CudaRuntime>) -> usize {
    (client.properties().memory.alignment as usize / 4).max(1)
}

/// `out[offset + i] = f32(input[i])` over the input's elements in row-major order.
#[cube(launch_unchecked)]
fn pack_kernel<E: Float>(
    input: &Tensor<E>,
    out: &mut Tensor<f32>,
    offset: u32,
    len: u32,
    #[define(E)] _dtype: StorageType,
) {
    if ABSOLUTE_POS < len as usize {
        out[offset as usize + ABSOLUTE_POS] = f32::cast_from(input[ABSOLUTE_POS]);
    }
}

/// Copies `input` (made contiguous first if it is not) into `flat` from element `offset`.
fn pack(input: CubeTensor<CudaRuntime>, flat: &CubeTensor<CudaRuntime>, offset: usize) {
    let len = input.meta.num_elements();
    if len == 0 {
        return;
    }
    let input = into_contiguous(input);
    let dim = CubeDim::new_1d(256);
    let count = calculate_cube_count_elemwise(&input.client, len, dim);
    let dtype = input.dtype.into();
    // SAFETY: every thread checks its index against `len`, the input's element count, and
    // the packed buffer holds `offset + len` elements (`pack_offsets`).
    unsafe {
        pack_kernel::launch_unchecked::<CudaRuntime>(
            &input.client,
            count,
            dim,
            input.clone().into_tensor_arg(),
            flat.clone().into_tensor_arg(),
            offset as u32,
            len as u32,
            dtype,
        );
    }
}

/// Why `tensors` cannot be all-reduced over `group` (checked on the caller's thread, before
/// anything reaches the device: an error there would leave the other ranks waiting).
pub(super) fn check_call<F: FloatElement, I: IntElement, BT: BoolElement>(
    tensors: &[FloatTensor<Fused<F, I, BT>>],
    group: &[DeviceId],
) -> Result<Vec<DeviceId>, CollectiveUnavailable> {
    status()?;
    let group = sorted_group(group)?;
    let Some(first) = tensors.first() else {
        return Ok(group);
    };
    let own = first.client.device().id();
    if !group.contains(&own) {
        return Err(CollectiveUnavailable(format!(
            "the tensor's device {own} is not in the group {group:?}"
        )));
    }
    for t in tensors {
        let device = t.client.device().id();
        if device != own {
            return Err(CollectiveUnavailable(format!(
                "one all-reduce call holds tensors of devices {own} and {device}"
            )));
        }
        if !matches!(t.dtype, DType::F32 | DType::BF16 | DType::F16 | DType::F64) {
            return Err(CollectiveUnavailable(format!(
                "NCCL's mean all-reduce takes f32, bf16, f16 or f64 tensors, not {:?}",
                t.dtype
            )));
        }
    }
    Ok(group)
}

/// [`register`] of an operation on `tensors` packed into one f32 buffer (f32 outputs), if the
/// packing kernel's 32-bit addresses reach all their elements.
pub(super) fn register_packed<F: FloatElement, I: IntElement, BT: BoolElement, O>(
    name: &'static str,
    tensors: Vec<FloatTensor<Fused<F, I, BT>>>,
    op: impl FnOnce(CustomOpIr) -> O,
) -> Result<Vec<Gradient<F, I, BT>>, CollectiveUnavailable>
where
    O: Operation<<Cube<F, I, BT> as FusionBackend>::FusionRuntime> + 'static,
{
    let total: usize = tensors.iter().map(|t| t.shape.num_elements()).sum();
    if total >= 1 << 31 {
        return Err(CollectiveUnavailable(format!(
            "{total} elements is more than the packed all-reduce addresses (2^31)"
        )));
    }
    Ok(register::<F, I, BT, O>(name, tensors, Some(DType::F32), op))
}

/// Registers the collective `op` on `tensors` (outputs of their shapes, in `out_dtype` or
/// their own), then runs the queued work and this operation now: burn-fusion may otherwise
/// hold them until a later read, and this rank's NCCL call must reach the GPU even if the
/// caller next waits on another rank. The caller's thread waits for the hand-over only, not
/// for the GPU.
pub(super) fn register<F: FloatElement, I: IntElement, BT: BoolElement, O>(
    name: &'static str,
    tensors: Vec<FloatTensor<Fused<F, I, BT>>>,
    out_dtype: Option<DType>,
    op: impl FnOnce(CustomOpIr) -> O,
) -> Vec<FloatTensor<Fused<F, I, BT>>>
where
    O: Operation<<Cube<F, I, BT> as FusionBackend>::FusionRuntime> + 'static,
{
    let Some(first) = tensors.first() else {
        return Vec::new();
    };
    let client = first.client.clone();
    let streams = OperationStreams::with_inputs(tensors.iter());
    let outputs: Vec<TensorIr> = tensors
        .iter()
        .map(|t| {
            let dtype = out_dtype.unwrap_or(t.dtype);
            TensorIr::uninit(client.create_empty_handle(), t.shape.clone(), dtype)
        })
        .collect();
    let inputs: Vec<TensorIr> = tensors.into_iter().map(|t| t.into_ir()).collect();
    let desc = CustomOpIr::new(name, &inputs, &outputs);
    let out = client.register(streams, OperationIr::Custom(desc.clone()), op(desc));
    client.sync(|| ());
    out
}
