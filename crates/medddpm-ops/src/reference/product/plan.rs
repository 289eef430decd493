//! A row-major product as a column-major library (cuBLAS) computes it, apart from any GPU so
//! that the CPU tests check it: which operand goes first, their transpositions, leading
//! dimensions and batch strides.

use super::spec::{ProductShapeError, ProductShapeKind, ProductSpec};

/// How one `[batch, rows, cols]` operand lies in memory, in elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operand {
    /// `[batch, rows, cols]`.
    pub dims: [usize; 3],
    /// Element strides of the three axes.
    pub strides: [usize; 3],
}

impl Operand {
    /// Whether a column-major library reads it in place: unit column stride and rows that do
    /// not overlap (attention's `q`, `k`, `v`, column slices of one tensor, qualify); else it
    /// is made contiguous first.
    pub fn in_place(&self) -> bool {
        let [_, rows, cols] = self.dims;
        (cols <= 1 || self.strides[2] == 1) && (rows <= 1 || self.strides[1] >= cols)
    }

    /// Leading dimension: the row stride (the column count for a single row).
    fn ld(&self) -> usize {
        if self.dims[1] <= 1 {
            self.dims[2].max(1)
        } else {
            self.strides[1]
        }
    }

    /// Batch stride (0 for one matrix).
    fn batch_stride(&self) -> usize {
        if self.dims[0] <= 1 {
            0
        } else {
            self.strides[0]
        }
    }
}

/// `C = op(A) · op(B)` in column-major terms, `C` contiguous `[batch, m, n]` row-major.
/// `first` / `second` name which of the row-major operands the library's A and B are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColumnMajor {
    /// The library's A is the row-major `b` (always: see [`column_major`]); transposed?
    pub trans_first: bool,
    /// The library's B (the row-major `a`) transposed?
    pub trans_second: bool,
    /// Rows of the column-major `C`.
    pub m: i32,
    /// Columns of the column-major `C`.
    pub n: i32,
    /// The contracted dimension.
    pub k: i32,
    /// Leading dimension of the library's A.
    pub ld_first: i32,
    /// Batch stride of the library's A.
    pub stride_first: i64,
    /// Leading dimension of the library's B.
    pub ld_second: i32,
    /// Batch stride of the library's B.
    pub stride_second: i64,
    /// Leading dimension of `C`.
    pub ldc: i32,
    /// Batch stride of `C`.
    pub stride_c: i64,
    /// Matrices in the batch.
    pub batch: i32,
}

