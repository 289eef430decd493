//! GroupNorm's types and its plain-burn-op twins: the forward and backward pass that every
//! backend gets as `KernelBackend`'s provided bodies, and that the
//! kernels are checked against.
//! It never uses the trait (only burn and the crate's ground modules), so the trait can use it.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Tensor};

use crate::compute::{Layout, NormEngine};
use crate::dtype::{cast_to, to_stats};
use crate::primitive::{float, tensor};

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
    /// The kernels or the plain-op reference.
    pub engine: NormEngine,
}

impl GroupNormSpec {
    /// Whether the first `first` of `channels` channels end on a group boundary: no group
    /// straddles the two parts of an input joined there (what the decoder's blocks take as
    /// parts; the kernels of two parts compute any split).
    pub fn splits_whole_groups(&self, channels: usize, first: usize) -> bool {
        let groups = self.num_groups;
        if groups == 0 || !channels.is_multiple_of(groups) || first == 0 || first >= channels {
            return false;
        }
        first.is_multiple_of(channels / groups)
    }
}

/// What a normalisation takes: one activation plus an optional per-(batch, channel) shift
/// `[b, c]`, or two activations that are the parts of one joined along channels (the decoder's
/// [current, skip]), whose join is never made.
#[derive(Debug, Clone)]
pub enum NormInput<T> {
    /// `x` and the shift added inside the normalisation.
    Shifted(T, Option<T>),
    /// `a` and `b`, joined along channels.
    Parts(T, T),
}

impl<T> NormInput<T> {
    /// The input's first tensor and its second, where it has one (the shift, or the second
    /// part): the order in which the operations list their operands and gradients.
    pub fn into_pair(self) -> (T, Option<T>) {
        match self {
            NormInput::Shifted(x, shift) => (x, shift),
            NormInput::Parts(a, b) => (a, Some(b)),
        }
    }

    /// The input of [`NormInput::into_pair`]'s pair, of two parts where `parts`.
    ///
    /// # Panics
    /// Where `parts` and there is no second tensor.
    pub fn from_pair(first: T, second: Option<T>, parts: bool) -> Self {
        match parts {
            true => NormInput::Parts(first, second.expect("the second part")),
            false => NormInput::Shifted(first, second),
        }
    }

