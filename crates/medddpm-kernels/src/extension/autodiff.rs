//! The autodiff backend's hand-written backward passes: the convolution's calls the inner
//! backend's two gradient methods (so training uses the forward pass's engine), GroupNorm's
//! keeps only the input and the statistics, and the upsampling's runs the adjoint kernel.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops};
use burn::backend::autodiff::NodeId;
use burn::backend::Autodiff;
use burn::tensor::ops::FloatTensor;

use super::backward_profile;
use super::node::{node_of, Keep, Parents};
use super::{KernelBackend, MemoryStats, NormInput};
use crate::compute::Layout;
use crate::reference::conv_spec::Conv3dSpec;
use crate::reference::norm::GroupNormSpec;
use crate::reference::product::backward_plan;
use crate::reference::product::spec::ProductSpec;

impl<B: KernelBackend, C: CheckpointStrategy> KernelBackend for Autodiff<B, C> {
    fn memory_usage(device: &Self::Device) -> Option<MemoryStats> {
        B::memory_usage(device)
    }

    fn host_bytes(device: &Self::Device, parts: &[&[u8]]) -> Option<burn::tensor::Bytes> {
        B::host_bytes(device, parts)
    }

    fn float_from_host(data: burn::tensor::TensorData, device: &Self::Device) -> FloatTensor<Self> {
        use burn::tensor::backend::AutodiffBackend as _;
        Self::from_inner(B::float_from_host(data, device))
    }

    fn conv3d_forward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        spec: Conv3dSpec,
    ) -> FloatTensor<Self> {
        node_of::<B, C, _, _, 2>(Conv3dBackward, [x, weight], Keep::Parents, |[x, weight]| {
            (B::conv3d_forward(x, weight, spec), spec)
        })
    }

    fn group_norm(
        input: NormInput<FloatTensor<Self>>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        spec: GroupNormSpec,
    ) -> FloatTensor<Self> {
        let parts = input.is_parts();
        match input.into_pair() {
            (x, None) => group_norm_op::<B, C, 3>([x, gamma, beta], spec, parts),
            (x, Some(second)) => group_norm_op::<B, C, 4>([x, gamma, beta, second], spec, parts),
        }
    }

    fn norm_conv3d(
        input: NormInput<FloatTensor<Self>>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        norm: GroupNormSpec,
        weight: FloatTensor<Self>,
        conv: Conv3dSpec,
    ) -> FloatTensor<Self> {
        super::norm_conv::norm_conv_node::<B, C>(input, [gamma, beta, weight], norm, conv)
    }

    fn upsample_trilinear_x2(x: FloatTensor<Self>, layout: Layout) -> FloatTensor<Self> {
        node_of::<B, C, _, _, 1>(UpsampleBackward, [x], Keep::Nothing, |[x]| {
            (B::upsample_trilinear_x2(x, layout), layout)
        })
    }

    fn cat_last(a: FloatTensor<Self>, b: FloatTensor<Self>) -> FloatTensor<Self> {
        use burn::tensor::TensorMetadata;
        let shape = a.primitive.shape();
        let first = shape[shape.num_dims() - 1];
        node_of::<B, C, _, _, 2>(CatLastBackward, [a, b], Keep::Nothing, |[a, b]| {
            (B::cat_last(a, b), first)
        })
    }

    fn split_last(x: FloatTensor<Self>, first: usize) -> [FloatTensor<Self>; 2] {
        // Only the join's backward splits; a split under autodiff is two plain slices.
        crate::reference::channels::split_last_primitive::<Self>(x, first)
    }

    fn product(a: FloatTensor<Self>, b: FloatTensor<Self>, spec: ProductSpec) -> FloatTensor<Self> {
        node_of::<B, C, _, _, 2>(ProductBackward, [a, b], Keep::Parents, |[a, b]| {
            (B::product(a, b, spec), spec)
        })
    }

    // The other gradient methods keep their provided bodies (burn's own ops, which autodiff
    // differentiates): nothing here needs second-order gradients.
}

/// The upsampling's node: no parent kept, the layout.
#[derive(Debug)]
struct UpsampleBackward;

/// The upsampling's backward: the adjoint kernel.
fn upsample_grads<B: KernelBackend>(
    mut parents: Parents<'_, B>,
    grad: FloatTensor<B>,
    layout: Layout,
) {
    if parents.needs(0) {
        parents.register(0, B::upsample_trilinear_x2_backward(grad, layout));
    }
}

node_backward_impl!(UpsampleBackward, (Vec<NodeId>, Layout), upsample_grads, 1);