/// The column-major call for row-major `op(a) · op(b)`: a row-major matrix is its own
/// transpose in column-major terms, so row-major `C = op(A) · op(B)` is column-major
/// `Cᵀ = op(B)ᵀ · op(A)ᵀ`: the library multiplies `b`'s buffer (first, with `b`'s
/// transposition) by `a`'s (second, with `a`'s), `m` and `n` swapped. `Err` for shapes that
/// do not multiply, empty products and sizes beyond 32 bits.
pub fn column_major(
    a: Operand,
    b: Operand,
    spec: ProductSpec,
) -> Result<ColumnMajor, ProductShapeError> {
    let (m, k, n) = spec.sizes(a.dims, b.dims)?;
    let batch = a.dims[0];
    let error = |kind| ProductShapeError::new(a.dims, b.dims, kind);
    if [m, k, n, batch].contains(&0) {
        return Err(error(ProductShapeKind::Empty));
    }
    let too_big = || error(ProductShapeKind::TooBig);
    let int = |v: usize| i32::try_from(v).map_err(|_| too_big());
    let long = |v: usize| i64::try_from(v).map_err(|_| too_big());
    Ok(ColumnMajor {
        trans_first: spec.trans_b,
        trans_second: spec.trans_a,
        m: int(n)?,
        n: int(m)?,
        k: int(k)?,
        ld_first: int(b.ld())?,
        stride_first: long(b.batch_stride())?,
        ld_second: int(a.ld())?,
        stride_second: long(a.batch_stride())?,
        ldc: int(n)?,
        stride_c: long(m * n)?,
        batch: int(batch)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::Compute;

    /// What a column-major strided batched GEMM computes (`C = op(A) · op(B)`, element
    /// `(i, j)` of a column-major matrix at `i + j * ld`), on host buffers.
    fn reference_gemm(g: &ColumnMajor, first: &[f64], second: &[f64]) -> Vec<f64> {
        let (m, n, k) = (g.m as usize, g.n as usize, g.k as usize);
        let at =
            |buf: &[f64], trans: bool, ld: i32, stride: i64, batch: usize, i: usize, j: usize| {
                let (r, c) = if trans { (j, i) } else { (i, j) };
                buf[batch * stride as usize + r + c * ld as usize]
            };
        let mut c = vec![0.0; g.batch as usize * g.stride_c as usize];
        for p in 0..g.batch as usize {
            for i in 0..m {
                for j in 0..n {
                    let mut s = 0.0;
                    for l in 0..k {
                        s += at(first, g.trans_first, g.ld_first, g.stride_first, p, i, l)
                            * at(
                                second,
                                g.trans_second,
                                g.ld_second,
                                g.stride_second,
                                p,
                                l,
                                j,
                            );
                    }
                    c[p * g.stride_c as usize + i + j * g.ldc as usize] = s;
                }
            }
        }
        c
    }

    /// A row-major `[batch, rows, cols]` operand stored with `pad` extra elements after each
    /// row (a column slice of a wider tensor), values from `f`.
    fn stored(
        dims: [usize; 3],
        pad: usize,
        f: impl Fn(usize, usize, usize) -> f64,
    ) -> (Operand, Vec<f64>) {
        let [bt, rows, cols] = dims;
        let strides = [rows * (cols + pad), cols + pad, 1];
        let mut buf = vec![f64::NAN; bt * strides[0]];
        for p in 0..bt {
            for r in 0..rows {
                for c in 0..cols {
                    buf[p * strides[0] + r * strides[1] + c] = f(p, r, c);
                }
            }
        }
        (Operand { dims, strides }, buf)
    }

    #[test]
    fn the_column_major_call_computes_the_row_major_product() {
        let f = |s: f64| {
            move |p: usize, r: usize, c: usize| ((p * 31 + r * 7 + c * 3) as f64 * s).sin()
        };
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            for pad in [0, 3] {
                let (batch, m, k, n) = (2, 5, 4, 3);
                let a_dims = if ta { [batch, k, m] } else { [batch, m, k] };
                let b_dims = if tb { [batch, n, k] } else { [batch, k, n] };
                let (a, abuf) = stored(a_dims, pad, f(0.37));
                let (b, bbuf) = stored(b_dims, pad, f(0.11));
                let spec = ProductSpec::plain(Compute::default()).with(ta, tb);
                let g = column_major(a, b, spec).unwrap();
                let got = reference_gemm(&g, &bbuf, &abuf);
                let a_at = |p, i, l| {
                    if ta {
                        f(0.37)(p, l, i)
                    } else {
                        f(0.37)(p, i, l)
                    }
                };
                let b_at = |p, l, j| {
                    if tb {
                        f(0.11)(p, j, l)
                    } else {
                        f(0.11)(p, l, j)
                    }
                };
                for p in 0..batch {
                    for i in 0..m {
                        for j in 0..n {
                            let want: f64 = (0..k).map(|l| a_at(p, i, l) * b_at(p, l, j)).sum();
                            let have = got[p * m * n + i * n + j];
                            assert!(
                                (have - want).abs() < 1e-12,
                                "({ta}, {tb}) pad {pad}: C[{p},{i},{j}] {have} != {want}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn operands_read_in_place_or_copied() {
        let op = |dims, strides| Operand { dims, strides };
        assert!(op([1, 4, 3], [12, 3, 1]).in_place());
        assert!(op([1, 4, 3], [36, 9, 1]).in_place(), "a column slice");
        assert!(!op([1, 4, 3], [12, 1, 4]).in_place(), "a transposed view");
        assert!(!op([1, 4, 3], [12, 2, 1]).in_place(), "overlapping rows");
        assert!(op([1, 1, 3], [3, 7, 1]).in_place(), "one row");
        assert!(op([2, 4, 1], [4, 1, 9]).in_place(), "one column");
    }

    #[test]
    fn what_cannot_be_one_call_is_refused() {
        let spec = ProductSpec::plain(Compute::default());
        let op = |dims: [usize; 3]| Operand {
            dims,
            strides: [dims[1] * dims[2], dims[2], 1],
        };
        assert!(column_major(op([1, 0, 3]), op([1, 3, 2]), spec).is_err());
        assert!(column_major(op([1, 4, 3]), op([1, 2, 2]), spec).is_err());
        assert!(column_major(op([1, 1 << 31, 1]), op([1, 1, 1]), spec).is_err());
    }
}
