//! One tensor's Adam update through [`KernelBackend`].

use burn::tensor::{Tensor, TensorPrimitive};

use crate::extension::KernelBackend;
use crate::reference::adam::{AdamStep, AdamTensors};

/// [`crate::KernelBackend::adam_steps`] on one tensor: `[param, moment_1, moment_2]` after one
/// update with gradient `grad` (parameter and moments of one shape and dtype; the gradient of
/// that shape, in that dtype or a lower one).
pub fn adam_step<B: KernelBackend, const D: usize>(
    param: Tensor<B, D>,
    grad: Tensor<B, D>,
    moment_1: Tensor<B, D>,
    moment_2: Tensor<B, D>,
    step: AdamStep,
) -> [Tensor<B, D>; 3] {
    let prim = |t: Tensor<B, D>| t.into_primitive().tensor();
    let item = AdamTensors {
        param: prim(param),
        grad: prim(grad),
        moment_1: prim(moment_1),
        moment_2: prim(moment_2),
        recycle: None,
    };
    let out = B::adam_steps(vec![item], step, None)
        .pop()
        .expect("one update per item");
    out.updated
        .map(|t| Tensor::from_primitive(TensorPrimitive::Float(t)))
}
