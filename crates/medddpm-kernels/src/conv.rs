//! 3-D convolution as a backend extension: forward, data gradient and weight gradient.
//!
//! [`KernelBackend`]'s provided methods are the plain-burn-op versions (burn's own
//! `conv3d`, `conv3d_x_backward`, `conv3d_weight_backward`): every backend gets them, and they
//! are the reference twins the tests compare the engines against. burn's CUDA backend overrides
//! them with cuDNN (module `cudnn`); the autodiff backend gets a hand-written backward that
//! calls the inner backend's two gradient methods, so training uses the same engine as the
//! forward pass.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::autodiff::NodeId;
use burn::backend::Autodiff;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::ops::{ConvOptions, FloatTensor};
use burn::tensor::{DType, Tensor, TensorPrimitive};

use crate::compute::{Compute, Layout};
use crate::norm::{self, GroupNormGrads, GroupNormOutput, GroupNormSpec};

/// Stride and padding of a 3-D convolution (dilation 1, one group: all the U-Net uses), plus
/// how it should compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Conv3dSpec {
    /// Stride per spatial axis.
    pub stride: [usize; 3],
    /// Zero padding per spatial axis (both sides).
    pub padding: [usize; 3],
    /// Engine, precision and the activations' layout.
    pub compute: Compute,
}

impl Conv3dSpec {
    /// burn's options for the same convolution.
    pub fn options(&self) -> ConvOptions<3> {
        ConvOptions::new(self.stride, self.padding, [1, 1, 1], 1)
    }

    /// Output spatial size for input size `input` and kernel size `kernel`.
    pub fn output_size(&self, input: [usize; 3], kernel: [usize; 3]) -> [usize; 3] {
        std::array::from_fn(|i| (input[i] + 2 * self.padding[i] - kernel[i]) / self.stride[i] + 1)
    }
}

/// The U-Net's heavy operations, per backend.
///
/// Tensors are logically `[batch, channels, d, h, w]` (weights `[c_out, c_in, kd, kh, kw]`)
/// whatever `spec.compute.layout` says: the layout tells an engine which memory order to
/// compute in (channels-last activations arrive as permuted views of `[b, d, h, w, c]`
/// buffers and the results are returned the same way).
pub trait KernelBackend: Backend {
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

    /// GroupNorm forward (SiLU fused in when `spec.silu`): the output and the per-group
    /// statistics the backward pass needs. Provided body: the plain-op reference
    /// ([`crate::norm::forward`]).
    fn group_norm_forward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        spec: GroupNormSpec,
    ) -> GroupNormOutput<Self> {
        norm::forward_primitive::<Self>(x, gamma, beta, &spec)
    }

    /// GroupNorm backward from the input, the parameters and the forward's statistics.
    /// Provided body: the plain-op reference ([`crate::norm::backward`]).
    #[allow(clippy::too_many_arguments)]
    fn group_norm_backward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        rstd: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        spec: GroupNormSpec,
    ) -> GroupNormGrads<Self> {
        norm::backward_primitive::<Self>(x, gamma, beta, mean, rstd, grad, &spec)
    }

    /// GroupNorm as a network layer: the forward's output. The autodiff backend overrides it
    /// with a node whose backward is [`KernelBackend::group_norm_backward`].
    fn group_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        spec: GroupNormSpec,
    ) -> FloatTensor<Self> {
        Self::group_norm_forward(x, gamma, beta, spec).y
    }

    /// What burn's memory pools hold on `device` now, where the backend says (the CubeCL
    /// backends); `None` elsewhere. nvidia-smi sees the pools' reservations and the CUDA
    /// context, not what the live tensors need: this tells the two apart.
    fn memory_usage(_device: &Self::Device) -> Option<MemoryStats> {
        None
    }

    /// Trilinear x2 upsampling (`align_corners = False`) of a `[b, c, d, h, w]` tensor, or of a
    /// contiguous channels-last `[b, d, h, w, c]` one when `layout` is `Ndhwc`. The provided
    /// body is the separable plain-op version (autodiff differentiates it); a fused kernel
    /// overrides it per backend with this as its reference.
    fn upsample_trilinear_x2(x: FloatTensor<Self>, layout: Layout) -> FloatTensor<Self> {
        float(crate::upsample::upsample_trilinear_x2_in::<Self>(
            tensor(x),
            layout,
        ))
    }

    /// The backward pass of [`KernelBackend::upsample_trilinear_x2`]: `dL/dx` from `dL/dy`
    /// (every spatial size halved). Provided body: the separable plain-op adjoint.
    fn upsample_trilinear_x2_backward(
        grad: FloatTensor<Self>,
        layout: Layout,
    ) -> FloatTensor<Self> {
        float(crate::upsample::upsample_trilinear_x2_backward_in::<Self>(
            tensor(grad),
            layout,
        ))
    }

    /// One Adam update of each item's parameter tensor, all with `step`: per item, in order,
    /// `[param, moment_1, moment_2]` after the update, and with `copy` also the updated
    /// parameter in that dtype. Provided body: the plain-op twin
    /// ([`crate::adam::adam_step_reference`] per item); the CubeCL backends update a few dozen
    /// tensors per kernel launch.
    fn adam_steps(
        items: Vec<crate::adam::AdamTensors<Self>>,
        step: crate::AdamStep,
        copy: Option<DType>,
    ) -> Vec<crate::adam::AdamOutput<Self>> {
        crate::adam::adam_steps_primitive::<Self>(items, step, copy)
    }
}

