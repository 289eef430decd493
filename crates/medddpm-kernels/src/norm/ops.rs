//! GroupNorm on tensors through [`KernelBackend`]: what the U-Net's layers call.

use burn::tensor::Tensor;

use super::reference::GroupNormSpec;
use crate::conv::KernelBackend;
use crate::primitive::{float, tensor};

/// GroupNorm (and SiLU when `spec.silu`) of `x` on `B`'s kernels, differentiable on an autodiff
/// backend through its hand-written backward.
pub fn group_norm<B: KernelBackend>(
    x: Tensor<B, 5>,
    gamma: Tensor<B, 1>,
    beta: Tensor<B, 1>,
    spec: GroupNormSpec,
) -> Tensor<B, 5> {
    tensor(B::group_norm(float(x), float(gamma), float(beta), spec))
}
