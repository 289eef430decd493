//! Channels-last activations for callers and tests.

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use crate::compute::Layout;

/// `[b, c, d, h, w]` -> a contiguous `[b, d, h, w, c]` tensor. A permuted view is not enough
/// where the next operation should read channels-last memory: reshaping the non-contiguous
/// view copies it into the new order.
pub fn channels_last<B: Backend>(x: Tensor<B, 5>) -> Tensor<B, 5> {
    let [b, c, d, h, w] = x.dims();
    x.permute([0, 2, 3, 4, 1])
        .reshape([b, d * h * w, c])
        .reshape([b, d, h, w, c])
}

/// Channels-last helper for callers and tests: `[b, c, d, h, w]` as the permuted view of a
/// contiguous `[b, d, h, w, c]` buffer when `layout` is channels-last.
pub fn in_layout<B: Backend>(x: Tensor<B, 5>, layout: Layout) -> Tensor<B, 5> {
    match layout {
        Layout::Ncdhw => x,
        Layout::Ndhwc => channels_last(x).permute([0, 4, 1, 2, 3]),
    }
}
