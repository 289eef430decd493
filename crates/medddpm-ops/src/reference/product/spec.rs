//! What one product computes: [`ProductSpec`] (below the trait, like the other specs).

use crate::compute::Compute;

/// Why two operands' shapes `a` and `b` (`[batch, rows, cols]`) make no product.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProductShapeError {
    /// The first operand's shape.
    pub a: [usize; 3],
    /// The second's.
    pub b: [usize; 3],
    /// What is wrong with them.
    pub kind: ProductShapeKind,
}

/// What makes no product of two shapes (see [`ProductShapeError`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProductShapeKind {
    /// Their batches differ.
    Batches,
    /// The inner sizes of `op(a)` and `op(b)` differ, with these transpositions of `a` and `b`.
    Inner(bool, bool),
    /// A size is zero.
    Empty,
    /// A size or stride does not fit the 32-bit (64-bit for strides) integers of the library.
    TooBig,
}

impl ProductShapeError {
    /// `kind` of shapes `a` and `b`.
    pub fn new(a: [usize; 3], b: [usize; 3], kind: ProductShapeKind) -> Self {
        ProductShapeError { a, b, kind }
    }
}

impl std::fmt::Display for ProductShapeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (a, b) = (self.a, self.b);
        match self.kind {
            ProductShapeKind::Batches => write!(f, "batches differ: {a:?} and {b:?}"),
            ProductShapeKind::Inner(trans_a, trans_b) => write!(
                f,
                "inner sizes differ: {a:?} and {b:?} with transpositions ({trans_a}, {trans_b})"
            ),
            ProductShapeKind::Empty => write!(f, "empty product {a:?} x {b:?}"),
            ProductShapeKind::TooBig => write!(f, "sizes beyond 32 bits: {a:?} x {b:?}"),
        }
    }
}

impl std::error::Error for ProductShapeError {}

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
            return Err(ProductShapeError::new(a, b, ProductShapeKind::Batches));
        }
        if k != k_b {
            let kind = ProductShapeKind::Inner(self.trans_a, self.trans_b);
            return Err(ProductShapeError::new(a, b, kind));
        }
        Ok((m, k, n))
    }
}
