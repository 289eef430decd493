//! [`KernelBackend::norm_conv3d`] on the autodiff backend: a GroupNorm + SiLU and the
//! convolution after it as one node that keeps the normalisation's input and statistics, not
//! its output. The backward pass recomputes that output (one more normalisation pass) for the
//! convolution's two gradients; at 128^3 a ResBlock so keeps two activations fewer.
//!
//! Of [`NormInput::Parts`] (the decoder's [current, skip]) the normalisation reads the two
//! parts ([`KernelBackend::group_norm_forward`]): the join of the inputs is never made, and
//! the node keeps the two parts.

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
use crate::reference::conv_spec::Conv3dSpec;
use crate::reference::norm::{GroupNormSpec, NormInput};

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

/// The parents' checkpoints (x or the first part, gamma, beta, the weight, and the shift or
/// the second part where there is one), the normalisation's statistics (mean, rstd), whether
/// the input is two parts, and both specs.
type State<B> = (Vec<NodeId>, NormConvState<B>);
type NormConvState<B> = ([FloatTensor<B>; 2], bool, GroupNormSpec, Conv3dSpec);

/// [`KernelBackend::norm_conv3d`] on the autodiff backend: a node of parents x (or the first
/// part), gamma, beta, the weight and, where there is one, the shift (or the second part).
pub(super) fn norm_conv_node<B: KernelBackend, C: CheckpointStrategy>(
    input: NormInput<FloatTensor<Autodiff<B, C>>>,
    [gamma, beta, weight]: [FloatTensor<Autodiff<B, C>>; 3],
    norm: GroupNormSpec,
    conv: Conv3dSpec,
) -> FloatTensor<Autodiff<B, C>> {
    let parts = input.is_parts();
    let forward = move |x, second, gamma, beta, weight| {
        let input = NormInput::from_pair(x, second, parts);
        let out = B::group_norm_forward(input, gamma, beta, norm);
        let y = conv_in_layout::<B>(out.y, weight, conv);
        (y, ([out.mean, out.rstd], parts, norm, conv))
    };
    match input.into_pair() {
        (x, None) => node_of::<B, C, _, _, 4>(
            NormConvBackward,
            [x, gamma, beta, weight],
            Keep::Parents,
            |[x, gamma, beta, weight]| forward(x, None, gamma, beta, weight),
        ),
        (x, Some(second)) => node_of::<B, C, _, _, 5>(
            NormConvBackward,
            [x, gamma, beta, weight, second],
            Keep::Parents,
            |[x, gamma, beta, weight, second]| forward(x, Some(second), gamma, beta, weight),
        ),
    }
}

/// The node's backward from its output's gradient: the normalisation's output recomputed as
/// the forward pass computed it, for the convolution's gradients; the parents' gradients in
/// the parents' order.
fn norm_conv_grads<B: KernelBackend>(
    mut parents: Parents<'_, B>,
    grad: FloatTensor<B>,
    ([mean, rstd], parts, norm, conv): NormConvState<B>,
) {
    let mut next = || parents.next();
    let (x, gamma, beta, weight) = (next(), next(), next(), next());
    let input = NormInput::from_pair(x, parents.next_if_any(), parts);
    let y = B::group_norm_forward(input.clone(), gamma.clone(), beta.clone(), norm).y;
    let (dw, dy) = conv_grads::<B>(y, weight, grad, conv);
    let g = B::group_norm_backward(input, gamma, beta, mean, rstd, dy, norm);
    let (dx, second) = g.input.into_pair();
    parents.register_each([dx, g.gamma, g.beta, dw].into_iter().chain(second));
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