/// [`KernelBackend::upsample_trilinear_x2`] on tensors: `x` in `layout`'s memory order
/// (`[b, c, d, h, w]` or `[b, d, h, w, c]`), every spatial size doubled.
pub fn upsample_x2<B: KernelBackend>(x: Tensor<B, 5>, layout: Layout) -> Tensor<B, 5> {
    tensor(B::upsample_trilinear_x2(float(x), layout))
}

/// An autodiff backend whose inner backend has the kernels too: what training needs.
pub trait KernelAutodiffBackend:
    AutodiffBackend<InnerBackend: KernelBackend> + KernelBackend
{
}

impl<B> KernelAutodiffBackend for B
where
    B: AutodiffBackend + KernelBackend,
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

impl KernelBackend for burn::backend::Flex {
    /// Flex's own data gradient is a transposed convolution on one core without its matrix
    /// kernels (13% of a quickstart training step under perf); for the U-Net's "same"-padded
    /// convolutions the same gradient is a forward convolution, which Flex runs as a
    /// multi-threaded im2col and gemm.
    fn conv3d_data_grad(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        grad_out: FloatTensor<Self>,
        spec: Conv3dSpec,
    ) -> FloatTensor<Self> {
        let weight: Tensor<Self, 5> = tensor(weight);
        let [_, _, kd, kh, kw] = weight.dims();
        if is_same_padded([kd, kh, kw], &spec) {
            let x: Tensor<Self, 5> = tensor(x);
            let [_, _, d, h, w] = x.dims();
            return float(data_grad_via_forward::<Self>(
                [d, h, w],
                weight,
                tensor(grad_out),
                spec,
            ));
        }
        <Self as burn::tensor::ops::ModuleOps<Self>>::conv3d_x_backward(
            x,
            float(weight),
            grad_out,
            spec.options(),
        )
    }
}

/// Padding of half an odd kernel on every axis, at any stride (what [`data_grad_via_forward`]
/// needs).
fn is_same_padded(kernel: [usize; 3], spec: &Conv3dSpec) -> bool {
    (0..3).all(|i| kernel[i] % 2 == 1 && spec.padding[i] == kernel[i] / 2)
}

#[cfg(feature = "wgpu")]
impl KernelBackend for burn::backend::Wgpu {
    fn memory_usage(device: &Self::Device) -> Option<MemoryStats> {
        cube_memory_usage::<burn::backend::wgpu::WgpuRuntime>(device)
    }

