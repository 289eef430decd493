//! Backpropagation from a tensor whose gradient is given, not 1: what activation
//! checkpointing needs to run the backward pass of one recomputed block at a time.
//!
//! burn's `backward` starts from ones; `(y * grad).sum().backward()` would do the same job but
//! keeps `y * grad` and builds a tensor of ones like `y` in the backward pass, two more
//! activations at the moment memory is tightest. Here the root is a one-element tensor whose
//! backward step hands `grad` straight to `y`.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::Autodiff;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::ops::FloatTensor;
use burn::tensor::{FloatDType, Tensor};

/// An autodiff backend that can start a backward pass from a given output gradient.
pub trait SeededBackward: AutodiffBackend {
    /// The gradients of everything `y` depends on, given `dL/dy = grad` (same shape and dtype
    /// as `y`). A `y` outside any graph gives gradients for nothing.
    fn backward_seeded(
        y: FloatTensor<Self>,
        grad: FloatTensor<Self::InnerBackend>,
    ) -> Self::Gradients;
}

impl<B: Backend, C: CheckpointStrategy> SeededBackward for Autodiff<B, C> {
    fn backward_seeded(y: FloatTensor<Self>, grad: FloatTensor<B>) -> Gradients {
        /// The root's step: `grad` to its one parent.
        #[derive(Debug)]
        struct Seed;

        impl<B: Backend> Backward<B, 1> for Seed {
            type State = FloatTensor<B>;

            fn backward(
                self,
                ops: Ops<Self::State, 1>,
                grads: &mut Gradients,
                _checkpointer: &mut Checkpointer,
            ) {
                let [parent] = ops.parents;
                if let Some(node) = parent {
                    grads.register::<B>(node.id, ops.state);
                }
            }
        }

        let device = B::float_device(&y.primitive);
        let root = B::float_zeros([1].into(), &device, FloatDType::F32);
        let root = match Seed
            .prepare::<C>([y.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish(grad, root),
            OpsKind::UnTracked(prep) => prep.finish(root),
        };
        <Self as AutodiffBackend>::backward(root)
    }
}

/// [`SeededBackward::backward_seeded`] on tensors.
pub fn backward_seeded<B: SeededBackward, const D: usize>(
    y: Tensor<B, D>,
    grad: Tensor<B::InnerBackend, D>,
) -> B::Gradients {
    B::backward_seeded(y.into_primitive().tensor(), grad.into_primitive().tensor())
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::tensor::{Distribution, TensorData};

    type A = Autodiff<Flex>;

    #[test]
    fn the_seed_is_the_output_gradient() {
        let device = Default::default();
        let x =
            Tensor::<A, 2>::random([3, 4], Distribution::Normal(0.0, 1.0), &device).require_grad();
        let w =
            Tensor::<A, 2>::random([4, 5], Distribution::Normal(0.0, 1.0), &device).require_grad();
        let g = Tensor::<Flex, 2>::random([3, 5], Distribution::Normal(0.0, 1.0), &device);
        // d/dx sum(g * (x w)) = g w^T and d/dw = x^T g, through burn's own backward.
        let want = x
            .clone()
            .matmul(w.clone())
            .mul(Tensor::from_inner(g.clone()))
            .sum()
            .backward();
        let got = backward_seeded(x.clone().matmul(w.clone()), g);
        for (a, b) in [
            (x.grad(&got).unwrap(), x.grad(&want).unwrap()),
            (w.grad(&got).unwrap(), w.grad(&want).unwrap()),
        ] {
            a.into_data().assert_eq(&b.into_data(), true);
        }
    }

    #[test]
    fn an_untracked_output_has_no_gradients() {
        let device = Default::default();
        let x = Tensor::<A, 1>::from_data(TensorData::from([1.0f32, 2.0]), &device);
        let grads = backward_seeded(x.clone() * 2.0, Tensor::ones([2], &device));
        assert!(x.grad(&grads).is_none());
    }
}
