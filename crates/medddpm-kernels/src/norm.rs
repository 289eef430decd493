//! GroupNorm (with the SiLU that follows it in the U-Net fused in) as a backend extension:
//! forward and a hand-written backward that keeps only the input and the per-group statistics.
//!
//! The plain-burn-op bodies here are the reference twins and the fallback. Statistics are in
//! f32 whatever the activation dtype (f64 stays f64), with two-level blocked sums: a group holds
//! millions of values at 128^3, and one running f32 sum over them (as some backends reduce)
//! loses about 1e-3 of the mean, where sqrt(n)-sized partial sums keep it at f32 rounding (on the
//! H100 the error of the whole network's output at 128^3 went from 2.4e-3 to 1.7e-6).
//!
//! Why a hand-written backward: autodiff of the plain-op chain keeps every intermediate (the
//! centred input, its square, the normalised values, the affine result and the SiLU input) for
//! about 40 normalisations per pass; this keeps the input and two numbers per group.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, FloatDType, Tensor, TensorPrimitive};

use crate::compute::Layout;

/// How a GroupNorm computes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupNormSpec {
    /// Number of channel groups (a divisor of the channel count).
    pub num_groups: usize,
    /// Added to the variance (PyTorch's `nn.GroupNorm` uses 1e-5).
    pub epsilon: f64,
    /// Apply SiLU to the result (`silu(gamma * x_hat + beta)`).
    pub silu: bool,
    /// Memory order of the activations: `[b, c, d, h, w]` (`Ncdhw`) or `[b, d, h, w, c]`
    /// (`Ndhwc`). Tensors are passed in that logical shape.
    pub layout: Layout,
}

/// What the forward pass returns: the output and the per-group statistics (`[b, g]`, in the
/// statistics dtype) that the backward pass needs.
#[derive(Debug, Clone)]
pub struct GroupNormOutput<B: Backend> {
    /// `silu?(gamma * (x - mean) * rstd + beta)`, in `x`'s dtype.
    pub y: FloatTensor<B>,
    /// Mean per (batch, group).
    pub mean: FloatTensor<B>,
    /// 1 / sqrt(variance + epsilon) per (batch, group).
    pub rstd: FloatTensor<B>,
}

/// The three gradients of a GroupNorm.
#[derive(Debug, Clone)]
pub struct GroupNormGrads<B: Backend> {
    /// dL/dx, in `x`'s dtype.
    pub x: FloatTensor<B>,
    /// dL/dgamma, `[c]`, in `gamma`'s dtype.
    pub gamma: FloatTensor<B>,
    /// dL/dbeta, `[c]`, in `beta`'s dtype.
    pub beta: FloatTensor<B>,
}

/// `x` in the dtype reductions (normalisation statistics, softmax) run in: f64 stays f64,
/// everything else goes to f32.
pub fn to_stats<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    match x.dtype() {
        DType::F64 | DType::F32 => x,
        _ => cast_to(x, DType::F32),
    }
}

/// `x` in `dtype` (a no-op when it already is); `dtype` must be a float type.
pub fn cast_to<B: Backend, const D: usize>(x: Tensor<B, D>, dtype: DType) -> Tensor<B, D> {
    if x.dtype() == dtype {
        return x;
    }
    let target = match dtype {
        DType::F64 => FloatDType::F64,
        DType::F32 => FloatDType::F32,
        DType::F16 => FloatDType::F16,
        DType::BF16 => FloatDType::BF16,
        other => panic!("cast_to: {other:?} is not a float dtype"),
    };
    x.cast(target)
}

/// The largest power of two that divides `n` and is at most sqrt(n) (the inner block of a
/// two-level sum).
pub fn block_len(n: usize) -> usize {
    let mut k = 1;
    while n.is_multiple_of(2 * k) && (2 * k) * (2 * k) <= n {
        k *= 2;
    }
    k
}