    fn upsample_trilinear_x2(x: FloatTensor<Self>, layout: Layout) -> FloatTensor<Self> {
        crate::cube::upsample_trilinear_x2::<burn::backend::wgpu::WgpuRuntime, f32, i32, u32>(
            x, layout,
        )
    }

    fn upsample_trilinear_x2_backward(
        grad: FloatTensor<Self>,
        layout: Layout,
    ) -> FloatTensor<Self> {
        crate::cube::upsample_trilinear_x2_backward::<burn::backend::wgpu::WgpuRuntime, f32, i32, u32>(
            grad, layout,
        )
    }

    fn group_norm_forward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        spec: GroupNormSpec,
    ) -> GroupNormOutput<Self> {
        crate::cube::group_norm_forward(x, gamma, beta, spec)
    }

    fn adam_steps(
        items: Vec<crate::adam::AdamTensors<Self>>,
        step: crate::AdamStep,
        copy: Option<DType>,
    ) -> Vec<crate::adam::AdamOutput<Self>> {
        crate::cube::adam_steps::<burn::backend::wgpu::WgpuRuntime, f32, i32, u32>(
            items, step, copy,
        )
    }

    fn group_norm_backward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        rstd: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        spec: GroupNormSpec,
    ) -> GroupNormGrads<Self> {
        crate::cube::group_norm_backward(x, gamma, beta, mean, rstd, grad, spec)
    }
}

impl<B: KernelBackend, C: CheckpointStrategy> KernelBackend for Autodiff<B, C> {
    fn memory_usage(device: &Self::Device) -> Option<MemoryStats> {
        B::memory_usage(device)
    }

