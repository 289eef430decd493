//! The plain-op twins of the join and split: burn's `cat` and `narrow`.

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

/// `[.., ca]` and `[.., cb]` joined along the last axis.
pub fn cat_last<B: Backend, const D: usize>(a: Tensor<B, D>, b: Tensor<B, D>) -> Tensor<B, D> {
    Tensor::cat(vec![a, b], D - 1)
}

/// `x` `[.., c]` split into its first `first` channels and the rest.
pub fn split_last<B: Backend, const D: usize>(x: Tensor<B, D>, first: usize) -> [Tensor<B, D>; 2] {
    let c = x.dims()[D - 1];
    [
        x.clone().narrow(D - 1, 0, first),
        x.narrow(D - 1, first, c - first),
    ]
}