/// Sums over space per (batch, channel), `[b, c]`, in two levels (blocks of `block_len(s)`
/// voxels, then the blocks). Both layouts reduce an axis whose neighbours in memory are other
/// outputs or the same block, so every level reads its input once, in order, and writes a small
/// result; the group sums come from these per-channel sums (a view that reduced the channels
/// within a group first wrote an intermediate half the size of the input when a group has two
/// channels).
fn channel_sums<B: Backend>(t: Tensor<B, 5>, layout: Layout) -> Tensor<B, 2> {
    let shape = t.dims();
    let b = shape[0];
    let c = channels(shape, layout);
    let s = shape.iter().product::<usize>() / (b * c);
    let k = block_len(s);
    match layout {
        Layout::Ncdhw => t
            .reshape([b, c, s / k, k])
            .sum_dim(3)
            .sum_dim(2)
            .reshape([b, c]),
        Layout::Ndhwc => t
            .reshape([b, s / k, k, c])
            .sum_dim(2)
            .sum_dim(1)
            .reshape([b, c]),
    }
}

/// Per-(batch, group) sums, `[b, g]`, of per-channel sums `[b, c]`.
fn group_sums<B: Backend>(per_channel: Tensor<B, 2>, g: usize) -> Tensor<B, 2> {
    let [b, c] = per_channel.dims();
    per_channel
        .reshape([b, g, c / g])
        .sum_dim(2)
        .reshape([b, g])
}

/// `[b, g]` statistics as one value per channel, shaped to broadcast against an activation in
/// `layout`'s logical shape.
fn per_channel<B: Backend>(stat: Tensor<B, 2>, c: usize, layout: Layout) -> Tensor<B, 5> {
    let [b, g] = stat.dims();
    let per_c = stat
        .reshape([b, g, 1])
        .expand([b, g, c / g])
        .reshape([b, c]);
    match layout {
        Layout::Ncdhw => per_c.reshape([b, c, 1, 1, 1]),
        Layout::Ndhwc => per_c.reshape([b, 1, 1, 1, c]),
    }
}

fn affine_shape(c: usize, layout: Layout) -> [usize; 5] {
    match layout {
        Layout::Ncdhw => [1, c, 1, 1, 1],
        Layout::Ndhwc => [1, 1, 1, 1, c],
    }
}

fn channels(shape: [usize; 5], layout: Layout) -> usize {
    shape[layout.channel_dim()]
}

/// Values per group.
fn group_len(shape: [usize; 5], g: usize, layout: Layout) -> usize {
    debug_assert_eq!(channels(shape, layout) % g, 0);
    shape.iter().product::<usize>() / shape[0] / g
}

fn sigmoid<B: Backend>(a: Tensor<B, 5>) -> Tensor<B, 5> {
    a.neg().exp().add_scalar(1.0).recip()
}

/// The plain-op forward: the reference twin of [`KernelBackend::group_norm_forward`].
///
/// [`KernelBackend::group_norm_forward`]: crate::KernelBackend::group_norm_forward
pub fn forward<B: Backend>(
    x: Tensor<B, 5>,
    gamma: Tensor<B, 1>,
    beta: Tensor<B, 1>,
    spec: &GroupNormSpec,
) -> (Tensor<B, 5>, Tensor<B, 2>, Tensor<B, 2>) {
    let dtype = x.dtype();
    let shape = x.dims();
    let layout = spec.layout;
    let g = spec.num_groups;
    let c = channels(shape, layout);
    let n = group_len(shape, g, layout) as f64;
    let x = to_stats(x);
    let stats = x.dtype();
    let mean = group_sums(channel_sums(x.clone(), layout), g).div_scalar(n);
    let centred = x.sub(per_channel(mean.clone(), c, layout));
    let var = group_sums(channel_sums(centred.clone().square(), layout), g).div_scalar(n);
    let rstd = var.add_scalar(spec.epsilon).sqrt().recip();
    let x_hat = centred.mul(per_channel(rstd.clone(), c, layout));
    let affine = affine_shape(c, layout);
    let a = x_hat
        .mul(cast_to(gamma, stats).reshape(affine))
        .add(cast_to(beta, stats).reshape(affine));
    let y = if spec.silu {
        a.clone().mul(sigmoid(a))
    } else {
        a
    };
    (cast_to(y, dtype), mean, rstd)
}

