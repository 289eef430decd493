//! The weight gradient's two kernels: [`wgrad_partial`] (one cube per output tile and K slice,
//! a register tile per unit, the slice's partial sums into an f32 workspace) and
//! [`wgrad_reduce`] (the slices summed in a fixed order, written in the weight's dtype and
//! order).
//!
//! The GEMM is `C[m, n] = sum_k A[m, k] B[k, n]` with `m` the output channel, `k` the position
//! `(b, od, oh, ow)` in the output gradient and `n` a column `(ci, kd, kh, kw)` of the weight:
//! `A[m, k] = dy[b, m, od, oh, ow]`, `B[k, n] = x[b, ci, od s - p + kd, ...]` (zero outside).
//! Addresses come from the tensors' own strides, so any memory order computes correctly; the
//! comptime `channels_last` only picks the order of the columns (`(tap, ci)` instead of
//! `(ci, tap)`) and which units read neighbouring addresses, so that the loads of both layouts
//! read memory in runs.
//!
//! A cube is [`SIDE`] x [`SIDE`] units; unit `(tx, ty)` owns rows `ty + 16 i` (`i < tm`) and
//! columns `4 tx + l + 64 jj` (`l < 4`, `jj < tn / 4`) of a `16 tm x 16 tn` tile, so
//! neighbouring units read neighbouring shared-memory words (A) and 128-bit vectors (B). Each
//! step stages [`BK`] rows of K: every unit loads one K row, `tm` values of A and `tn` of B,
//! casting to f32, into registers while the previous step multiplies; the unit's K row is
//! carried from step to step by additions (no divisions in the loop), and the `tn` columns'
//! offsets and taps are worked out once.

use cubecl::prelude::*;

use super::walk::{first_row, next_row, tile_column};
pub(super) use super::walk::{Scalars, BK, SIDE, VEC};

/// One staged vector of B.
type Quad = Vector<f32, Const<VEC>>;

/// Words between two K rows of staged A (`width` rows of M), padded so the stores of both
/// load orders hit distinct banks of 32 words: channels-first units store down K (the row
/// stride must be 2 mod 32), channels-last units along the tile (16 mod 32). The multiply's
/// reads touch two neighbouring words per plane.
pub(super) fn staged_stride_a(width: usize, channels_last: bool) -> usize {
    match (channels_last, width.is_multiple_of(32)) {
        (false, _) => width + 2,
        (true, true) => width + 16,
        (true, false) => width,
    }
}

/// Vectors between two K rows of staged B (`width` columns of N): one more than the row holds,
/// so the channels-first stores (down K, eight units per phase of a 128-bit store) land on
/// distinct groups of four banks; the multiply's and the channels-last stores' neighbouring
/// units touch neighbouring vectors.
pub(super) fn staged_stride_b(width: usize) -> usize {
    width / VEC + 1
}

/// The loaded row into shared memory: A at `[kk, g + 16 i]`, B as vectors at `[kk, g + 16 jj]`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn stage(
    a_s: &mut SharedMemory<f32>,
    b_s: &mut SharedMemory<Quad>,
    ra: &Array<f32>,
    rb: &Array<f32>,
    kk: usize,
    g: usize,
    #[comptime] tm: usize,
    #[comptime] tn: usize,
    #[comptime] sa: usize,
    #[comptime] sb: usize,
) {
    #[unroll]
    for i in 0..tm {
        a_s[kk * sa + g + SIDE * i] = ra[i];
    }
    #[unroll]
    for jj in 0..tn / VEC {
        let mut q = Quad::empty();
        #[unroll]
        for l in 0..VEC {
            q[l] = rb[jj * VEC + l];
        }
        b_s[kk * sb + g + SIDE * jj] = q;
    }
}

/// The multiply of one staged step: `acc[i tn + j] += A[kq, ty + 16 i] B[kq, column j of tx]`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn multiply(
    a_s: &SharedMemory<f32>,
    b_s: &SharedMemory<Quad>,
    acc: &mut Array<f32>,
    a: &mut Array<f32>,
    tx: usize,
    ty: usize,
    #[comptime] tm: usize,
    #[comptime] tn: usize,
    #[comptime] sa: usize,
    #[comptime] sb: usize,
) {
    #[unroll]
    for kq in 0..BK {
        #[unroll]
        for i in 0..tm {
            a[i] = a_s[kq * sa + ty + SIDE * i];
        }
        #[unroll]
        for jj in 0..tn / VEC {
            let q = b_s[kq * sb + tx + SIDE * jj];
            #[unroll]
            for i in 0..tm {
                #[unroll]
                for l in 0..VEC {
                    acc[i * tn + jj * VEC + l] += a[i] * q[l];
                }
            }
        }
    }
}

