//! Which engine computes each operation on burn's Flex (CPU) and wgpu backends; burn's CUDA
//! backend is in `crate::cudnn`.

/// The [`KernelBackend`] methods both fused CubeCL backends (wgpu here, CUDA in `fused`) hand
/// to our CubeCL kernels alike, on `$runtime` with element types `$f`, `$i`, `$bt` (the impl's
/// module imports the types their signatures name).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
macro_rules! cube_kernels {
    ($runtime:ty, $f:ty, $i:ty, $bt:ty) => {
        fn memory_usage(device: &Self::Device) -> Option<$crate::extension::MemoryStats> {
            $crate::extension::cube_memory_usage::<$runtime>(device)
        }

        fn cat_last(a: FloatTensor<Self>, b: FloatTensor<Self>) -> FloatTensor<Self> {
            $crate::cube::channels::cat_last::<$runtime, $f, $i, $bt>(a, b)
        }

        fn split_last(x: FloatTensor<Self>, first: usize) -> [FloatTensor<Self>; 2] {
            $crate::cube::channels::split_last::<$runtime, $f, $i, $bt>(x, first)
        }

        fn pad_last(x: FloatTensor<Self>, channels: usize) -> FloatTensor<Self> {
            $crate::cube::channels::pad_last::<$runtime, $f, $i, $bt>(x, channels)
        }

        fn upsample_trilinear_x2(x: FloatTensor<Self>, layout: Layout) -> FloatTensor<Self> {
            $crate::cube::upsample_trilinear_x2::<$runtime, $f, $i, $bt>(x, layout)
        }

        fn upsample_trilinear_x2_backward(
            grad: FloatTensor<Self>,
            layout: Layout,
        ) -> FloatTensor<Self> {
            $crate::cube::upsample_trilinear_x2_backward::<$runtime, $f, $i, $bt>(grad, layout)
        }

        fn group_norm_forward(
            input: NormInput<FloatTensor<Self>>,
            gamma: FloatTensor<Self>,
            beta: FloatTensor<Self>,
            spec: GroupNormSpec,
        ) -> GroupNormOutput<Self> {
            $crate::cube::group_norm_forward::<$runtime, $f, $i, $bt>(input, gamma, beta, spec)
        }

        fn group_norm_backward(
            input: NormInput<FloatTensor<Self>>,
            gamma: FloatTensor<Self>,
            beta: FloatTensor<Self>,
            mean: FloatTensor<Self>,
            rstd: FloatTensor<Self>,
            grad: FloatTensor<Self>,
            spec: GroupNormSpec,
        ) -> GroupNormGrads<Self> {
            $crate::cube::group_norm_backward::<$runtime, $f, $i, $bt>(
                input, gamma, beta, mean, rstd, grad, spec,
            )
        }

        fn adam_steps(
            items: Vec<AdamTensors<Self>>,
            step: AdamStep,
            copy: Option<DType>,
        ) -> Vec<AdamOutput<Self>> {
            $crate::cube::adam_steps::<$runtime, $f, $i, $bt>(items, step, copy)
        }

        fn sum_f32(pairs: Vec<[FloatTensor<Self>; 2]>) -> Vec<FloatTensor<Self>> {
            $crate::cube::sum::sum_f32::<$runtime, $f, $i, $bt>(pairs)
        }

        fn squared_norm_f32(tensors: Vec<FloatTensor<Self>>) -> FloatTensor<Self> {
            $crate::cube::sum::squared_norm_f32::<$runtime, $f, $i, $bt>(tensors)
        }
    };
}

/// Overrides of the two convolution gradients, which share one signature: each `$method`
/// hands `(x, weight, grad_out, spec)` to `$body`.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
macro_rules! conv_grads {
    ($($method:ident: $body:expr),+ $(,)?) => {$(
        fn $method(
            x: FloatTensor<Self>,
            weight: FloatTensor<Self>,
            grad_out: FloatTensor<Self>,
            spec: Conv3dSpec,
        ) -> FloatTensor<Self> {
            $body(x, weight, grad_out, spec)
        }
    )+};
}

#[cfg(feature = "cuda")]
mod fused;

use burn::tensor::ops::FloatTensor;
#[cfg(feature = "wgpu")]
use burn::tensor::DType;
use burn::tensor::Tensor;

#[cfg(feature = "wgpu")]
use crate::compute::Layout;
use crate::conv::{data_grad_via_forward, is_same_padded};
use crate::extension::KernelBackend;
use crate::primitive::{float, tensor};
#[cfg(feature = "wgpu")]
use crate::reference::adam::{AdamOutput, AdamStep, AdamTensors};
use crate::reference::conv_spec::Conv3dSpec;
#[cfg(feature = "wgpu")]
use crate::reference::norm::{GroupNormGrads, GroupNormOutput, GroupNormSpec, NormInput};
#[cfg(feature = "wgpu")]
use burn::backend::wgpu::WgpuRuntime;

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

#[cfg(feature = "wgpu")]
impl KernelBackend for burn::backend::Wgpu {
    fn conv3d_forward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        spec: Conv3dSpec,
    ) -> FloatTensor<Self> {
        crate::cube::conv::engine::forward::<WgpuRuntime, f32, i32, u32>(x, weight, spec)
    }

    conv_grads!(
        conv3d_data_grad: crate::cube::conv::engine::data_grad::<WgpuRuntime, f32, i32, u32>,
        conv3d_weight_grad: crate::cube::conv::engine::weight_grad::<WgpuRuntime, f32, i32, u32>,
    );

    cube_kernels!(WgpuRuntime, f32, i32, u32);
}
