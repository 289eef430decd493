//! [`KernelBackend::norm_conv3d`] on the autodiff backend: a GroupNorm + SiLU and the
//! convolution after it as one node that keeps the normalisation's input and statistics, not
//! its output. The backward pass recomputes that output (one more normalisation pass) for the
//! convolution's two gradients; at 128^3 a ResBlock so keeps two activations fewer.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops};
use burn::backend::autodiff::NodeId;
use burn::backend::Autodiff;
use burn::tensor::ops::FloatTensor;

use super::node::{checkpointing_node, register_each, retrieve};
use super::KernelBackend;
use crate::compute::Layout;
use crate::reference::conv_spec::Conv3dSpec;
use crate::reference::norm::GroupNormSpec;

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
pub(super) struct NormConvBackward;

/// The parents' checkpoints (x, gamma, beta, weight and the shift where there is one), the
/// statistics and both specs.
type State<B> = (
    Vec<NodeId>,
    (FloatTensor<B>, FloatTensor<B>, GroupNormSpec, Conv3dSpec),
);

/// The node of `norm_conv3d` with `N` parents: x, gamma, beta, weight (and the shift, with 5).
pub(super) fn norm_conv_op<B, C, const N: usize>(
    inputs: [FloatTensor<Autodiff<B, C>>; N],
    norm: GroupNormSpec,
    conv: Conv3dSpec,
) -> FloatTensor<Autodiff<B, C>>
where
    B: KernelBackend,
    C: CheckpointStrategy,
    NormConvBackward: Backward<B, N, State = State<B>>,
{
    checkpointing_node::<B, C, _, _, N>(NormConvBackward, inputs, |inputs| {
        let mut inputs = inputs.into_iter();
        let mut next = || inputs.next().expect("x, gamma, beta and the weight");
        let (x, gamma, beta, weight) = (next(), next(), next(), next());
        let out = B::group_norm_forward(x, inputs.next(), gamma, beta, norm);
        let y = conv_in_layout::<B>(out.y, weight, conv);
        (y, (out.mean, out.rstd, norm, conv))
    })
}

/// The backward of either node from its output's gradient.
fn norm_conv_grads<B: KernelBackend>(
    parents: &[Option<NodeId>],
    grad: FloatTensor<B>,
    state: State<B>,
    grads: &mut Gradients,
    checkpointer: &mut Checkpointer,
) {
    let (states, (mean, rstd, norm, conv)) = state;
    let mut inputs = retrieve::<B>(states, checkpointer);
    let mut next = || inputs.next().expect("the parents' checkpoints");
    let (x, gamma, beta, weight) = (next(), next(), next(), next());
    let shift = inputs.next();
    // The normalisation's output again, as the forward pass computed it.
    let y = B::group_norm_forward(x.clone(), shift.clone(), gamma.clone(), beta.clone(), norm).y;
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
    let g = B::group_norm_backward(x, shift, gamma, beta, mean, rstd, dy, norm);
    let each = [g.x, g.gamma, g.beta, dw].into_iter().chain(g.shift);
    register_each::<B>(grads, parents, each);
}

node_backward_impl!(NormConvBackward, State<B>, norm_conv_grads, 4, 5);