/// The channel join's node: no parent kept, the first part's channels.
#[derive(Debug)]
struct CatLastBackward;

/// The join's backward: its gradient split at the first part's channels.
fn cat_last_grads<B: KernelBackend>(parents: Parents<'_, B>, grad: FloatTensor<B>, first: usize) {
    parents.register_each(B::split_last(grad, first));
}

node_backward_impl!(CatLastBackward, (Vec<NodeId>, usize), cat_last_grads, 2);

/// The node of a GroupNorm: parents x (or the first part), gamma, beta and, where there is
/// one, the shift (or the second part); its state is the parents' checkpoints, the statistics,
/// the spec and whether the input is two parts.
#[derive(Debug)]
struct GroupNormBackward;

type GroupNormState<B> = (
    Vec<NodeId>,
    (FloatTensor<B>, FloatTensor<B>, GroupNormSpec, bool),
);

/// A GroupNorm of `inputs` (x or the first part, gamma, beta and, with `N` = 4, the shift or
/// the second part, as `parts` says) as a node of `N` parents (or untracked).
fn group_norm_op<B, C, const N: usize>(
    inputs: [FloatTensor<Autodiff<B, C>>; N],
    spec: GroupNormSpec,
    parts: bool,
) -> FloatTensor<Autodiff<B, C>>
where
    B: KernelBackend,
    C: CheckpointStrategy,
    GroupNormBackward: Backward<B, N, State = GroupNormState<B>>,
{
    node_of::<B, C, _, _, N>(GroupNormBackward, inputs, Keep::Parents, |inputs| {
        let mut inputs = inputs.into_iter();
        let mut next = || inputs.next().expect("x, gamma and beta");
        let (x, gamma, beta) = (next(), next(), next());
        let input = NormInput::from_pair(x, inputs.next(), parts);
        let out = B::group_norm_forward(input, gamma, beta, spec);
        (out.y, (out.mean, out.rstd, spec, parts))
    })
}

/// The backward of the node from its output's gradient, the parents in the order above.
fn group_norm_grads<B: KernelBackend>(
    mut parents: Parents<'_, B>,
    grad: FloatTensor<B>,
    (mean, rstd, spec, parts): (FloatTensor<B>, FloatTensor<B>, GroupNormSpec, bool),
) {
    let (x, gamma, beta) = (parents.next(), parents.next(), parents.next());
    let input = NormInput::from_pair(x, parents.next_if_any(), parts);
    let g = B::group_norm_backward(input, gamma, beta, mean, rstd, grad, spec);
    let (dx, second) = g.input.into_pair();
    parents.register_each([dx, g.gamma, g.beta].into_iter().chain(second));
}

node_backward_impl!(GroupNormBackward, GroupNormState<B>, group_norm_grads, 3, 4);

/// The convolution's node: parents x and the weight, kept as checkpoints, and the spec.
#[derive(Debug)]
struct Conv3dBackward;

/// The convolution's backward: the inner backend's two gradient methods.
fn conv3d_grads<B: KernelBackend>(
    mut parents: Parents<'_, B>,
    grad: FloatTensor<B>,
    spec: Conv3dSpec,
) {
    let (x, weight) = (parents.next(), parents.next());
    let timer = backward_profile::Timer::<B>::start(&x);
    if parents.needs(0) {
        let dx = B::conv3d_data_grad(x.clone(), weight.clone(), grad.clone(), spec);
        parents.register(0, timer.lap(0, dx));
    }
    if parents.needs(1) {
        let dw = B::conv3d_weight_grad(x, weight, grad, spec);
        parents.register(1, timer.lap(1, dw));
    }
}

node_backward_impl!(Conv3dBackward, (Vec<NodeId>, Conv3dSpec), conv3d_grads, 2);

/// The product's node: parents a and b, kept as checkpoints, and the spec.
#[derive(Debug)]
struct ProductBackward;

/// The product's backward: a product per operand that needs a gradient.
fn product_grads<B: KernelBackend>(
    mut parents: Parents<'_, B>,
    grad: FloatTensor<B>,
    spec: ProductSpec,
) {
    let (a, b) = (parents.next(), parents.next());
    let (da, db) = backward_plan(spec);
    if parents.needs(0) {
        let (first, second) = da.operands(grad.clone(), b);
        parents.register(0, B::product(first, second, da.spec));
    }
    if parents.needs(1) {
        let (first, second) = db.operands(grad, a);
        parents.register(1, B::product(first, second, db.spec));
    }
}

node_backward_impl!(
    ProductBackward,
    (Vec<NodeId>, ProductSpec),
    product_grads,
    2
);
