//! The plain-op reference twins (burn's own convolution ops), for tests on any backend.

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use super::conv_spec::Conv3dSpec;
use crate::primitive::float;

crate::on_tensors! {
    /// Forward.
    fn forward<B: Backend>(x: Tensor<B, 5>, weight: Tensor<B, 5>, spec: Conv3dSpec) -> Tensor<B, 5>
        = B::conv3d(float(x), float(weight), None, spec.options());

    /// Data gradient.
    fn data_grad<B: Backend>(x: Tensor<B, 5>, w: Tensor<B, 5>, dy: Tensor<B, 5>, spec: Conv3dSpec)
        -> Tensor<B, 5> = B::conv3d_x_backward(float(x), float(w), float(dy), spec.options());

    /// Weight gradient.
    fn weight_grad<B: Backend>(x: Tensor<B, 5>, w: Tensor<B, 5>, dy: Tensor<B, 5>, spec: Conv3dSpec)
        -> Tensor<B, 5> = B::conv3d_weight_backward(float(x), float(w), float(dy), spec.options());
}
