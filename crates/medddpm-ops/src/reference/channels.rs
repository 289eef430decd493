//! The plain-op twins of the join, the split and the padding (burn's `cat`, slices and zeros),
//! on primitives (the trait's provided bodies) and on tensors.

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use crate::primitive::{float, tensor};

/// `[.., ca]` and `[.., cb]` joined along the last axis.
pub fn cat_last<B: Backend, const D: usize>(a: Tensor<B, D>, b: Tensor<B, D>) -> Tensor<B, D> {
    tensor(cat_last_primitive::<B>(float(a), float(b)))
}

/// `x` `[.., c]` split into its first `first` channels and the rest.
pub fn split_last<B: Backend, const D: usize>(x: Tensor<B, D>, first: usize) -> [Tensor<B, D>; 2] {
    split_last_primitive::<B>(float(x), first).map(tensor)
}

/// `x` `[.., c]` with zero channels added up to `channels`.
pub fn pad_last<B: Backend, const D: usize>(x: Tensor<B, D>, channels: usize) -> Tensor<B, D> {
    tensor(pad_last_primitive::<B>(float(x), channels))
}

/// The join on primitives (rank-free): burn's `cat`, the trait's provided body.
pub fn cat_last_primitive<B: Backend>(
    a: burn::tensor::ops::FloatTensor<B>,
    b: burn::tensor::ops::FloatTensor<B>,
) -> burn::tensor::ops::FloatTensor<B> {
    use burn::tensor::TensorMetadata;
    let dim = a.shape().num_dims() - 1;
    B::float_cat(vec![a, b], dim)
}

/// The padding on primitives: burn's `cat` with zeros.
pub fn pad_last_primitive<B: Backend>(
    x: burn::tensor::ops::FloatTensor<B>,
    channels: usize,
) -> burn::tensor::ops::FloatTensor<B> {
    use burn::tensor::TensorMetadata;
    let mut shape = x.shape();
    let last = shape.num_dims() - 1;
    assert!(
        channels >= shape[last],
        "padding {} channels to {channels}",
        shape[last]
    );
    shape[last] = channels - shape[last];
    let zeros = B::float_zeros(shape, &B::float_device(&x), x.dtype().into());
    B::float_cat(vec![x, zeros], last)
}

/// The split on primitives: burn's slices.
pub fn split_last_primitive<B: Backend>(
    x: burn::tensor::ops::FloatTensor<B>,
    first: usize,
) -> [burn::tensor::ops::FloatTensor<B>; 2] {
    use burn::tensor::{Slice, TensorMetadata};
    let shape = x.shape();
    let last = shape.num_dims() - 1;
    let c = shape[last];
    let part = |range: std::ops::Range<usize>| -> Vec<Slice> {
        (0..=last)
            .map(|i| match i == last {
                true => Slice::new(range.start as isize, Some(range.end as isize), 1),
                false => Slice::new(0, None, 1),
            })
            .collect()
    };
    [
        B::float_slice(x.clone(), &part(0..first)),
        B::float_slice(x, &part(first..c)),
    ]
}