    fn conv3d_forward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        spec: Conv3dSpec,
    ) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct Conv3dBackward;

        impl<B: KernelBackend> Backward<B, 2> for Conv3dBackward {
            type State = (NodeId, NodeId, Conv3dSpec);

            fn backward(
                self,
                ops: Ops<Self::State, 2>,
                grads: &mut Gradients,
                checkpointer: &mut Checkpointer,
            ) {
                let [node_x, node_weight] = ops.parents;
                let grad = grads.consume::<B>(&ops.node);
                let (x_state, weight_state, spec) = ops.state;
                let x = checkpointer.retrieve_node_output::<B::FloatTensorPrimitive>(x_state);
                let weight =
                    checkpointer.retrieve_node_output::<B::FloatTensorPrimitive>(weight_state);
                let timer = backward_profile::Timer::<B>::start(&x);
                if let Some(node) = node_x {
                    let dx = B::conv3d_data_grad(x.clone(), weight.clone(), grad.clone(), spec);
                    let dx = timer.lap(0, dx);
                    grads.register::<B>(node.id, dx);
                }
                if let Some(node) = node_weight {
                    let dw = B::conv3d_weight_grad(x, weight, grad, spec);
                    let dw = timer.lap(1, dw);
                    grads.register::<B>(node.id, dw);
                }
            }
        }

        match Conv3dBackward
            .prepare::<C>([x.node.clone(), weight.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let x_state = prep.checkpoint(&x);
                let weight_state = prep.checkpoint(&weight);
                let out = B::conv3d_forward(x.primitive, weight.primitive, spec);
                prep.finish((x_state, weight_state, spec), out)
            }
            OpsKind::UnTracked(prep) => {
                prep.finish(B::conv3d_forward(x.primitive, weight.primitive, spec))
            }
        }
    }

    fn group_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        spec: GroupNormSpec,
    ) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct GroupNormBackward;

        type GroupNormState<B> = (
            NodeId,
            NodeId,
            NodeId,
            FloatTensor<B>,
            FloatTensor<B>,
            GroupNormSpec,
        );

        impl<B: KernelBackend> Backward<B, 3> for GroupNormBackward {
            type State = GroupNormState<B>;

            fn backward(
                self,
                ops: Ops<Self::State, 3>,
                grads: &mut Gradients,
                checkpointer: &mut Checkpointer,
            ) {
                let [node_x, node_gamma, node_beta] = ops.parents;
                let grad = grads.consume::<B>(&ops.node);
                let (x_state, gamma_state, beta_state, mean, rstd, spec) = ops.state;
                let x = checkpointer.retrieve_node_output::<B::FloatTensorPrimitive>(x_state);
                let gamma =
                    checkpointer.retrieve_node_output::<B::FloatTensorPrimitive>(gamma_state);
                let beta = checkpointer.retrieve_node_output::<B::FloatTensorPrimitive>(beta_state);
                let g = B::group_norm_backward(x, gamma, beta, mean, rstd, grad, spec);
                if let Some(node) = node_x {
                    grads.register::<B>(node.id, g.x);
                }
                if let Some(node) = node_gamma {
                    grads.register::<B>(node.id, g.gamma);
                }
                if let Some(node) = node_beta {
                    grads.register::<B>(node.id, g.beta);
                }
            }
        }

        match GroupNormBackward
            .prepare::<C>([x.node.clone(), gamma.node.clone(), beta.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let x_state = prep.checkpoint(&x);
                let gamma_state = prep.checkpoint(&gamma);
                let beta_state = prep.checkpoint(&beta);
                let out = B::group_norm_forward(x.primitive, gamma.primitive, beta.primitive, spec);
                prep.finish(
                    (x_state, gamma_state, beta_state, out.mean, out.rstd, spec),
                    out.y,
                )
            }
            OpsKind::UnTracked(prep) => prep.finish(B::group_norm(
                x.primitive,
                gamma.primitive,
                beta.primitive,
                spec,
            )),
        }
    }

    fn upsample_trilinear_x2(x: FloatTensor<Self>, layout: Layout) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct UpsampleBackward;

        impl<B: KernelBackend> Backward<B, 1> for UpsampleBackward {
            type State = Layout;

            fn backward(
                self,
                ops: Ops<Self::State, 1>,
                grads: &mut Gradients,
                _checkpointer: &mut Checkpointer,
            ) {
                let [node] = ops.parents;
                let grad = grads.consume::<B>(&ops.node);
                if let Some(node) = node {
                    grads
                        .register::<B>(node.id, B::upsample_trilinear_x2_backward(grad, ops.state));
                }
            }
        }

        match UpsampleBackward
            .prepare::<C>([x.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                prep.finish(layout, B::upsample_trilinear_x2(x.primitive, layout))
            }
            OpsKind::UnTracked(prep) => prep.finish(B::upsample_trilinear_x2(x.primitive, layout)),
        }
    }

    // The other gradient methods keep their provided bodies (burn's own ops, which autodiff
    // differentiates): nothing here needs second-order gradients.
}

pub(crate) fn float<B: Backend, const D: usize>(t: Tensor<B, D>) -> FloatTensor<B> {
    t.into_primitive().tensor()
}

pub(crate) fn tensor<B: Backend, const D: usize>(t: FloatTensor<B>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(t))
}

/// A 3-D convolution with optional bias on `B`'s engine.
///
/// `x` is `[batch, c_in, d, h, w]`; with `spec.compute.layout == Ndhwc` pass the permuted view
/// of a channels-last buffer (`x_cl.permute([0, 4, 1, 2, 3])`) and permute the result back the
/// same way: the engines keep channels-last memory on both sides.
pub fn conv3d<B: KernelBackend>(
    x: Tensor<B, 5>,
    weight: Tensor<B, 5>,
    bias: Option<Tensor<B, 1>>,
    spec: Conv3dSpec,
) -> Tensor<B, 5> {
    let y: Tensor<B, 5> = tensor(B::conv3d_forward(float(x), float(weight), spec));
    match bias {
        Some(bias) => {
            let c_out = bias.dims()[0];
            y + bias.reshape([1, c_out, 1, 1, 1])
        }
        None => y,
    }
}

/// [`KernelBackend::conv3d_data_grad`] on tensors.
pub fn conv3d_data_grad<B: KernelBackend>(
    x: Tensor<B, 5>,
    weight: Tensor<B, 5>,
    grad_out: Tensor<B, 5>,
    spec: Conv3dSpec,
) -> Tensor<B, 5> {
    tensor(B::conv3d_data_grad(
        float(x),
        float(weight),
        float(grad_out),
        spec,
    ))
}