/// The partial sums of one `16 tm x 16 tn` tile of `dL/dw` over K slice `CUBE_POS_Z`
/// (`[slice * slice_len, (slice + 1) * slice_len)`), into `ws[slice, m, n]`. Cubes: x over
/// column tiles, y over row tiles, z over slices. The next step's row is loaded into registers
/// before the current step's multiply, so its latency hides behind the arithmetic.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub(super) fn wgrad_partial<FX: Float, FY: Float>(
    x: &Tensor<FX>,
    dy: &Tensor<FY>,
    ws: &mut Tensor<f32>,
    scalars: Scalars,
    #[comptime] tm: usize,
    #[comptime] tn: usize,
    #[comptime] channels_last: bool,
    #[define(FX, FY)] _dtypes: [StorageType; 2],
) {
    let sa = comptime!(staged_stride_a(SIDE * tm, channels_last));
    let sb = comptime!(staged_stride_b(SIDE * tn));
    let mut a_s = SharedMemory::<f32>::new(BK * sa);
    let mut b_s = SharedMemory::<Quad>::new(BK * sb);
    let (tx, ty) = (UNIT_POS_X as usize, UNIT_POS_Y as usize);
    let tid = ty * SIDE + tx;
    let mut acc = Array::<f32>::new(tm * tn);
    #[unroll]
    for e in 0..tm * tn {
        acc[e] = 0.0;
    }
    let (mut a, mut ra, mut rb) = (Array::<f32>::new(tm), Array::new(tm), Array::new(tn));
    let mut w = first_row::<FX, FY>(x, dy, scalars, tid, &mut ra, &mut rb, tm, tn, channels_last);
    while w.k0 < w.k_end {
        stage(&mut a_s, &mut b_s, &ra, &rb, w.kk, w.g, tm, tn, sa, sb);
        sync_cube();
        next_row::<FX, FY>(x, dy, &mut w, &mut ra, &mut rb, tm, tn);
        multiply(&a_s, &b_s, &mut acc, &mut a, tx, ty, tm, tn, sa, sb);
        sync_cube();
    }
    let corner = (w.m0, w.n0, w.slice * w.m_total * w.n_total);
    store_partial(ws, &acc, corner, tx, ty, w.m_total, w.n_total, tm, tn);
}

/// The unit's sums into `ws[base + m * n_total + n]` (`corner = (m0, n0, base)`).
#[cube]
#[allow(clippy::too_many_arguments)]
fn store_partial(
    ws: &mut Tensor<f32>,
    acc: &Array<f32>,
    corner: (usize, usize, usize),
    tx: usize,
    ty: usize,
    m_total: usize,
    n_total: usize,
    #[comptime] tm: usize,
    #[comptime] tn: usize,
) {
    let (m0, n0, base) = corner;
    #[unroll]
    for i in 0..tm {
        let m = m0 + ty + SIDE * i;
        #[unroll]
        for j in 0..tn {
            let n = tile_column(n0, tx, j);
            if m < m_total && n < n_total {
                ws[base + m * n_total + n] = acc[i * tn + j];
            }
        }
    }
}

/// `dw[m, ci, kd, kh, kw] = sum_s ws[s, m, n]`, the slices added in order (deterministic), one
/// unit per workspace column; channels-last columns `(tap, ci)` go back to the weight's
/// `(ci, tap)` order.
#[cube(launch_unchecked)]
pub(super) fn wgrad_reduce<O: Float>(
    ws: &Tensor<f32>,
    dw: &mut Tensor<O>,
    mn: usize,
    n_total: usize,
    channels_in: usize,
    slices: usize,
    #[comptime] channels_last: bool,
    #[define(O)] _dtype: StorageType,
) {
    let pos = ABSOLUTE_POS;
    if pos >= mn {
        terminate!();
    }
    // Four loads in flight before their adds (the order of the sums unchanged): the narrow
    // kernel's thousand slices would otherwise wait on one load at a time.
    let mut acc = 0.0f32;
    let mut s = 0;
    while s + 4 <= slices {
        let (a, b) = (ws[s * mn + pos], ws[(s + 1) * mn + pos]);
        let (c, d) = (ws[(s + 2) * mn + pos], ws[(s + 3) * mn + pos]);
        acc += a;
        acc += b;
        acc += c;
        acc += d;
        s += 4;
    }
    while s < slices {
        acc += ws[s * mn + pos];
        s += 1;
    }
    let mut out = pos;
    if channels_last {
        let m = pos / n_total;
        let n = pos % n_total;
        let taps = n_total / channels_in;
        out = m * n_total + (n % channels_in) * taps + n / channels_in;
    }
    dw[out] = O::cast_from(acc);
}
