//! Matrix products as a backend extension: the U-Net's 1x1x1 convolutions (channels-last, a
//! product of the voxels-by-channels matrix with the kernel) and its attention, with their
//! gradients.
//!
//! burn's CUDA products took several times PyTorch's time for the same products (the
//! optimisation log has the figures), so the [`KernelBackend::product`] of burn's CUDA
//! backend calls cuBLAS (module `cublas`) when the convolutions go to cuDNN; every other
//! backend keeps burn's `matmul`, the reference twin ([`reference::product`]). The autodiff
//! backend's backward pass is two more products of the same kind, so training runs on the same
//! engine.
//!
//! Its parts: `spec` ([`ProductSpec`]), [`reference`](mod@reference) (the twin and the
//! backward pass's products) and `plan` (a row-major product as cuBLAS computes it), below the
//! trait; [`product`] and [`pointwise`] (the calls on tensors) and `check`
//! ([`engine_vs_reference`]) above it.

mod check;
pub use crate::reference::product as reference;

use burn::tensor::Tensor;

pub use crate::reference::product::spec::ProductSpec;
pub use check::{cases, engine_vs_reference};

use crate::compute::Compute;
use crate::extension::KernelBackend;
use crate::primitive::{float, tensor};

/// [`KernelBackend::product`] on tensors: `op(a) · op(b)`, `[batch, m, n]`.
///
/// # Panics
/// When the shapes do not multiply (a bug of the caller, like burn's `matmul`).
pub fn product<B: KernelBackend>(
    a: Tensor<B, 3>,
    b: Tensor<B, 3>,
    spec: ProductSpec,
) -> Tensor<B, 3> {
    if let Err(e) = spec.sizes(a.dims(), b.dims()) {
        panic!("product: {e}");
    }
    tensor(B::product(float(a), float(b), spec))
}

/// `x · weightᵀ` for tokens `x` `[batch, n, c_in]` and a kernel-size-1 convolution's weight
/// `[c_out, c_in]`: the batch folds into the rows, so that the weight's gradient is one
/// product over every token.
pub fn pointwise<B: KernelBackend>(
    x: Tensor<B, 3>,
    weight: Tensor<B, 2>,
    compute: Compute,
) -> Tensor<B, 3> {
    let [b, n, c_in] = x.dims();
    let [c_out, _] = weight.dims();
    let y = product(
        x.reshape([1, b * n, c_in]),
        weight.reshape([1, c_out, c_in]),
        ProductSpec::plain(compute).with(false, true),
    );
    y.reshape([b, n, c_out])
}

#[cfg(test)]
mod tests;
