//! [`KernelBackend::norm_conv3d`] on the autodiff backend: a GroupNorm + SiLU and the
//! convolution after it as one node that keeps the normalisation's input and statistics, not
//! its output. The backward pass recomputes that output (one more normalisation pass) for the
//! convolution's two gradients; at 128^3 a ResBlock so keeps two activations fewer.
//!
//! Of [`NormInput::Parts`] (the decoder's [current, skip]) each part is normalised on its own
//! groups and the outputs joined as the convolution's input: the join of the inputs is never
//! made, and the node keeps the two parts.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops};
use burn::backend::autodiff::NodeId;
use burn::backend::Autodiff;
use burn::tensor::ops::FloatTensor;

use super::node::{node_of, Keep, Parents};
use super::KernelBackend;
use crate::compute::Layout;
use crate::primitive::{float, tensor};
use crate::reference::conv_spec::Conv3dSpec;
use crate::reference::norm::{GroupNormOutput, GroupNormSpec};

/// What [`KernelBackend::norm_conv3d`] normalises: one activation plus an optional
/// per-channel shift `[b, c]`, or two activations that are the parts of one joined along
/// channels (the decoder's [current, skip]; the normalisation must split at the first part's
/// channels: [`GroupNormSpec::split`]), whose join is never made.
#[derive(Debug, Clone)]
pub enum NormInput<T> {
    /// `x` and the shift added inside the normalisation.
    Shifted(T, Option<T>),
    /// `a` and `b`, joined along channels.
    Parts(T, T),
}

/// The convolution of `y` (in `conv.compute.layout`'s logical shape: channels-last
/// activations are `[b, d, h, w, c]`) handed to the engine as its layouts expect, and its
/// result in the same logical shape.
pub fn conv_in_layout<B: KernelBackend>(
    y: FloatTensor<B>,
    weight: FloatTensor<B>,
    conv: Conv3dSpec,
) -> FloatTensor<B> {
    match conv.compute.layout {
        Layout::Ncdhw => B::conv3d_forward(y, weight, conv),
        Layout::Ndhwc => B::float_permute(
            B::conv3d_forward(B::float_permute(y, &TO_FIRST), weight, conv),
            &TO_LAST,
        ),
    }
}

/// Channels-last `[b, d, h, w, c]` viewed as `[b, c, d, h, w]`, and back.
const TO_FIRST: [usize; 5] = [0, 4, 1, 2, 3];
const TO_LAST: [usize; 5] = [0, 2, 3, 4, 1];

#[derive(Debug)]
struct NormConvBackward;

/// The parents' checkpoints (x, gamma, beta, weight and the shift where there is one; or a, b,
/// gamma, beta and the weight), the normalisation's statistics and both specs.
type State<B> = (Vec<NodeId>, (Stats<B>, GroupNormSpec, Conv3dSpec));

/// The statistics (mean, rstd) of one normalisation, or of each part's.
#[derive(Debug, Clone)]
enum Stats<B: KernelBackend> {
    One([FloatTensor<B>; 2]),
    Parts([FloatTensor<B>; 4]),
}

/// [`KernelBackend::norm_conv3d`] on the autodiff backend: a node of parents x, gamma, beta
/// and the weight (and the shift where there is one), or of the parts a and b, gamma, beta and
/// the weight.
pub(super) fn norm_conv_node<B: KernelBackend, C: CheckpointStrategy>(
    input: NormInput<FloatTensor<Autodiff<B, C>>>,
    [gamma, beta, weight]: [FloatTensor<Autodiff<B, C>>; 3],
    norm: GroupNormSpec,
    conv: Conv3dSpec,
) -> FloatTensor<Autodiff<B, C>> {
    // The output and the statistics of x plus an optional shift.
    let shifted = |x, shift, gamma, beta, weight| {
        let out = B::group_norm_forward(x, shift, gamma, beta, norm);
        let y = conv_in_layout::<B>(out.y, weight, conv);
        (y, (Stats::One([out.mean, out.rstd]), norm, conv))
    };
    match input {
        NormInput::Shifted(x, None) => node_of::<B, C, _, _, 4>(
            NormConvBackward,
            [x, gamma, beta, weight],
            Keep::Parents,
            |[x, gamma, beta, weight]| shifted(x, None, gamma, beta, weight),
        ),
        NormInput::Shifted(x, Some(shift)) => node_of::<B, C, _, _, 5>(
            NormConvBackward,
            [x, gamma, beta, weight, shift],
            Keep::Parents,
            |[x, gamma, beta, weight, shift]| shifted(x, Some(shift), gamma, beta, weight),
        ),
        NormInput::Parts(a, b) => node_of::<B, C, _, _, 5>(
            NormConvBackward,
            [a, b, gamma, beta, weight],
            Keep::Parents,
            |[a, b, gamma, beta, weight]| {
                let (y, [out_a, out_b]) = joined_norm_forward::<B>(a, b, gamma, beta, norm);
                let stats = Stats::Parts([out_a.mean, out_a.rstd, out_b.mean, out_b.rstd]);
                (conv_in_layout::<B>(y, weight, conv), (stats, norm, conv))
            },
        ),
    }
}