    /// Whether it is two parts.
    pub fn is_parts(&self) -> bool {
        matches!(self, NormInput::Parts(..))
    }
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

/// The gradients of a GroupNorm.
#[derive(Debug, Clone)]
pub struct GroupNormGrads<B: Backend> {
    /// The input's, shaped as the input was: dL/dx (in `x`'s dtype) and dL/dshift (`[b, c]` in
    /// the shift's dtype, where it had one), or each part's dL/da and dL/db.
    pub input: NormInput<FloatTensor<B>>,
    /// dL/dgamma, `[c]`, in `gamma`'s dtype.
    pub gamma: FloatTensor<B>,
    /// dL/dbeta, `[c]`, in `beta`'s dtype.
    pub beta: FloatTensor<B>,
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
pub fn channel_sums<B: Backend>(t: Tensor<B, 5>, layout: Layout) -> Tensor<B, 2> {
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

/// A per-(batch, channel) `[b, c]` tensor shaped to broadcast against an activation in
/// `layout`'s logical shape.
fn per_batch_channel<B: Backend>(t: Tensor<B, 2>, layout: Layout) -> Tensor<B, 5> {
    let [b, c] = t.dims();
    match layout {
        Layout::Ncdhw => t.reshape([b, c, 1, 1, 1]),
        Layout::Ndhwc => t.reshape([b, 1, 1, 1, c]),
    }
}

/// `x` in the statistics dtype plus the optional shift.
fn shifted<B: Backend>(
    x: Tensor<B, 5>,
    shift: Option<Tensor<B, 2>>,
    layout: Layout,
) -> Tensor<B, 5> {
    let x = to_stats(x);
    match shift {
        Some(s) => {
            let s = cast_to(s, x.dtype());
            x.add(per_batch_channel(s, layout))
        }
        None => x,
    }
}

fn channels(shape: [usize; 5], layout: Layout) -> usize {
    shape[layout.channel_dim()]
}

/// What the forward and the backward pass both derive from the input's shape and the spec.
struct Geometry {
    layout: Layout,
    groups: usize,
    channels: usize,
    /// Values per group.
    n: f64,
}

impl Geometry {
    fn new(shape: [usize; 5], spec: &GroupNormSpec) -> Self {
        let c = channels(shape, spec.layout);
        debug_assert_eq!(c % spec.num_groups, 0);
        Geometry {
            layout: spec.layout,
            groups: spec.num_groups,
            channels: c,
            n: (shape.iter().product::<usize>() / shape[0] / spec.num_groups) as f64,
        }
    }

    /// `[b, g]` statistics per channel, broadcasting against the activation.
    fn per_channel<B: Backend>(&self, stat: Tensor<B, 2>) -> Tensor<B, 5> {
        per_channel(stat, self.channels, self.layout)
    }

    /// Per-(batch, group) means of the per-channel sums of `t`.
    fn group_means<B: Backend>(&self, per_channel_sums: Tensor<B, 2>) -> Tensor<B, 2> {
        group_sums(per_channel_sums, self.groups).div_scalar(self.n)
    }

    /// `gamma` and `beta` in `dtype`, shaped to broadcast against the activation.
    fn affine<B: Backend>(
        &self,
        gamma: Tensor<B, 1>,
        beta: Tensor<B, 1>,
        dtype: DType,
    ) -> (Tensor<B, 5>, Tensor<B, 5>) {
        let shape = affine_shape(self.channels, self.layout);
        (
            cast_to(gamma, dtype).reshape(shape),
            cast_to(beta, dtype).reshape(shape),
        )
    }
}

fn sigmoid<B: Backend>(a: Tensor<B, 5>) -> Tensor<B, 5> {
    a.neg().exp().add_scalar(1.0).recip()
}

/// The plain-op forward: the reference twin of `KernelBackend::group_norm_forward`.
/// `shift` (`[b, c]`), when given, is added to `x` per batch item and channel first, in the
/// statistics dtype.
///
pub fn forward<B: Backend>(
    x: Tensor<B, 5>,
    shift: Option<Tensor<B, 2>>,
    gamma: Tensor<B, 1>,
    beta: Tensor<B, 1>,
    spec: &GroupNormSpec,
) -> (Tensor<B, 5>, Tensor<B, 2>, Tensor<B, 2>) {
    let dtype = x.dtype();
    let geo = Geometry::new(x.dims(), spec);
    let x = shifted(x, shift, geo.layout);
    let (gamma, beta) = geo.affine(gamma, beta, x.dtype());
    let mean = geo.group_means(channel_sums(x.clone(), geo.layout));
    let centred = x.sub(geo.per_channel(mean.clone()));
    let var = geo.group_means(channel_sums(centred.clone().square(), geo.layout));
    let rstd = var.add_scalar(spec.epsilon).sqrt().recip();
    let a = centred
        .mul(geo.per_channel(rstd.clone()))
        .mul(gamma)
        .add(beta);
    let y = if spec.silu {
        a.clone().mul(sigmoid(a))
    } else {
        a
    };
    (cast_to(y, dtype), mean, rstd)
}

/// The plain-op backward: the reference twin of `KernelBackend::group_norm_backward`.
/// Recomputes `x_hat` (and the SiLU input) from `x` and the statistics. Two reductions over the
/// input's size: the per-channel sums of `dL/da` and of `dL/da * x_hat` give dbeta and dgamma
/// and, weighted by gamma and summed per group, the two group means of dL/dx.
///
/// With a shift, dL/dshift is the per-(batch, channel) sum of dL/dx (before its rounding to
/// `x`'s dtype).
///
#[allow(clippy::too_many_arguments)]
pub fn backward<B: Backend>(
    x: Tensor<B, 5>,
    shift: Option<Tensor<B, 2>>,
    gamma: Tensor<B, 1>,
    beta: Tensor<B, 1>,
    mean: Tensor<B, 2>,
    rstd: Tensor<B, 2>,
    grad: Tensor<B, 5>,
    spec: &GroupNormSpec,
) -> (
    Tensor<B, 5>,
    Option<Tensor<B, 2>>,
    Tensor<B, 1>,
    Tensor<B, 1>,
) {
    let dtype = x.dtype();
    let param_dtype = gamma.dtype();
    let shift_dtype = shift.as_ref().map(|s| s.dtype());
    let geo = Geometry::new(x.dims(), spec);
    let c = geo.channels;
    let x = shifted(x, shift, geo.layout);
    let stats = x.dtype();
    let (gamma, beta) = geo.affine(gamma, beta, stats);
    let rstd_c = geo.per_channel(rstd);
    let x_hat = x.sub(geo.per_channel(mean)).mul(rstd_c.clone());
    let grad = cast_to(grad, stats);
    // dL/da, a = gamma * x_hat + beta.
    let da = if spec.silu {
        let a = x_hat.clone().mul(gamma.clone()).add(beta);
        let s = sigmoid(a.clone());
        // silu'(a) = s (1 + a (1 - s)).
        let ds = s
            .clone()
            .mul(a.mul(s.neg().add_scalar(1.0)).add_scalar(1.0));
        grad.mul(ds)
    } else {
        grad
    };
    let sum_da = channel_sums(da.clone(), geo.layout);
    let sum_da_xhat = channel_sums(da.clone().mul(x_hat.clone()), geo.layout);
    let d_beta = sum_da.clone().sum_dim(0).reshape([c]);
    let d_gamma = sum_da_xhat.clone().sum_dim(0).reshape([c]);
    // dL/dx = rstd (g - mean(g) - x_hat mean(g x_hat)) with g = gamma dL/da, means per group.
    let gamma_row = gamma.clone().reshape([1, c]);
    let m1 = geo.group_means(sum_da.mul(gamma_row.clone()));
    let m2 = geo.group_means(sum_da_xhat.mul(gamma_row));
    let dx = da
        .mul(gamma)
        .sub(geo.per_channel(m1))
        .sub(x_hat.mul(geo.per_channel(m2)))
        .mul(rstd_c);
    let d_shift = shift_dtype.map(|d| cast_to(channel_sums(dx.clone(), geo.layout), d));
    (
        cast_to(dx, dtype),
        d_shift,
        cast_to(d_gamma, param_dtype),
        cast_to(d_beta, param_dtype),
    )
}

/// [`forward`] on primitives, of one input plus its shift or of the join of two parts: the
/// provided body of `medddpm_kernels::KernelBackend::group_norm_forward` (the twin of the
/// kernels that read each part where it lies).
pub fn forward_primitive<B: Backend>(
    input: NormInput<FloatTensor<B>>,
    gamma: FloatTensor<B>,
    beta: FloatTensor<B>,
    spec: &GroupNormSpec,
) -> GroupNormOutput<B> {
    let (x, shift) = match input {
        NormInput::Shifted(x, shift) => (x, shift),
        NormInput::Parts(a, b) => (join::<B>(a, b, spec.layout), None),
    };
    let (y, mean, rstd) = forward::<B>(
        tensor(x),
        shift.map(tensor),
        tensor(gamma),
        tensor(beta),
        spec,
    );
    GroupNormOutput {
        y: float(y),
        mean: float(mean),
        rstd: float(rstd),
    }
}

/// [`backward`] on primitives (of two parts: of their join, the input gradient split at the
/// first part's channels): the provided body of
/// `medddpm_kernels::KernelBackend::group_norm_backward`.
#[allow(clippy::too_many_arguments)]
pub fn backward_primitive<B: Backend>(
    input: NormInput<FloatTensor<B>>,
    gamma: FloatTensor<B>,
    beta: FloatTensor<B>,
    mean: FloatTensor<B>,
    rstd: FloatTensor<B>,
    grad: FloatTensor<B>,
    spec: &GroupNormSpec,
) -> GroupNormGrads<B> {
    let dim = spec.layout.channel_dim();
    let (x, shift, first) = match input {
        NormInput::Shifted(x, shift) => (x, shift, None),
        NormInput::Parts(a, b) => {
            let first = tensor::<B, 5>(a.clone()).dims()[dim];
            (join::<B>(a, b, spec.layout), None, Some(first))
        }
    };
    let (dx, dshift, dgamma, dbeta) = backward::<B>(
        tensor(x),
        shift.map(tensor),
        tensor(gamma),
        tensor(beta),
        tensor(mean),
        tensor(rstd),
        tensor(grad),
        spec,
    );
    let input = match first {
        None => NormInput::Shifted(float(dx), dshift.map(float)),
        Some(first) => {
            let rest = dx.dims()[dim] - first;
            let part = |start, len| float(dx.clone().narrow(dim, start, len));
            NormInput::Parts(part(0, first), part(first, rest))
        }
    };
    GroupNormGrads {
        input,
        gamma: float(dgamma),
        beta: float(dbeta),
    }
}

/// `a` and `b` joined along the channels of `layout`.
fn join<B: Backend>(a: FloatTensor<B>, b: FloatTensor<B>, layout: Layout) -> FloatTensor<B> {
    B::float_cat(vec![a, b], layout.channel_dim())
}