/// [`KernelBackend::conv3d_weight_grad`] on tensors.
pub fn conv3d_weight_grad<B: KernelBackend>(
    x: Tensor<B, 5>,
    weight: Tensor<B, 5>,
    grad_out: Tensor<B, 5>,
    spec: Conv3dSpec,
) -> Tensor<B, 5> {
    tensor(B::conv3d_weight_grad(
        float(x),
        float(weight),
        float(grad_out),
        spec,
    ))
}

/// The weight gradient with `dL/dy` padded by zero channels up to `padded` output channels
/// (the extra rows of the result are zero and dropped). The padding is written in `dL/dy`'s
/// memory order, so channels-last stays channels-last.
pub fn weight_grad_padded<B: KernelBackend>(
    x: Tensor<B, 5>,
    weight: Tensor<B, 5>,
    grad_out: Tensor<B, 5>,
    spec: Conv3dSpec,
    padded: usize,
) -> Tensor<B, 5> {
    let [c_out, c_in, kd, kh, kw] = weight.dims();
    let [b, _, d, h, w] = grad_out.dims();
    let device = grad_out.device();
    let dtype = grad_out.dtype();
    let extra = padded - c_out;
    let grad_out = match spec.compute.layout {
        Layout::Ncdhw => {
            let zeros = Tensor::<B, 5>::zeros([b, extra, d, h, w], (&device, dtype));
            Tensor::cat(vec![grad_out, zeros], 1)
        }
        Layout::Ndhwc => {
            let zeros = Tensor::<B, 5>::zeros([b, d, h, w, extra], (&device, dtype));
            Tensor::cat(vec![grad_out.permute([0, 2, 3, 4, 1]), zeros], 4).permute([0, 4, 1, 2, 3])
        }
    };
    let weight = Tensor::<B, 5>::zeros([padded, c_in, kd, kh, kw], (&device, weight.dtype()));
    conv3d_weight_grad(x, weight, grad_out, spec).narrow(0, 0, c_out)
}

/// Whether [`data_grad_via_forward`] applies: a strided convolution whose padding is half its
/// odd kernel on every axis (the U-Net's stride-2 downsampling).
pub fn is_strided_same(kernel: [usize; 3], spec: &Conv3dSpec) -> bool {
    spec.stride.iter().any(|&s| s > 1) && is_same_padded(kernel, spec)
}

/// The data gradient of a "same"-padded convolution (any stride; [`is_strided_same`] is where
/// the GPU engines use it) as a stride-1 forward convolution on `B`'s engine: the incoming gradient with `stride - 1` zeros
/// after each voxel (per axis, cut to the input's size), correlated with the kernel flipped in
/// space and with its two channel axes swapped, at the same padding. The arithmetic is the
/// strided data gradient's plus products with zeros.
///
/// Why: on the H100 cuDNN's strided data gradient in channels-last took 195 ms in FP32 for the
/// 64-channel 128^3 downsampling, where the stride-1 forward convolution of the same size took
/// 12 ms (`docs/benchmarks/README.md`, 2026-11-23); burn's own strided data gradient falls back
/// to a direct kernel without tensor cores.
///
/// `x_spatial` is the input's `[d, h, w]`; `weight` and `grad_out` are as for
/// [`KernelBackend::conv3d_data_grad`] (activations in `spec.compute.layout`'s memory order).
pub fn data_grad_via_forward<B: KernelBackend>(
    x_spatial: [usize; 3],
    weight: Tensor<B, 5>,
    grad_out: Tensor<B, 5>,
    spec: Conv3dSpec,
) -> Tensor<B, 5> {
    let [n, c, od, oh, ow] = grad_out.dims();
    let [sd, sh, sw] = spec.stride;
    let [d, h, w] = x_spatial;
    let options = (&grad_out.device(), grad_out.dtype());
    let spread = match spec.compute.layout {
        Layout::Ndhwc => {
            let g = grad_out
                .permute([0, 2, 3, 4, 1])
                .reshape([n, od, 1, oh, 1, ow, 1, c]);
            Tensor::<B, 8>::zeros([n, od, sd, oh, sh, ow, sw, c], options)
                .slice_assign([0..n, 0..od, 0..1, 0..oh, 0..1, 0..ow, 0..1, 0..c], g)
                .reshape([n, od * sd, oh * sh, ow * sw, c])
                .slice([0..n, 0..d, 0..h, 0..w, 0..c])
                .permute([0, 4, 1, 2, 3])
        }
        Layout::Ncdhw => {
            let g = grad_out.reshape([n, c, od, 1, oh, 1, ow, 1]);
            Tensor::<B, 8>::zeros([n, c, od, sd, oh, sh, ow, sw], options)
                .slice_assign([0..n, 0..c, 0..od, 0..1, 0..oh, 0..1, 0..ow, 0..1], g)
                .reshape([n, c, od * sd, oh * sh, ow * sw])
                .slice([0..n, 0..c, 0..d, 0..h, 0..w])
        }
    };
    let kernel = weight.flip([2, 3, 4]).swap_dims(0, 1);
    let spec = Conv3dSpec {
        stride: [1, 1, 1],
        ..spec
    };
    tensor(B::conv3d_forward(float(spread), float(kernel), spec))
}

