//! The plain-op twin of `KernelBackend::product`: burn's
//! `matmul` on the transposed views, and the products of its backward pass.

pub mod plan;
pub mod spec;

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::Tensor;

use crate::primitive::{float, tensor};
use spec::ProductSpec;

/// `op(a) · op(b)` with burn's `matmul`.
pub fn product<B: Backend>(a: Tensor<B, 3>, b: Tensor<B, 3>, spec: ProductSpec) -> Tensor<B, 3> {
    let a = if spec.trans_a { a.swap_dims(1, 2) } else { a };
    let b = if spec.trans_b { b.swap_dims(1, 2) } else { b };
    a.matmul(b)
}

/// [`product`] on primitives (the trait's provided body), with a long inner size over few
/// outputs (a 1x1x1 convolution's weight gradient, a sum over every voxel) split into batches
/// of at least [`MIN_CHUNK`] and summed: burn runs one product with few outputs in one or two
/// thread blocks, however long its inner size (over the 2M voxels of a 128^3 volume, tens of
/// milliseconds), while the batches spread over the whole GPU.
pub fn product_primitive<B: Backend>(
    a: FloatTensor<B>,
    b: FloatTensor<B>,
    spec: ProductSpec,
) -> FloatTensor<B> {
    let (a, b): (Tensor<B, 3>, Tensor<B, 3>) = (tensor(a), tensor(b));
    let [batch, k, m] = a.dims();
    let n = b.dims()[2];
    let chunks = chunks_of(k);
    if batch == 1 && spec.trans_a && !spec.trans_b && chunks > 1 {
        // a is stored [k, m] and b [k, n]: both split along their rows without a copy.
        let a = a.reshape([chunks, k / chunks, m]).swap_dims(1, 2);
        let b = b.reshape([chunks, k / chunks, n]);
        return float(a.matmul(b).sum_dim(0));
    }
    float(product::<B>(a, b, spec))
}

/// Fewest rows of a batch in [`product_primitive`]'s split.
pub const MIN_CHUNK: usize = 4096;

/// Batches for an inner size `k`: the largest power of two dividing `k` that leaves at least
/// [`MIN_CHUNK`] per batch (one for small sizes).
pub fn chunks_of(k: usize) -> usize {
    let mut c = 1;
    while k.is_multiple_of(2 * c) && k / (2 * c) >= MIN_CHUNK {
        c *= 2;
    }
    c
}

/// The gradients of `c = op(a) · op(b)` given `dL/dc`, as the products (specs and operand
/// order) that compute them: `(dL/da, dL/db)`, each `(first, second, spec)`, where `true` in
/// the operand slots means `grad` and `false` the other operand. Every case is again one
/// product of the stored operands, so no transposed copy is made.
pub fn backward_plan(spec: ProductSpec) -> (GradProduct, GradProduct) {
    let (ta, tb) = (spec.trans_a, spec.trans_b);
    let da = match ta {
        // dA = G · op(B)ᵀ
        false => GradProduct {
            grad_first: true,
            spec: spec.with(false, !tb),
        },
        // A is [k, m]: dA = op(B) · Gᵀ
        true => GradProduct {
            grad_first: false,
            spec: spec.with(tb, true),
        },
    };
    let db = match tb {
        // dB = op(A)ᵀ · G
        false => GradProduct {
            grad_first: false,
            spec: spec.with(!ta, false),
        },
        // B is [n, k]: dB = Gᵀ · op(A)
        true => GradProduct {
            grad_first: true,
            spec: spec.with(true, ta),
        },
    };
    (da, db)
}

/// One gradient of a product, as a product of the incoming gradient and the other operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GradProduct {
    /// The incoming gradient is the first operand (else the second).
    pub grad_first: bool,
    /// The product's transpositions.
    pub spec: ProductSpec,
}

impl GradProduct {
    /// Orders `(grad, other)` as this product takes them.
    pub fn operands<T>(&self, grad: T, other: T) -> (T, T) {
        if self.grad_first {
            (grad, other)
        } else {
            (other, grad)
        }
    }
}
