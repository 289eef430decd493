//! GroupNorm on tensors through [`KernelBackend`]: what the U-Net's layers call.

use burn::tensor::Tensor;

use burn::tensor::ops::FloatTensor;

use crate::extension::{KernelBackend, NormInput};
use crate::primitive::float;
use crate::reference::conv_spec::Conv3dSpec;
use crate::reference::norm::GroupNormSpec;

/// GroupNorm (and SiLU when `spec.silu`) of `x` on `B`'s kernels, differentiable on an autodiff
/// backend through its hand-written backward.
pub fn group_norm<B: KernelBackend>(
    x: Tensor<B, 5>,
    gamma: Tensor<B, 1>,
    beta: Tensor<B, 1>,
    spec: GroupNormSpec,
) -> Tensor<B, 5> {
    group_norm_shifted(x, None, gamma, beta, spec)
}

medddpm_ops::on_tensors! {
    /// [`group_norm`] of `x` plus `shift` `[b, c]` (where given) broadcast over space: what
    /// `group_norm(x + shift)` computes, with the addition inside the normalisation's own passes
    /// (differentiable in `shift` too).
    fn group_norm_shifted<B: KernelBackend>(x: Tensor<B, 5>, shift: Option<Tensor<B, 2>>,
        gamma: Tensor<B, 1>, beta: Tensor<B, 1>, spec: GroupNormSpec) -> Tensor<B, 5>
        = B::group_norm(NormInput::Shifted(float(x), shift.map(float)), float(gamma), float(beta), spec);

    /// [`group_norm`] of `a` and `b` joined along channels (the decoder's [current, skip], in
    /// `spec.layout`'s logical shape), the output joined: [`KernelBackend::group_norm`] of
    /// [`NormInput::Parts`],
    /// which on the CubeCL backends never makes the join of the inputs, and whose autodiff node
    /// keeps the two parts.
    fn group_norm_parts<B: KernelBackend>(a: Tensor<B, 5>, b: Tensor<B, 5>, gamma: Tensor<B, 1>,
        beta: Tensor<B, 1>, spec: GroupNormSpec) -> Tensor<B, 5>
        = B::group_norm(NormInput::Parts(float(a), float(b)), float(gamma), float(beta), spec);

    /// SiLU(GroupNorm(input)) then the convolution with `weight` (no bias), the input parts
    /// and the result in `norm.layout`'s logical shape: [`KernelBackend::norm_conv3d`], whose
    /// autodiff node keeps the normalisation's input, not its output.
    fn norm_conv3d<B: KernelBackend>(input: NormInput<FloatTensor<B>>, gamma: Tensor<B, 1>,
        beta: Tensor<B, 1>, norm: GroupNormSpec, weight: Tensor<B, 5>, conv: Conv3dSpec)
        -> Tensor<B, 5>
        = B::norm_conv3d(input, float(gamma), float(beta), norm, float(weight), conv);
}