/// The plain-op backward: the reference twin of [`KernelBackend::group_norm_backward`].
/// Recomputes `x_hat` (and the SiLU input) from `x` and the statistics. Two reductions over the
/// input's size: the per-channel sums of `dL/da` and of `dL/da * x_hat` give dbeta and dgamma
/// and, weighted by gamma and summed per group, the two group means of dL/dx.
///
/// [`KernelBackend::group_norm_backward`]: crate::KernelBackend::group_norm_backward
#[allow(clippy::too_many_arguments)]
pub fn backward<B: Backend>(
    x: Tensor<B, 5>,
    gamma: Tensor<B, 1>,
    beta: Tensor<B, 1>,
    mean: Tensor<B, 2>,
    rstd: Tensor<B, 2>,
    grad: Tensor<B, 5>,
    spec: &GroupNormSpec,
) -> (Tensor<B, 5>, Tensor<B, 1>, Tensor<B, 1>) {
    let dtype = x.dtype();
    let param_dtype = gamma.dtype();
    let shape = x.dims();
    let layout = spec.layout;
    let g = spec.num_groups;
    let c = channels(shape, layout);
    let n = group_len(shape, g, layout) as f64;
    let x = to_stats(x);
    let stats = x.dtype();
    let rstd_c = per_channel(rstd, c, layout);
    let x_hat = x.sub(per_channel(mean, c, layout)).mul(rstd_c.clone());
    let gamma = cast_to(gamma, stats);
    let gamma_b = gamma.clone().reshape(affine_shape(c, layout));
    let grad = cast_to(grad, stats);
    // dL/da, a = gamma * x_hat + beta.
    let da = if spec.silu {
        let a = x_hat
            .clone()
            .mul(gamma_b.clone())
            .add(cast_to(beta, stats).reshape(affine_shape(c, layout)));
        let s = sigmoid(a.clone());
        // silu'(a) = s (1 + a (1 - s)).
        let ds = s
            .clone()
            .mul(a.mul(s.neg().add_scalar(1.0)).add_scalar(1.0));
        grad.mul(ds)
    } else {
        grad
    };
    let sum_da = channel_sums(da.clone(), layout);
    let sum_da_xhat = channel_sums(da.clone().mul(x_hat.clone()), layout);
    let d_beta = sum_da.clone().sum_dim(0).reshape([c]);
    let d_gamma = sum_da_xhat.clone().sum_dim(0).reshape([c]);
    // dL/dx = rstd (g - mean(g) - x_hat mean(g x_hat)) with g = gamma dL/da, means per group.
    let gamma_row = gamma.reshape([1, c]);
    let m1 = group_sums(sum_da.mul(gamma_row.clone()), g).div_scalar(n);
    let m2 = group_sums(sum_da_xhat.mul(gamma_row), g).div_scalar(n);
    let dx = da
        .mul(gamma_b)
        .sub(per_channel(m1, c, layout))
        .sub(x_hat.mul(per_channel(m2, c, layout)))
        .mul(rstd_c);
    (
        cast_to(dx, dtype),
        cast_to(d_gamma, param_dtype),
        cast_to(d_beta, param_dtype),
    )
}

pub(crate) fn float<B: Backend, const D: usize>(t: Tensor<B, D>) -> FloatTensor<B> {
    t.into_primitive().tensor()
}

pub(crate) fn tensor<B: Backend, const D: usize>(t: FloatTensor<B>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(t))
}

/// GroupNorm (and SiLU when `spec.silu`) of `x` on `B`'s kernels, differentiable on an autodiff
/// backend through its hand-written backward.
pub fn group_norm<B: crate::KernelBackend>(
    x: Tensor<B, 5>,
    gamma: Tensor<B, 1>,
    beta: Tensor<B, 1>,
    spec: GroupNormSpec,
) -> Tensor<B, 5> {
    tensor(B::group_norm(float(x), float(gamma), float(beta), spec))
}
