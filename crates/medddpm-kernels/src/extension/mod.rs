//! The backend extension itself: [`KernelBackend`] with the plain-op bodies every backend
//! gets, and what the bench reads of burn's memory pools.

/// `Backward` for a node kind with `N` parents for each listed `N` whose state `$state` (which
/// may name the backend `B`) is its parents' checkpoints and more: `$grads` is handed the
/// parents ([`node::Parents`], in scope where the macro is used), the node's gradient and the
/// rest of the state.
macro_rules! node_backward_impl {
    ($node:ty, $state:ty, $grads:ident, $($n:literal),*) => {$(
        impl<B: KernelBackend> Backward<B, $n> for $node {
            type State = $state;

            fn backward(
                self,
                ops: Ops<Self::State, $n>,
                grads: &mut Gradients,
                checkpointer: &mut Checkpointer,
            ) {
                let grad = grads.consume::<B>(&ops.node);
                let ids = ops.parents.map(|p| p.map(|node| node.id));
                let (states, state) = ops.state;
                let parents = Parents::new(states, &ids, grads, checkpointer);
                $grads::<B>(parents, grad, state);
            }
        }
    )*};
}

mod autodiff;
pub mod backward_profile;
mod node;
mod norm_conv;

pub use crate::reference::norm::NormInput;
pub use norm_conv::conv_in_layout;

use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Bytes, DType, TensorData};

use crate::capture::{Captured, GraphError, StepFn};
use crate::collective::CollectiveBackend;
use crate::compute::Layout;
use crate::primitive::{float, tensor};
use crate::reference::adam::{adam_steps_primitive, AdamOutput, AdamStep, AdamTensors};
use crate::reference::channels::{cat_last_primitive, pad_last_primitive, split_last_primitive};
use crate::reference::conv_spec::Conv3dSpec;
use crate::reference::norm::{
    backward_primitive, forward_primitive, GroupNormGrads, GroupNormOutput, GroupNormSpec,
};
use crate::reference::product::product_primitive;
use crate::reference::product::spec::ProductSpec;
use crate::reference::upsample::{upsample_trilinear_x2_backward_in, upsample_trilinear_x2_in};
use crate::seeded::SeededBackward;

