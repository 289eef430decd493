//! Between burn's `Tensor` and the backend primitives that the methods of
//! `KernelBackend` take and return (used by the trait, its reference
//! twins and the engines alike, so it sits below all of them).

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorPrimitive};

/// A float tensor's primitive.
pub fn float<B: Backend, const D: usize>(t: Tensor<B, D>) -> FloatTensor<B> {
    t.into_primitive().tensor()
}

/// A float primitive as a tensor of rank `D`.
pub fn tensor<B: Backend, const D: usize>(t: FloatTensor<B>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(t))
}
