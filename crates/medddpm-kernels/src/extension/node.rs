//! What the hand-written autodiff nodes share: a node that keeps its parents as checkpoints.

use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
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