/// The U-Net's heavy operations, per backend.
///
/// Tensors are logically `[batch, channels, d, h, w]` (weights `[c_out, c_in, kd, kh, kw]`)
/// whatever `spec.compute.layout` says: the layout tells an engine which memory order to
/// compute in (channels-last activations arrive as permuted views of `[b, d, h, w, c]`
/// buffers and the results are returned the same way).
pub trait KernelBackend: CollectiveBackend {
    /// `y = conv(x, weight)`, without bias.
    fn conv3d_forward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        spec: Conv3dSpec,
    ) -> FloatTensor<Self> {
        Self::conv3d(x, weight, None, spec.options())
    }

    /// `dL/dx` given `dL/dy`.
    fn conv3d_data_grad(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        grad_out: FloatTensor<Self>,
        spec: Conv3dSpec,
    ) -> FloatTensor<Self> {
        Self::conv3d_x_backward(x, weight, grad_out, spec.options())
    }

    /// `dL/dweight` given `dL/dy`.
    fn conv3d_weight_grad(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        grad_out: FloatTensor<Self>,
        spec: Conv3dSpec,
    ) -> FloatTensor<Self> {
        Self::conv3d_weight_backward(x, weight, grad_out, spec.options())
    }

    /// GroupNorm forward (SiLU fused in when `spec.silu`) of `input`: `x` plus an optional
    /// per-(batch, channel) shift `[b, c]` (a ResBlock's convolution bias and time embedding,
    /// added here instead of in a pass of their own), or two parts joined along channels (the
    /// decoder's [current, skip], in `spec.layout`'s logical shape: what the join gives, the
    /// output joined, where the CubeCL kernels read each part where it lies, channels-last, so
    /// that the join of the inputs is never made). The output and the per-group statistics the
    /// backward pass needs. Provided body: the plain-op reference ([`crate::norm::forward`]),
    /// which joins two parts.
    fn group_norm_forward(
        input: NormInput<FloatTensor<Self>>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        spec: GroupNormSpec,
    ) -> GroupNormOutput<Self> {
        forward_primitive::<Self>(input, gamma, beta, &spec)
    }

    /// GroupNorm backward from the input, the parameters and the forward's statistics: the
    /// input's gradients shaped as the input (of two parts, each part's, written where it lies
    /// by the CubeCL kernels). Provided body: the plain-op reference ([`crate::norm::backward`]).
    #[allow(clippy::too_many_arguments)]
    fn group_norm_backward(
        input: NormInput<FloatTensor<Self>>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        rstd: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        spec: GroupNormSpec,
    ) -> GroupNormGrads<Self> {
        backward_primitive::<Self>(input, gamma, beta, mean, rstd, grad, &spec)
    }

    /// GroupNorm as a network layer: the forward's output. The autodiff backend overrides it
    /// with a node that keeps the input (both parts of two) and whose backward is
    /// [`KernelBackend::group_norm_backward`].
    fn group_norm(
        input: NormInput<FloatTensor<Self>>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        spec: GroupNormSpec,
    ) -> FloatTensor<Self> {
        Self::group_norm_forward(input, gamma, beta, spec).y
    }

    /// SiLU(GroupNorm) of `input` (per `norm`, in `norm.layout`'s logical shape) then the
    /// convolution with `weight` without bias (per `conv`), as one operation: on the autodiff
    /// backend it keeps the normalisation's input and statistics and recomputes its output in
    /// the backward pass, where two operations would keep that output for the convolution
    /// (activation checkpointing `norms`); of [`NormInput::Parts`] it keeps the two parts,
    /// where their join would be a third tensor of their size. Provided body: the operations.
    fn norm_conv3d(
        input: NormInput<FloatTensor<Self>>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        norm: GroupNormSpec,
        weight: FloatTensor<Self>,
        conv: Conv3dSpec,
    ) -> FloatTensor<Self> {
        let y = Self::group_norm(input, gamma, beta, norm);
        conv_in_layout::<Self>(y, weight, conv)
    }

    /// What burn's memory pools hold on `device` now, where the backend says (the CubeCL
    /// backends); `None` elsewhere. nvidia-smi sees the pools' reservations and the CUDA
    /// context, not what the live tensors need: this tells the two apart.
    fn memory_usage(_device: &Self::Device) -> Option<MemoryStats> {
        None
    }

    /// `parts`, one after another, in host memory that `device` copies from without waiting
    /// for its stream (page-locked, on CUDA), for data the host writes once and uploads: a
    /// training batch, stacked by the loader's threads. `None` (the provided body) where
    /// ordinary memory does as well.
    fn host_bytes(_device: &Self::Device, _parts: &[&[u8]]) -> Option<Bytes> {
        None
    }

    /// `data` on `device`, as `float_from_data`, for data that may lie in [`Self::host_bytes`]
    /// (copied from there asynchronously). Provided body: `float_from_data`.
    fn float_from_host(data: TensorData, device: &Self::Device) -> FloatTensor<Self> {
        Self::float_from_data(data, device)
    }

    /// Trilinear x2 upsampling (`align_corners = False`) of a `[b, c, d, h, w]` tensor, or of a
    /// contiguous channels-last `[b, d, h, w, c]` one when `layout` is `Ndhwc`. The provided
    /// body is the separable plain-op version (autodiff differentiates it); a fused kernel
    /// overrides it per backend with this as its reference.
    fn upsample_trilinear_x2(x: FloatTensor<Self>, layout: Layout) -> FloatTensor<Self> {
        float(upsample_trilinear_x2_in::<Self>(tensor(x), layout))
    }

    /// The backward pass of [`KernelBackend::upsample_trilinear_x2`]: `dL/dx` from `dL/dy`
    /// (every spatial size halved). Provided body: the separable plain-op adjoint.
    fn upsample_trilinear_x2_backward(
        grad: FloatTensor<Self>,
        layout: Layout,
    ) -> FloatTensor<Self> {
        float(upsample_trilinear_x2_backward_in::<Self>(
            tensor(grad),
            layout,
        ))
    }

    /// `[.., ca]` and `[.., cb]` joined into `[.., ca + cb]` (the decoder's skip
    /// concatenation, channels-last). Provided body: burn's `cat`, the reference twin
    /// ([`crate::reference::channels`]); the CubeCL backends copy vectors of channels in one
    /// launch.
    fn cat_last(a: FloatTensor<Self>, b: FloatTensor<Self>) -> FloatTensor<Self> {
        cat_last_primitive::<Self>(a, b)
    }

    /// The backward of [`KernelBackend::cat_last`]: `x` `[.., c]` split into its first `first`
    /// channels and the rest, both contiguous. Provided body: burn's slices.
    fn split_last(x: FloatTensor<Self>, first: usize) -> [FloatTensor<Self>; 2] {
        split_last_primitive::<Self>(x, first)
    }

    /// `x` `[.., c]` with zero channels added up to `channels`, contiguous (not differentiated:
    /// the engines widen small convolutions with it). Provided body: burn's `cat` with zeros.
    fn pad_last(x: FloatTensor<Self>, channels: usize) -> FloatTensor<Self> {
        pad_last_primitive::<Self>(x, channels)
    }

    /// `op(a) · op(b)` of `[batch, rows, cols]` operands, `op` transposing where `spec` says
    /// (the U-Net's 1x1x1 convolutions and attention). Provided body: burn's `matmul`, the
    /// reference twin ([`crate::reference::product::product`]); burn's CUDA backend calls
    /// cuBLAS when the convolutions go to cuDNN.
    fn product(a: FloatTensor<Self>, b: FloatTensor<Self>, spec: ProductSpec) -> FloatTensor<Self> {
        product_primitive::<Self>(a, b, spec)
    }

    /// One Adam update of each item's parameter tensor, all with `step`: per item, in order,
    /// `[param, moment_1, moment_2]` after the update, and with `copy` also the updated
    /// parameter in that dtype. Provided body: the plain-op twin
    /// ([`crate::adam::adam_step_reference`] per item); the CubeCL backends update a few dozen
    /// tensors per kernel launch.
    fn adam_steps(
        items: Vec<AdamTensors<Self>>,
        step: AdamStep,
        copy: Option<DType>,
    ) -> Vec<AdamOutput<Self>> {
        adam_steps_primitive::<Self>(items, step, copy)
    }

    /// Per pair `[a, b]` (one shape, any float dtypes), `a + b` computed and returned in f32:
    /// the gradients of an optimizer step's micro-batches summed. Provided body: the plain-op
    /// twin (a cast and an addition per tensor); the CubeCL backends sum a few dozen pairs per
    /// kernel launch, one operation for the whole list.
    fn sum_f32(pairs: Vec<[FloatTensor<Self>; 2]>) -> Vec<FloatTensor<Self>> {
        crate::reference::sum::sum_f32_primitive::<Self>(pairs)
    }

    /// The sum of `f32(x)^2` over every value of `tensors` (at least one, any float dtypes),
    /// a one-value f32 tensor: the gradients' squared global norm for the log. Provided body:
    /// the plain-op twin (a cast, a product and a sum per tensor: about 500 operations for
    /// the U-Net's gradients, each costing the host what a launch does); the CubeCL backends
    /// read a few dozen tensors per launch, one operation for the whole list.
    fn squared_norm_f32(tensors: Vec<FloatTensor<Self>>) -> FloatTensor<Self> {
        crate::reference::sum::squared_norm_f32_primitive::<Self>(tensors)
    }

    /// `step` on `inputs`, run where this backend captures graphs ([`crate::graph`]), as it
    /// comes. Provided body: `step` itself.
    fn graph_warm_up(
        _device: &Self::Device,
        inputs: Vec<FloatTensor<Self>>,
        step: &mut StepFn<'_, Self>,
    ) -> Vec<FloatTensor<Self>> {
        step(inputs)
    }

    /// `step` recorded as a graph, with copies of `inputs` as its input buffers; nothing runs.
    /// Provided body: unsupported (CUDA captures, see `cuda_graph`).
    fn graph_capture(
        _device: &Self::Device,
        _inputs: Vec<FloatTensor<Self>>,
        _step: &mut StepFn<'_, Self>,
    ) -> Result<Captured<Self>, GraphError> {
        Err(GraphError::Unsupported(
            "this backend captures no graphs".into(),
        ))
    }

    /// The graph replayed on `inputs` (checked against the captured ones by the caller): copies
    /// of its outputs. Only the backend that made `captured` is asked.
    fn graph_replay(
        _captured: &Captured<Self>,
        _inputs: Vec<FloatTensor<Self>>,
    ) -> Vec<FloatTensor<Self>> {
        unreachable!("a graph replayed by a backend that captures none")
    }
}

/// An autodiff backend whose inner backend has the kernels too, and that can backpropagate
/// from a given output gradient (activation checkpointing): what training needs.
pub trait KernelAutodiffBackend:
    AutodiffBackend<InnerBackend: KernelBackend> + KernelBackend + SeededBackward
{
}

impl<B> KernelAutodiffBackend for B
where
    B: AutodiffBackend + KernelBackend + SeededBackward,
    B::InnerBackend: KernelBackend,
{
}

/// Device memory held by burn's pools, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct MemoryStats {
    /// Bytes of the live tensors (allocations in use, without padding).
    pub in_use: u64,
    /// Bytes the pools have reserved from the device.
    pub reserved: u64,
}

/// [`KernelBackend::memory_usage`] of a CubeCL runtime's client.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) fn cube_memory_usage<R: burn_cubecl::cubecl::Runtime>(
    device: &R::Device,
) -> Option<MemoryStats> {
    let usage = R::client(device).memory_usage().ok()?;
    Some(MemoryStats {
        in_use: usage.bytes_in_use,
        reserved: usage.bytes_reserved,
    })
}
