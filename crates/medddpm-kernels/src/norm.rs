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
    while n % (2 * k) == 0 && (2 * k) * (2 * k) <= n {
        k *= 2;
    }
    k
}

/// How a `[b, c, d, h, w]` or `[b, d, h, w, c]` activation is viewed so that each group's
/// values can be summed in two levels: the view's shape, the axes to sum (keeping them), and the
/// shape of `[b, g]` statistics that broadcasts against the view.
struct GroupView {
    dims: [usize; 5],
    sum_axes: &'static [usize],
    stat: [usize; 5],
    /// Values per group.
    n: usize,
}

fn group_view(shape: [usize; 5], g: usize, layout: Layout) -> GroupView {
    match layout {
        Layout::Ncdhw => {
            let [b, c, d, h, w] = shape;
            let n = c / g * d * h * w;
            let k = block_len(n);
            GroupView {
                dims: [b, g, 1, n / k, k],
                sum_axes: &[4, 3],
                stat: [b, g, 1, 1, 1],
                n,
            }
        }
        Layout::Ndhwc => {
            let [b, d, h, w, c] = shape;
            let s = d * h * w;
            let k = block_len(s);
            GroupView {
                dims: [b, s / k, k, g, c / g],
                sum_axes: &[4, 2, 1],
                stat: [b, 1, 1, g, 1],
                n: s * (c / g),
            }
        }
    }
}

fn sum_axes<B: Backend>(mut t: Tensor<B, 5>, axes: &[usize]) -> Tensor<B, 5> {
    for &a in axes {
        t = t.sum_dim(a);
    }
    t
}

/// Per-channel sums over batch and space (two-level), as `[c]`.
fn channel_sum<B: Backend>(t: Tensor<B, 5>, layout: Layout) -> Tensor<B, 1> {
    let shape = t.dims();
    match layout {
        Layout::Ncdhw => {
            let [b, c, d, h, w] = shape;
            let s = d * h * w;
            let k = block_len(s);
            sum_axes(t.reshape([b, c, s / k, k, 1]), &[3, 2, 0]).reshape([c])
        }
        Layout::Ndhwc => {
            let [b, d, h, w, c] = shape;
            let s = d * h * w;
            let k = block_len(s);
            sum_axes(t.reshape([b, s / k, k, c, 1]), &[2, 1, 0]).reshape([c])
        }
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

/// `x_hat = (x - mean) * rstd` in the statistics dtype, in `x`'s logical shape.
fn normalised<B: Backend>(
    x: Tensor<B, 5>,
    mean: Tensor<B, 2>,
    rstd: Tensor<B, 2>,
    spec: &GroupNormSpec,
) -> Tensor<B, 5> {
    let shape = x.dims();
    let v = group_view(shape, spec.num_groups, spec.layout);
    let xv = to_stats(x).reshape(v.dims);
    xv.sub(mean.reshape(v.stat))
        .mul(rstd.reshape(v.stat))
        .reshape(shape)
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
    let b = shape[0];
    let g = spec.num_groups;
    let v = group_view(shape, g, spec.layout);
    let xv = to_stats(x).reshape(v.dims);
    let stats = xv.dtype();
    let mean = sum_axes(xv.clone(), v.sum_axes).div_scalar(v.n as f64);
    let centred = xv.sub(mean.clone());
    let var = sum_axes(centred.clone().square(), v.sum_axes).div_scalar(v.n as f64);
    let rstd = var.add_scalar(spec.epsilon).sqrt().recip();
    let x_hat = centred.mul(rstd.clone()).reshape(shape);
    let affine = affine_shape(channels(shape, spec.layout), spec.layout);
    let a = x_hat
        .mul(cast_to(gamma, stats).reshape(affine))
        .add(cast_to(beta, stats).reshape(affine));
    let y = if spec.silu {
        a.clone().mul(sigmoid(a))
    } else {
        a
    };
    (
        cast_to(y, dtype),
        mean.reshape([b, g]),
        rstd.reshape([b, g]),
    )
}

/// The plain-op backward: the reference twin of [`KernelBackend::group_norm_backward`].
/// Recomputes `x_hat` (and the SiLU input) from `x` and the statistics.
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
    let affine = affine_shape(channels(shape, layout), layout);
    let x_hat = normalised(x, mean, rstd.clone(), spec);
    let stats = x_hat.dtype();
    let gamma = cast_to(gamma, stats).reshape(affine);
    let grad = to_stats(grad);
    let grad = cast_to(grad, stats);
    // dL/da, a = gamma * x_hat + beta.
    let da = if spec.silu {
        let a = x_hat
            .clone()
            .mul(gamma.clone())
            .add(cast_to(beta, stats).reshape(affine));
        let s = sigmoid(a.clone());
        // silu'(a) = s (1 + a (1 - s)).
        let ds = s
            .clone()
            .mul(a.mul(s.neg().add_scalar(1.0)).add_scalar(1.0));
        grad.mul(ds)
    } else {
        grad
    };
    let d_beta = channel_sum(da.clone(), layout);
    let d_gamma = channel_sum(da.clone().mul(x_hat.clone()), layout);
    // dL/dx = rstd (g - mean(g) - x_hat mean(g x_hat)) with g = dL/dx_hat, means per group.
    let v = group_view(shape, spec.num_groups, layout);
    let gv = da.mul(gamma).reshape(v.dims);
    let xv = x_hat.reshape(v.dims);
    let n = v.n as f64;
    let m1 = sum_axes(gv.clone(), v.sum_axes).div_scalar(n);
    let m2 = sum_axes(gv.clone().mul(xv.clone()), v.sum_axes).div_scalar(n);
    let dx = gv
        .sub(m1)
        .sub(xv.mul(m2))
        .mul(rstd.reshape(v.stat))
        .reshape(shape);
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