/// The plain-op reference twins (burn's own convolution ops), for tests on any backend.
pub mod reference {
    use super::*;

    /// Forward.
    pub fn forward<B: Backend>(
        x: Tensor<B, 5>,
        weight: Tensor<B, 5>,
        spec: Conv3dSpec,
    ) -> Tensor<B, 5> {
        tensor(B::conv3d(float(x), float(weight), None, spec.options()))
    }

    /// Data gradient.
    pub fn data_grad<B: Backend>(
        x: Tensor<B, 5>,
        weight: Tensor<B, 5>,
        grad_out: Tensor<B, 5>,
        spec: Conv3dSpec,
    ) -> Tensor<B, 5> {
        tensor(B::conv3d_x_backward(
            float(x),
            float(weight),
            float(grad_out),
            spec.options(),
        ))
    }

    /// Weight gradient.
    pub fn weight_grad<B: Backend>(
        x: Tensor<B, 5>,
        weight: Tensor<B, 5>,
        grad_out: Tensor<B, 5>,
        spec: Conv3dSpec,
    ) -> Tensor<B, 5> {
        tensor(B::conv3d_weight_backward(
            float(x),
            float(weight),
            float(grad_out),
            spec.options(),
        ))
    }
}

/// `[b, c, d, h, w]` -> a contiguous `[b, d, h, w, c]` tensor. A permuted view is not enough
/// where the next operation should read channels-last memory: reshaping the non-contiguous
/// view copies it into the new order.
pub fn channels_last<B: Backend>(x: Tensor<B, 5>) -> Tensor<B, 5> {
    let [b, c, d, h, w] = x.dims();
    x.permute([0, 2, 3, 4, 1])
        .reshape([b, d * h * w, c])
        .reshape([b, d, h, w, c])
}

/// Channels-last helper for callers and tests: `[b, c, d, h, w]` as the permuted view of a
/// contiguous `[b, d, h, w, c]` buffer when `layout` is channels-last.
pub fn in_layout<B: Backend>(x: Tensor<B, 5>, layout: Layout) -> Tensor<B, 5> {
    match layout {
        Layout::Ncdhw => x,
        Layout::Ndhwc => channels_last(x).permute([0, 4, 1, 2, 3]),
    }
}

/// One convolution geometry for agreement checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ConvCase {
    /// Batch size.
    pub batch: usize,
    /// Input channels.
    pub c_in: usize,
    /// Output channels.
    pub c_out: usize,
    /// Input spatial size (d, h, w).
    pub size: [usize; 3],
    /// Cubic kernel size (1 or 3).
    pub kernel: usize,
    /// Stride on every axis.
    pub stride: usize,
}

