//! What one product computes: [`ProductSpec`] (below the trait, like the other specs).

use crate::compute::Compute;

/// Why two operands' shapes make no product (shapes `[batch, rows, cols]`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProductShapeError {
    /// Their batches differ.
    #[error("batches differ: {a:?} and {b:?}")]
    Batches {
        /// The first operand's shape.
        a: [usize; 3],
        /// The second's.
        b: [usize; 3],
    },
    /// The inner sizes of `op(a)` and `op(b)` differ.
    #[error("inner sizes differ: {a:?} and {b:?} with transpositions ({trans_a}, {trans_b})")]
    Inner {
        /// The first operand's shape.
        a: [usize; 3],
        /// The second's.
        b: [usize; 3],
        /// Whether `a` is transposed.
        trans_a: bool,
        /// Whether `b` is transposed.
        trans_b: bool,
    },
    /// A size is zero.
    #[error("empty product {a:?} x {b:?}")]
    Empty {
        /// The first operand's shape.
        a: [usize; 3],
        /// The second's.
        b: [usize; 3],
    },
    /// A size or stride does not fit the 32-bit (64-bit for strides) integers of the library.
    #[error("sizes beyond 32 bits: {a:?} x {b:?}")]
    TooBig {
        /// The first operand's shape.
        a: [usize; 3],
        /// The second's.
        b: [usize; 3],
    },
}

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
    pub fn sizes(
        &self,
        a: [usize; 3],
        b: [usize; 3],
    ) -> Result<(usize, usize, usize), ProductShapeError> {
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
            return Err(ProductShapeError::Batches { a, b });
        }
        if k != k_b {
            return Err(ProductShapeError::Inner {
                a,
                b,
                trans_a: self.trans_a,
                trans_b: self.trans_b,
            });
        }
        Ok((m, k, n))
    }
}
