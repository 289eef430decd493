//! The plain-op twins of `medddpm_kernels::KernelBackend::sum_f32` (the micro-batches' gradients
//! summed in f32 for one optimizer step) and `squared_norm_f32` (the gradients' squared norm).

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Shape, Tensor, TensorMetadata, TensorPrimitive};

use crate::dtype::cast_to;

/// The plain-op twin: per pair `[a, b]` (one shape, any float dtypes), `f32(a) + f32(b)`.
pub fn sum_f32_primitive<B: Backend>(pairs: Vec<[FloatTensor<B>; 2]>) -> Vec<FloatTensor<B>> {
    pairs
        .into_iter()
        .map(|[a, b]| {
            let shape = a.shape();
            assert_eq!(
                shape,
                b.shape(),
                "sum_f32: the two tensors of a pair differ in shape"
            );
            let sum = cast_to(flat::<B>(a), DType::F32) + cast_to(flat::<B>(b), DType::F32);
            B::float_reshape(sum.into_primitive().tensor(), shape)
        })
        .collect()
}

/// The plain-op twin: the sum of `f32(x)^2` over every value of `tensors` (at least one), a
/// one-value f32 tensor.
pub fn squared_norm_f32_primitive<B: Backend>(tensors: Vec<FloatTensor<B>>) -> FloatTensor<B> {
    tensors
        .into_iter()
        .map(|t| {
            let t = cast_to(flat::<B>(t), DType::F32);
            t.clone().mul(t).sum()
        })
        .reduce(|a, b| a + b)
        .expect("squared_norm_f32: no tensors")
        .into_primitive()
        .tensor()
}

/// A primitive viewed as a vector.
fn flat<B: Backend>(t: FloatTensor<B>) -> Tensor<B, 1> {
    let n = t.shape().num_elements();
    Tensor::from_primitive(TensorPrimitive::Float(B::float_reshape(t, Shape::new([n]))))
}
