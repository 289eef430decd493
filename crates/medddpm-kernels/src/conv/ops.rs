//! The extension's operations on tensors (rather than primitives), for the network's layers.

use burn::tensor::Tensor;

use crate::compute::Layout;
use crate::extension::KernelBackend;
use crate::primitive::{float, tensor};
use crate::reference::conv_spec::Conv3dSpec;

medddpm_ops::on_tensors! {
    /// [`KernelBackend::upsample_trilinear_x2`] on tensors: `x` in `layout`'s memory order
    /// (`[b, c, d, h, w]` or `[b, d, h, w, c]`), every spatial size doubled.
    fn upsample_x2<B: KernelBackend>(x: Tensor<B, 5>, layout: Layout) -> Tensor<B, 5>
        = B::upsample_trilinear_x2(float(x), layout);

    /// [`KernelBackend::conv3d_data_grad`] on tensors.
    fn conv3d_data_grad<B: KernelBackend>(x: Tensor<B, 5>, w: Tensor<B, 5>, dy: Tensor<B, 5>,
        spec: Conv3dSpec) -> Tensor<B, 5>
        = B::conv3d_data_grad(float(x), float(w), float(dy), spec);

    /// [`KernelBackend::conv3d_weight_grad`] on tensors.
    fn conv3d_weight_grad<B: KernelBackend>(x: Tensor<B, 5>, w: Tensor<B, 5>, dy: Tensor<B, 5>,
        spec: Conv3dSpec) -> Tensor<B, 5>
        = B::conv3d_weight_grad(float(x), float(w), float(dy), spec);
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
