//! Joining two activations along the last axis (the decoder's skip concatenation in
//! channels-last memory) and splitting a gradient back, as one backend-extension operation
//! each. burn's `cat` writes each part with its own strided kernel, and autodiff's backward
//! takes each part's gradient with a slice that cannot be a view (a channel offset is not a
//! multiple of the CUDA pool's 512-byte alignment), so it copies with a one-element-per-thread
//! kernel: 2.9 ms of a bf16 whole-head training step on an H200 (twenty-first session). The
//! CubeCL kernels copy vectors of channels, one launch each way. Zero-padding channels (a
//! small convolution widened for cuDNN) is one more such copy: burn's `cat` with a tensor of
//! zeros took three launches, two of them one element per thread, 1.5 ms a training step.

pub mod reference;

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use crate::conv::KernelBackend;
use crate::primitive::{float, tensor};

/// `[.., ca]` and `[.., cb]` joined into `[.., ca + cb]` (every other axis equal), through the
/// backend extension ([`KernelBackend::cat_last`]).
pub fn cat_last<B: KernelBackend, const D: usize>(
    a: Tensor<B, D>,
    b: Tensor<B, D>,
) -> Tensor<B, D> {
    tensor(B::cat_last(float(a), float(b)))
}

/// `x` `[.., c]` split into `[.., first]` and `[.., c - first]` (contiguous tensors).
pub fn split_last<B: KernelBackend, const D: usize>(
    x: Tensor<B, D>,
    first: usize,
) -> [Tensor<B, D>; 2] {
    B::split_last(float(x), first).map(tensor)
}

/// `x` `[.., c]` with zero channels added up to `channels` (a small convolution's input or
/// gradient widened for cuDNN's tensor-core kernels), through the backend extension
/// ([`KernelBackend::pad_last`]).
pub fn pad_last<B: KernelBackend, const D: usize>(
    x: Tensor<B, D>,
    channels: usize,
) -> Tensor<B, D> {
    tensor(B::pad_last(float(x), channels))
}

/// Relative L2 differences of backend `B`'s join and split against the plain-op twins, for
/// parts of `first` and `second` channels over `rows` rows, in `dtype`: `[join, split]`
/// (exact copies, so 0 when right; the split's figure includes padding `first` channels with
/// zeros to `first + second`).
pub fn engine_vs_reference<B: KernelBackend>(
    device: &B::Device,
    rows: usize,
    first: usize,
    second: usize,
    dtype: burn::tensor::DType,
    seed: u64,
) -> [f64; 2] {
    use burn::backend::Flex;
    use burn::tensor::{DType, Distribution};
    let cpu = Default::default();
    Flex::seed(&cpu, seed);
    let round = |t: Tensor<Flex, 2>| crate::cast_to(crate::cast_to(t, dtype), DType::F32);
    let draw = |c: usize| {
        round(Tensor::<Flex, 2>::random(
            [rows, c],
            Distribution::Default,
            &cpu,
        ))
    };
    let (a, b) = (draw(first), draw(second));
    let joined = draw(first + second);
    let want_cat = reference::cat_last(a.clone(), b.clone());
    let want_split = reference::split_last(joined.clone(), first);
    let on =
        |t: &Tensor<Flex, 2>| crate::cast_to(Tensor::<B, 2>::from_data(t.to_data(), device), dtype);
    let back = |t: Tensor<B, 2>| {
        Tensor::<Flex, 2>::from_data(crate::cast_to(t, DType::F32).to_data(), &cpu)
    };
    let got_cat = back(cat_last(on(&a), on(&b)));
    let [ga, gb] = split_last(on(&joined), first).map(back);
    let split = Tensor::cat(vec![ga, gb], 1);
    let want_split = Tensor::cat(want_split.to_vec(), 1);
    let padded = first + second;
    let got_pad = back(pad_last(on(&a), padded));
    let want_pad = reference::cat_last(a, Tensor::zeros([rows, second], &cpu));
    [
        crate::conv::rel_l2(got_cat, want_cat),
        crate::conv::rel_l2(split, want_split) + crate::conv::rel_l2(got_pad, want_pad),
    ]
}

/// The plain-op bodies for backends without kernels (rank-free, on primitives).
pub(crate) fn cat_last_primitive<B: Backend>(
    a: burn::tensor::ops::FloatTensor<B>,
    b: burn::tensor::ops::FloatTensor<B>,
) -> burn::tensor::ops::FloatTensor<B> {
    use burn::tensor::TensorMetadata;
    let dim = a.shape().num_dims() - 1;
    B::float_cat(vec![a, b], dim)
}

/// `x` `[.., c]` with zero channels added up to `channels` (plain ops).
pub(crate) fn pad_last_primitive<B: Backend>(
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

/// See [`cat_last_primitive`].
pub(crate) fn split_last_primitive<B: Backend>(
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

#[cfg(test)]
mod tests;