/// The node's backward from its output's gradient: the normalisation's output recomputed as
/// the forward pass computed it, for the convolution's gradients.
fn norm_conv_grads<B: KernelBackend>(
    mut parents: Parents<'_, B>,
    grad: FloatTensor<B>,
    (stats, norm, conv): (Stats<B>, GroupNormSpec, Conv3dSpec),
) {
    let each = match stats {
        Stats::One(stats) => shifted_grads::<B>(&mut parents, grad, stats, norm, conv),
        Stats::Parts(stats) => parts_grads::<B>(&mut parents, grad, stats, norm, conv),
    };
    parents.register_each(each);
}

/// The gradients of x, gamma, beta, the weight (and the shift), the parents in that order.
fn shifted_grads<B: KernelBackend>(
    parents: &mut Parents<'_, B>,
    grad: FloatTensor<B>,
    [mean, rstd]: [FloatTensor<B>; 2],
    norm: GroupNormSpec,
    conv: Conv3dSpec,
) -> Vec<FloatTensor<B>> {
    let mut next = || parents.next();
    let (x, gamma, beta, weight) = (next(), next(), next(), next());
    let shift = parents.next_if_any();
    let y = B::group_norm_forward(x.clone(), shift.clone(), gamma.clone(), beta.clone(), norm).y;
    let (dw, dy) = conv_grads::<B>(y, weight, grad, conv);
    let g = B::group_norm_backward(x, shift, gamma, beta, mean, rstd, dy, norm);
    [g.x, g.gamma, g.beta, dw]
        .into_iter()
        .chain(g.shift)
        .collect()
}

node_backward_impl!(NormConvBackward, State<B>, norm_conv_grads, 4, 5);

/// The convolution's weight and input gradients for its input `y` and output gradient `grad`
/// (both in `conv.compute.layout`'s logical shape, as [`conv_in_layout`] takes them).
fn conv_grads<B: KernelBackend>(
    y: FloatTensor<B>,
    weight: FloatTensor<B>,
    grad: FloatTensor<B>,
    conv: Conv3dSpec,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let (y, grad) = match conv.compute.layout {
        Layout::Ncdhw => (y, grad),
        Layout::Ndhwc => (
            B::float_permute(y, &TO_FIRST),
            B::float_permute(grad, &TO_FIRST),
        ),
    };
    let dw = B::conv3d_weight_grad(y.clone(), weight.clone(), grad.clone(), conv);
    let dy = B::conv3d_data_grad(y, weight, grad, conv);
    let dy = match conv.compute.layout {
        Layout::Ncdhw => dy,
        Layout::Ndhwc => B::float_permute(dy, &TO_LAST),
    };
    (dw, dy)
}

/// The parameters and spec of each part of a normalisation over `a` and `b` joined along
/// channels (in `norm.layout`'s logical shape): gamma's and beta's channels of that part and
/// its groups.
///
/// # Panics
/// Where a group straddles the parts ([`GroupNormSpec::split`] says which may be split).
pub fn joined_norm_parts<B: KernelBackend>(
    a_channels: usize,
    gamma: FloatTensor<B>,
    beta: FloatTensor<B>,
    norm: GroupNormSpec,
) -> [(FloatTensor<B>, FloatTensor<B>, GroupNormSpec); 2] {
    let gamma = tensor::<B, 1>(gamma);
    let beta = tensor::<B, 1>(beta);
    let c = gamma.dims()[0];
    let [spec_a, spec_b] = norm.split(c, a_channels).unwrap_or_else(|| {
        panic!(
            "a GroupNorm of {} groups over {c} channels split at {a_channels}",
            norm.num_groups
        )
    });
    let part = |t: &burn::tensor::Tensor<B, 1>, start: usize, len: usize| {
        float(t.clone().narrow(0, start, len))
    };
    let rest = c - a_channels;
    [
        (
            part(&gamma, 0, a_channels),
            part(&beta, 0, a_channels),
            spec_a,
        ),
        (
            part(&gamma, a_channels, rest),
            part(&beta, a_channels, rest),
            spec_b,
        ),
    ]
}

