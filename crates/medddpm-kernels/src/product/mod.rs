//! Matrix products as a backend extension: the U-Net's 1x1x1 convolutions (channels-last, a
//! product of the voxels-by-channels matrix with the kernel) and its attention, with their
//! gradients.
//!
//! burn 0.21's CUDA products took 10.4 ms of a 128^3 bf16 training step on an H200 (124
//! launches, 2026-11-28), PyTorch's 2.3 ms: the [`KernelBackend::product`] of burn's CUDA
//! backend calls cuBLAS (module `cublas`) when the convolutions go to cuDNN; every other
//! backend keeps burn's `matmul`, the reference twin ([`reference::product`]). The autodiff
//! backend's backward pass is two more products of the same kind, so training runs on the same
//! engine.
//!
//! Its parts: [`ProductSpec`], [`product`] (the call on tensors), [`reference`](mod@reference)
//! and `check` ([`engine_vs_reference`]).

mod check;
pub(crate) mod plan;
pub mod reference;

use burn::tensor::Tensor;

pub use check::{cases, engine_vs_reference};

use crate::compute::Compute;
use crate::conv::KernelBackend;
use crate::primitive::{float, tensor};

/// One product `op(a) · op(b)` of `[batch, rows, cols]` operands, `op` transposing the last
/// two axes where asked (so that callers pass a transposed operand as it is stored, and
/// cuBLAS reads it in place).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProductSpec {
    /// Transpose `a`.
    pub trans_a: bool,
    /// Transpose `b`.
    pub trans_b: bool,
    /// Precision and engine: cuBLAS computes it where the convolutions go to cuDNN.
    pub compute: Compute,
}

impl ProductSpec {
    /// `a · b` with `compute`.
    pub fn plain(compute: Compute) -> Self {
        ProductSpec {
            trans_a: false,
            trans_b: false,
            compute,
        }
    }

    /// The same product with other transpositions.
    pub fn with(self, trans_a: bool, trans_b: bool) -> Self {
        ProductSpec {
            trans_a,
            trans_b,
            ..self
        }
    }

    /// `(m, k, n)` of `op(a) · op(b)` for operands of these shapes, or why they do not
    /// multiply (different batches, inner sizes that differ).
    pub fn sizes(&self, a: [usize; 3], b: [usize; 3]) -> Result<(usize, usize, usize), String> {
        let (m, k) = if self.trans_a {
            (a[2], a[1])
        } else {
            (a[1], a[2])
        };
        let (k_b, n) = if self.trans_b {
            (b[2], b[1])
        } else {
            (b[1], b[2])
        };
        if a[0] != b[0] {
            return Err(format!("batches differ: {a:?} and {b:?}"));
        }
        if k != k_b {
            return Err(format!(
                "inner sizes differ: {a:?} and {b:?} with transpositions ({}, {})",
                self.trans_a, self.trans_b
            ));
        }
        Ok((m, k, n))
    }
}

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