impl ConvCase {
    /// The U-Net's geometries (3x3x3 stride 1 and 2, 1x1x1) at small sizes, and odd ones: 1 to
    /// 512 channels, odd and non-cubic volumes. `scale` multiplies the spatial sizes.
    pub fn standard(scale: usize) -> Vec<ConvCase> {
        let c = |batch, c_in, c_out, size: [usize; 3], kernel, stride| ConvCase {
            batch,
            c_in,
            c_out,
            size: size.map(|s| s * scale),
            kernel,
            stride,
        };
        vec![
            c(1, 5, 16, [8, 8, 8], 3, 1), // the input convolution (image + mask channels)
            c(1, 16, 16, [8, 8, 8], 3, 2), // downsampling
            c(2, 24, 8, [5, 6, 7], 3, 1), // odd, non-cubic, batch 2
            c(1, 7, 3, [7, 5, 3], 3, 2),  // odd sizes with stride 2
            c(1, 32, 16, [4, 4, 4], 1, 1), // 1x1x1 skip projection
            c(1, 1, 1, [6, 6, 6], 3, 1),  // one channel
            c(1, 512, 8, [2, 2, 2], 3, 1), // 512 input channels
            c(1, 8, 512, [2, 2, 2], 1, 1), // 512 output channels
        ]
    }

    /// The spec of this case.
    pub fn spec(&self, compute: Compute) -> Conv3dSpec {
        Conv3dSpec {
            stride: [self.stride; 3],
            padding: [self.kernel / 2; 3],
            compute,
        }
    }
}

/// Relative L2 differences of backend `B`'s engine against the plain-op twin computed in f32 on
/// the CPU (burn's Flex convolution) for one case: `[forward, data gradient, weight gradient]`,
/// each the worse of two calls.
///
/// The inputs are drawn on the CPU and rounded to the compute dtype first, so the reference
/// sees exactly the operands the engine sees: what remains is the engine's own arithmetic
/// (f32 summation order; TF32 operand rounding; bf16 output rounding).
pub fn engine_vs_reference<B: KernelBackend>(
    device: &B::Device,
    case: ConvCase,
    compute: Compute,
    seed: u64,
) -> [f64; 3] {
    use burn::backend::Flex;
    use burn::tensor::Distribution;
    let cpu = Default::default();
    Flex::seed(&cpu, seed);
    let dtype = compute.precision.compute_dtype();
    let round = |t: Tensor<Flex, 5>| t.cast(dtype).cast(burn::tensor::DType::F32);
    let [d, h, w] = case.size;
    let k = case.kernel;
    let x = round(Tensor::<Flex, 5>::random(
        [case.batch, case.c_in, d, h, w],
        Distribution::Normal(0.0, 1.0),
        &cpu,
    ));
    let fan_in = (case.c_in * k * k * k) as f64;
    let weight = round(Tensor::<Flex, 5>::random(
        [case.c_out, case.c_in, k, k, k],
        Distribution::Normal(0.0, 1.0 / fan_in.sqrt()),
        &cpu,
    ));
    let spec = case.spec(compute);
    let out = spec.output_size(case.size, [k; 3]);
    let grad = round(Tensor::<Flex, 5>::random(
        [case.batch, case.c_out, out[0], out[1], out[2]],
        Distribution::Normal(0.0, 1.0),
        &cpu,
    ));
    let reference_spec = Conv3dSpec {
        compute: Compute {
            layout: Layout::Ncdhw,
            ..compute
        },
        ..spec
    };
    let want = [
        reference::forward(x.clone(), weight.clone(), reference_spec),
        reference::data_grad(x.clone(), weight.clone(), grad.clone(), reference_spec),
        reference::weight_grad(x.clone(), weight.clone(), grad.clone(), reference_spec),
    ];
    let on_b = |t: &Tensor<Flex, 5>| Tensor::<B, 5>::from_data(t.to_data(), device).cast(dtype);
    let layout = compute.layout;
    let (xb, wb, gb) = (
        in_layout(on_b(&x), layout),
        on_b(&weight),
        in_layout(on_b(&grad), layout),
    );
    // Twice: an engine may compute a shape's first call differently from later ones (cuDNN
    // searches its algorithm in the first, then hands the call to the device thread).
    let mut errs = [0.0f64; 3];
    for _ in 0..2 {
        let got = [
            conv3d(xb.clone(), wb.clone(), None, spec),
            conv3d_data_grad(xb.clone(), wb.clone(), gb.clone(), spec),
            conv3d_weight_grad(xb.clone(), wb.clone(), gb.clone(), spec),
        ];
        for (i, (g, w)) in got.into_iter().zip(want.iter()).enumerate() {
            let g = Tensor::<Flex, 5>::from_data(g.cast(burn::tensor::DType::F32).to_data(), &cpu);
            errs[i] = worse(errs[i], rel_l2(g, w.clone()));
        }
    }
    errs
}