/// `a` and `b` (`[b, c, ..]` or, channels-last, `[b, .., c]`) joined along channels in
/// `layout`: the backend's join, as [`crate::cat_last`] and burn's `cat` make it.
fn join<B: KernelBackend>(a: FloatTensor<B>, b: FloatTensor<B>, layout: Layout) -> FloatTensor<B> {
    match layout {
        Layout::Ncdhw => B::float_cat(vec![a, b], 1),
        Layout::Ndhwc => B::cat_last(a, b),
    }
}

/// `x` split along channels in `layout` into its first `first` channels and the rest.
fn split<B: KernelBackend>(x: FloatTensor<B>, first: usize, layout: Layout) -> [FloatTensor<B>; 2] {
    match layout {
        Layout::Ncdhw => {
            let x = tensor::<B, 5>(x);
            let rest = x.dims()[1] - first;
            [x.clone().narrow(1, 0, first), x.narrow(1, first, rest)].map(float)
        }
        Layout::Ndhwc => B::split_last(x, first),
    }
}

/// The channels of `x` in `layout`.
fn channels<B: KernelBackend>(x: &FloatTensor<B>, layout: Layout) -> usize {
    use burn::tensor::TensorMetadata;
    x.shape()[layout.channel_dim()]
}

/// SiLU?(GroupNorm) of `a` and `b` joined along channels, each part on its own groups and its
/// part of the parameters, the outputs joined: what the plain path of the U-Net computes (two
/// normalisations and the backend's join), and each part's statistics.
pub(super) fn joined_norm_forward<B: KernelBackend>(
    a: FloatTensor<B>,
    b: FloatTensor<B>,
    gamma: FloatTensor<B>,
    beta: FloatTensor<B>,
    norm: GroupNormSpec,
) -> (FloatTensor<B>, [GroupNormOutput<B>; 2]) {
    let [(gamma_a, beta_a, spec_a), (gamma_b, beta_b, spec_b)] =
        joined_norm_parts::<B>(channels::<B>(&a, norm.layout), gamma, beta, norm);
    let out_a = B::group_norm_forward(a, None, gamma_a, beta_a, spec_a);
    let out_b = B::group_norm_forward(b, None, gamma_b, beta_b, spec_b);
    let y = join::<B>(out_a.y.clone(), out_b.y.clone(), norm.layout);
    (y, [out_a, out_b])
}

/// The gradients of a, b, gamma, beta and the weight, the parents in that order: the
/// normalisations' outputs and their join recomputed, the input gradient split between the
/// parts' normalisations.
fn parts_grads<B: KernelBackend>(
    parents: &mut Parents<'_, B>,
    grad: FloatTensor<B>,
    [mean_a, rstd_a, mean_b, rstd_b]: [FloatTensor<B>; 4],
    norm: GroupNormSpec,
    conv: Conv3dSpec,
) -> Vec<FloatTensor<B>> {
    let mut next = || parents.next();
    let (a, b, gamma, beta, weight) = (next(), next(), next(), next(), next());
    let a_channels = channels::<B>(&a, norm.layout);
    let [(gamma_a, beta_a, spec_a), (gamma_b, beta_b, spec_b)] =
        joined_norm_parts::<B>(a_channels, gamma, beta, norm);
    let y_a = B::group_norm_forward(a.clone(), None, gamma_a.clone(), beta_a.clone(), spec_a).y;
    let y_b = B::group_norm_forward(b.clone(), None, gamma_b.clone(), beta_b.clone(), spec_b).y;
    let y = join::<B>(y_a, y_b, norm.layout);
    let (dw, dy) = conv_grads::<B>(y, weight, grad, conv);
    let [dy_a, dy_b] = split::<B>(dy, a_channels, norm.layout);
    let ga = B::group_norm_backward(a, None, gamma_a, beta_a, mean_a, rstd_a, dy_a, spec_a);
    let gb = B::group_norm_backward(b, None, gamma_b, beta_b, mean_b, rstd_b, dy_b, spec_b);
    let dgamma = B::float_cat(vec![ga.gamma, gb.gamma], 0);
    let dbeta = B::float_cat(vec![ga.beta, gb.beta], 0);
    vec![ga.x, gb.x, dgamma, dbeta, dw]
}
