//! Joining two activations along the last axis (the decoder's skip concatenation in
//! channels-last memory) and splitting a gradient back, as one backend-extension operation
//! each. burn's `cat` writes each part with its own strided kernel, and autodiff's backward
//! takes each part's gradient with a slice that cannot be a view (a channel offset is not a
//! multiple of the CUDA pool's 512-byte alignment), so it copies with a one-element-per-thread
//! kernel: 2.9 ms of a bf16 whole-head training step on an H200. The
//! CubeCL kernels copy vectors of channels, one launch each way. Zero-padding channels (a
//! small convolution widened for cuDNN) is one more such copy: burn's `cat` with a tensor of
//! zeros took three launches, two of them one element per thread, 1.5 ms a training step.

pub use crate::reference::channels as reference;

use burn::tensor::Tensor;

use crate::extension::KernelBackend;
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

/// Relative L2 differences of backend `B`'s join, split and padding against the plain-op
/// twins, for parts of `first` and `second` channels over `rows` rows (padding `first` channels
/// to `first + second`), in `dtype`: `[join, split, pad]` (exact copies, so 0 when right).
pub fn engine_vs_reference<B: KernelBackend>(
    device: &B::Device,
    rows: usize,
    first: usize,
    second: usize,
    dtype: burn::tensor::DType,
    seed: u64,
) -> [f64; 3] {
    use crate::agreement::{draw_rounded, on_cpu, on_device, seeded_cpu};
    use burn::tensor::Distribution;
    let cpu = seeded_cpu(seed);
    let draw = |c: usize| draw_rounded([rows, c], Distribution::Default, dtype, &cpu);
    let (a, b) = (draw(first), draw(second));
    let joined = draw(first + second);
    let want_cat = reference::cat_last(a.clone(), b.clone());
    let want_split = reference::split_last(joined.clone(), first);
    let on = |t| on_device::<B, 2>(t, device, dtype);
    let back = on_cpu::<B, 2>;
    let got_cat = back(cat_last(on(&a), on(&b)));
    let [ga, gb] = split_last(on(&joined), first).map(back);
    let split = Tensor::cat(vec![ga, gb], 1);
    let want_split = Tensor::cat(want_split.to_vec(), 1);
    let got_pad = back(pad_last(on(&a), first + second));
    let want_pad = reference::pad_last(a, first + second);
    [
        crate::agreement::rel_l2(got_cat, want_cat),
        crate::agreement::rel_l2(split, want_split),
        crate::agreement::rel_l2(got_pad, want_pad),
    ]
}

#[cfg(test)]
mod tests;