/// The larger of two errors, NaN counting as infinite (`f64::max` would drop it).
pub(crate) fn worse(a: f64, b: f64) -> f64 {
    let b = if b.is_nan() { f64::INFINITY } else { b };
    a.max(b)
}

/// `||a - b|| / ||b||`, in f64 on the host.
pub fn rel_l2<B: Backend, const D: usize>(a: Tensor<B, D>, b: Tensor<B, D>) -> f64 {
    assert_eq!(a.dims(), b.dims(), "shapes differ");
    let f = |t: Tensor<B, D>| -> Vec<f32> {
        t.cast(burn::tensor::DType::F32)
            .into_data()
            .convert::<f32>()
            .to_vec::<f32>()
            .expect("f32 data")
    };
    let (a, b) = (f(a), f(b));
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(&b) {
        num += ((x - y) as f64).powi(2);
        den += (*y as f64).powi(2);
    }
    if den == 0.0 {
        num.sqrt()
    } else {
        (num / den).sqrt()
    }
}

/// Time spent in the convolution gradients of autodiff backward passes, for the bench's
/// breakdown. Off by default; when on, every gradient is synchronised before and after, so
/// the backward pass runs slower than unprofiled.
pub mod backward_profile {
    use std::cell::Cell;
    use std::marker::PhantomData;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;
    use std::time::Instant;

    use burn::tensor::backend::Backend;
    use burn::tensor::ops::FloatTensor;

    static ON: AtomicBool = AtomicBool::new(false);
    static MS: Mutex<[f64; 2]> = Mutex::new([0.0; 2]);

    /// Starts accumulating (and clears what was accumulated).
    pub fn start() {
        *MS.lock().unwrap_or_else(|e| e.into_inner()) = [0.0; 2];
        ON.store(true, Ordering::SeqCst);
    }

    /// Stops and returns the milliseconds in `[data gradients, weight gradients]`.
    pub fn stop() -> [f64; 2] {
        ON.store(false, Ordering::SeqCst);
        *MS.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) struct Timer<B: Backend> {
        device: Option<B::Device>,
        last: Cell<Instant>,
        _b: PhantomData<B>,
    }

    impl<B: Backend> Timer<B> {
        pub(crate) fn start(x: &FloatTensor<B>) -> Self {
            let device = ON.load(Ordering::Relaxed).then(|| B::float_device(x));
            if let Some(d) = &device {
                let _ = B::sync(d);
            }
            Timer {
                device,
                last: Cell::new(Instant::now()),
                _b: PhantomData,
            }
        }

        /// Charges the time since the previous lap to slot `i`, once `out` is computed.
        pub(crate) fn lap(&self, i: usize, out: FloatTensor<B>) -> FloatTensor<B> {
            if let Some(d) = &self.device {
                let _ = B::sync(d);
                let now = Instant::now();
                let ms = (now - self.last.replace(now)).as_secs_f64() * 1e3;
                MS.lock().unwrap_or_else(|e| e.into_inner())[i] += ms;
            }
            out
        }
    }
}
