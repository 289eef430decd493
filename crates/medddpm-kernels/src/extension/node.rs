//! What the hand-written autodiff nodes share: a node that keeps its parents as checkpoints,
//! and its backward's first and last steps.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, OpsKind};
use burn::backend::autodiff::NodeId;
use burn::backend::Autodiff;
use burn::tensor::ops::FloatTensor;

use super::KernelBackend;

/// A node of `N` parents that keeps all of them (as checkpoints) and the extra state `forward`
/// returns beside its output, given their primitives; untracked, only the output.
pub(super) fn checkpointing_node<B, C, K, X, const N: usize>(
    node: K,
    inputs: [FloatTensor<Autodiff<B, C>>; N],
    forward: impl FnOnce([FloatTensor<B>; N]) -> (FloatTensor<B>, X),
) -> FloatTensor<Autodiff<B, C>>
where
    B: KernelBackend,
    C: CheckpointStrategy,
    K: Backward<B, N, State = (Vec<NodeId>, X)>,
    X: Clone + Send + std::fmt::Debug + 'static,
{
    let parents = inputs.each_ref().map(|t| t.node.clone());
    match node.prepare::<C>(parents).compute_bound().stateful() {
        OpsKind::Tracked(mut prep) => {
            let states = inputs.iter().map(|t| prep.checkpoint(t)).collect();
            let (out, extra) = forward(inputs.map(|t| t.primitive));
            prep.finish((states, extra), out)
        }
        OpsKind::UnTracked(prep) => prep.finish(forward(inputs.map(|t| t.primitive)).0),
    }
}

/// The parents' tensors from the checkpoints a [`checkpointing_node`] kept, in order.
pub(super) fn retrieve<B: KernelBackend>(
    states: Vec<NodeId>,
    checkpointer: &mut Checkpointer,
) -> impl Iterator<Item = FloatTensor<B>> + '_ {
    states
        .into_iter()
        .map(|id| checkpointer.retrieve_node_output::<B::FloatTensorPrimitive>(id))
}

/// Each of `tensors` as the gradient of the parent in its position, where that parent needs
/// one.
pub(super) fn register_each<B: KernelBackend>(
    grads: &mut Gradients,
    parents: &[Option<NodeId>],
    tensors: impl IntoIterator<Item = FloatTensor<B>>,
) {
    for (parent, t) in parents.iter().zip(tensors) {
        if let Some(id) = parent {
            grads.register::<B>(*id, t);
        }
    }
}
