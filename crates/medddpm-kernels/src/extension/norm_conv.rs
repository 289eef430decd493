//! [`KernelBackend::norm_conv3d`] on the autodiff backend: a GroupNorm + SiLU and the
//! convolution after it as one node that keeps the normalisation's input and statistics, not
//! its output. The backward pass recomputes that output (one more normalisation pass) for the
//! convolution's two gradients; at 128^3 a ResBlock so keeps two activations fewer.
//!
//! Of [`NormInput::Parts`] (the decoder's [current, skip]) the normalisation reads the two
//! parts ([`KernelBackend::group_norm_parts_forward`]): the join of the inputs is never made,
//! and the node keeps the two parts.

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
use crate::reference::norm::{GroupNormOutput, GroupNormSpec, NormInput};

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
/// gamma, beta and the weight), the normalisation's statistics (mean, rstd), whether the input
/// came in two parts, and both specs.
type State<B> = (Vec<NodeId>, NormConvState<B>);
type NormConvState<B> = ([FloatTensor<B>; 2], Input, GroupNormSpec, Conv3dSpec);

/// Which [`NormInput`] the node normalised.
#[derive(Debug, Clone, Copy)]
enum Input {
    Shifted,
    Parts,
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
    let state = |out: GroupNormOutput<B>, weight, input| {
        let y = conv_in_layout::<B>(out.y, weight, conv);
        (y, ([out.mean, out.rstd], input, norm, conv))
    };
    match input {
        NormInput::Shifted(x, None) => node_of::<B, C, _, _, 4>(
            NormConvBackward,
            [x, gamma, beta, weight],
            Keep::Parents,
            |[x, gamma, beta, weight]| {
                let out = B::group_norm_forward(x, None, gamma, beta, norm);
                state(out, weight, Input::Shifted)
            },
        ),
        NormInput::Shifted(x, Some(shift)) => node_of::<B, C, _, _, 5>(
            NormConvBackward,
            [x, gamma, beta, weight, shift],
            Keep::Parents,
            |[x, gamma, beta, weight, shift]| {
                let out = B::group_norm_forward(x, Some(shift), gamma, beta, norm);
                state(out, weight, Input::Shifted)
            },
        ),
        NormInput::Parts(a, b) => node_of::<B, C, _, _, 5>(
            NormConvBackward,
            [a, b, gamma, beta, weight],
            Keep::Parents,
            |[a, b, gamma, beta, weight]| {
                let out = B::group_norm_parts_forward(a, b, gamma, beta, norm);
                state(out, weight, Input::Parts)
            },
        ),
    }
}

/// The node's backward from its output's gradient: the normalisation's output recomputed as
/// the forward pass computed it, for the convolution's gradients; the parents' gradients in
/// the parents' order.
fn norm_conv_grads<B: KernelBackend>(
    mut parents: Parents<'_, B>,
    grad: FloatTensor<B>,
    ([mean, rstd], input, norm, conv): NormConvState<B>,
) {
    let mut next = || parents.next();
    let each = match input {
        Input::Shifted => {
            let (x, gamma, beta, weight) = (next(), next(), next(), next());
            let shift = parents.next_if_any();
            let y =
                B::group_norm_forward(x.clone(), shift.clone(), gamma.clone(), beta.clone(), norm)
                    .y;
            let (dw, dy) = conv_grads::<B>(y, weight, grad, conv);
            let g = B::group_norm_backward(x, shift, gamma, beta, mean, rstd, dy, norm);
            [g.x, g.gamma, g.beta, dw]
                .into_iter()
                .chain(g.shift)
                .collect::<Vec<_>>()
        }
        Input::Parts => {
            let (a, b, gamma, beta, weight) = (next(), next(), next(), next(), next());
            let y = B::group_norm_parts_forward(
                a.clone(),
                b.clone(),
                gamma.clone(),
                beta.clone(),
                norm,
            )
            .y;
            let (dw, dy) = conv_grads::<B>(y, weight, grad, conv);
            let g = B::group_norm_parts_backward(a, b, gamma, beta, mean, rstd, dy, norm);
            let [da, db] = g.parts;
            vec![da, db, g.gamma, g.beta, dw]
        }
    };
    parents.register_each(each);
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
