//! The plain-op reference twins (burn's own convolution ops), for tests on any backend.

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use super::conv_spec::Conv3dSpec;
use crate::primitive::{float, tensor};

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
