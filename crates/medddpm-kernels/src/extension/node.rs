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

/// What a node keeps of its parents for its backward pass.
pub(super) enum Keep {
    /// All of them, as checkpoints ([`Parents::next`] hands them back in order).
    Parents,
    /// None: the backward pass needs the output's gradient and the state alone.
    Nothing,
}

/// A node of `N` parents that keeps what `keep` says of them and the extra state `forward`
/// returns beside its output, given their primitives; untracked, only the output.
pub(super) fn node_of<B, C, K, X, const N: usize>(
    node: K,
    inputs: [FloatTensor<Autodiff<B, C>>; N],
    keep: Keep,
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
            let states = match keep {
                Keep::Parents => inputs.iter().map(|t| prep.checkpoint(t)).collect(),
                Keep::Nothing => Vec::new(),
            };
            let (out, extra) = forward(inputs.map(|t| t.primitive));
            prep.finish((states, extra), out)
        }
        OpsKind::UnTracked(prep) => prep.finish(forward(inputs.map(|t| t.primitive)).0),
    }
}

/// A node's parents in its backward pass: their values from the checkpoints a
/// [`node_of`] kept, retrieved in order as they are asked for, and where each one's gradient
/// goes.
pub(super) struct Parents<'a, B: KernelBackend> {
    states: std::vec::IntoIter<NodeId>,
    checkpointer: &'a mut Checkpointer,
    ids: &'a [Option<NodeId>],
    grads: &'a mut Gradients,
    backend: std::marker::PhantomData<B>,
}

impl<'a, B: KernelBackend> Parents<'a, B> {
    pub(super) fn new(
        states: Vec<NodeId>,
        ids: &'a [Option<NodeId>],
        grads: &'a mut Gradients,
        checkpointer: &'a mut Checkpointer,
    ) -> Self {
        Self {
            states: states.into_iter(),
            checkpointer,
            ids,
            grads,
            backend: std::marker::PhantomData,
        }
    }

    /// The next parent's value.
    pub(super) fn next(&mut self) -> FloatTensor<B> {
        self.next_if_any().expect("the parents' checkpoints")
    }

    /// The next parent's value where there is one (an optional last parent).
    pub(super) fn next_if_any(&mut self) -> Option<FloatTensor<B>> {
        let id = self.states.next()?;
        Some(
            self.checkpointer
                .retrieve_node_output::<B::FloatTensorPrimitive>(id),
        )
    }

    /// Whether parent `i` needs a gradient.
    pub(super) fn needs(&self, i: usize) -> bool {
        self.ids[i].is_some()
    }

    /// `t` as parent `i`'s gradient, where it needs one.
    pub(super) fn register(&mut self, i: usize, t: FloatTensor<B>) {
        if let Some(id) = self.ids[i] {
            self.grads.register::<B>(id, t);
        }
    }

    /// Each of `tensors` as the gradient of the parent in its position, where that parent
    /// needs one.
    pub(super) fn register_each(mut self, tensors: impl IntoIterator<Item = FloatTensor<B>>) {
        for (i, t) in tensors.into_iter().enumerate() {
            self.register(i, t);
        }
    }
}
