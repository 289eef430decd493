//! The same convolutions and gradients computed another way where that is much faster: the
//! data gradient of a "same"-padded convolution as a forward convolution, the weight gradient
//! with zero output channels added, and a forward convolution of few input channels with zero
//! input channels added.

use burn::tensor::Tensor;

use super::ops::{conv3d, conv3d_weight_grad};
use crate::compute::Layout;
use crate::extension::KernelBackend;
use crate::primitive::{float, tensor};
use crate::reference::conv_spec::Conv3dSpec;

/// Padding of half an odd kernel on every axis, at any stride (what [`data_grad_via_forward`]
/// needs).
pub(crate) fn is_same_padded(kernel: [usize; 3], spec: &Conv3dSpec) -> bool {
    (0..3).all(|i| kernel[i] % 2 == 1 && spec.padding[i] == kernel[i] / 2)
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
    let device = grad_out.device();
    let grad_out = pad_channels(grad_out, padded, spec.compute.layout);
    let weight = Tensor::<B, 5>::zeros([padded, c_in, kd, kh, kw], (&device, weight.dtype()));
    conv3d_weight_grad(x, weight, grad_out, spec).narrow(0, 0, c_out)
}

/// `x` `[b, c, d, h, w]` with zero channels added up to `padded`, written in `layout`'s memory
/// order (channels-last stays channels-last).
fn pad_channels<B: KernelBackend>(x: Tensor<B, 5>, padded: usize, layout: Layout) -> Tensor<B, 5> {
    let [b, c, d, h, w] = x.dims();
    let options = (&x.device(), x.dtype());
    match layout {
        Layout::Ncdhw => {
            let zeros = Tensor::<B, 5>::zeros([b, padded - c, d, h, w], options);
            Tensor::cat(vec![x, zeros], 1)
        }
        Layout::Ndhwc => {
            crate::channels::pad_last(x.permute([0, 2, 3, 4, 1]), padded).permute([0, 4, 1, 2, 3])
        }
    }
}

/// The convolution with `x` and the kernel padded by zero input channels up to `padded` (the
/// products with the zeros add nothing).
pub fn forward_in_padded<B: KernelBackend>(
    x: Tensor<B, 5>,
    weight: Tensor<B, 5>,
    spec: Conv3dSpec,
    padded: usize,
) -> Tensor<B, 5> {
    let x = pad_channels(x, padded, spec.compute.layout);
    let weight = pad_channels(weight, padded, Layout::Ncdhw);
    conv3d(x, weight, None, spec)
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
/// 12 ms (`docs/benchmarks/README.md`); burn's own strided data gradient falls back
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
