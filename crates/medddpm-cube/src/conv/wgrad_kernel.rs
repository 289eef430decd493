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

/// The scalar arguments every partial-product kernel takes: the GEMM's sizes `(M, N, c_in, K,
/// slice length)`, the kernel's height and width, stride and padding.
pub(super) type Scalars = (
    (usize, usize, usize, usize, usize),
    (usize, usize),
    (i32, i32, i32),
    (i32, i32, i32),
);

/// Rows of K staged in shared memory per step.
pub(super) const BK: usize = 16;
/// Units per side of a cube (16 x 16 = 256 units).
pub(super) const SIDE: usize = 16;

/// Staged B is read as vectors of this many columns.
pub(super) const VEC: usize = 4;
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

/// `k` as `(b, od, oh, ow)` of an output of spatial size `(od_n, oh_n, ow_n)`.
#[cube]
pub(super) fn decompose(
    k: usize,
    od_n: usize,
    oh_n: usize,
    ow_n: usize,
) -> (usize, usize, usize, usize) {
    let ow = k % ow_n;
    let rest = k / ow_n;
    let oh = rest % oh_n;
    let rest = rest / oh_n;
    (rest / od_n, rest % od_n, oh, ow)
}

/// `(b, od, oh, ow)` moved `by` positions on, by carries (the loop runs more than once only
/// when `ow_n < by`).
#[cube]
pub(super) fn advance(
    pos: (usize, usize, usize, usize),
    od_n: usize,
    oh_n: usize,
    ow_n: usize,
    #[comptime] by: usize,
) -> (usize, usize, usize, usize) {
    let (mut b, mut od, mut oh, mut ow) = pos;
    ow += by;
    while ow >= ow_n {
        ow -= ow_n;
        oh += 1;
        if oh == oh_n {
            oh = 0;
            od += 1;
            if od == od_n {
                od = 0;
                b += 1;
            }
        }
    }
    (b, od, oh, ow)
}

/// Column `n` of the GEMM as the offset of its input channel and taps in `x`, and its taps
/// `(kd, kh, kw)`; a column past `n_total` gets taps far outside every input, so its loads
/// read zeros without a test of their own.
#[cube]
#[allow(clippy::too_many_arguments)]
fn column<FX: Float>(
    x: &Tensor<FX>,
    n: usize,
    n_total: usize,
    channels_in: usize,
    kernel_h: usize,
    kernel_w: usize,
    #[comptime] channels_last: bool,
) -> (i32, i32, i32, i32) {
    let taps = n_total / channels_in;
    let mut ci = n / taps;
    let mut tap = n % taps;
    if channels_last {
        ci = n % channels_in;
        tap = n / channels_in;
    }
    let kw = tap % kernel_w;
    let kh = (tap / kernel_w) % kernel_h;
    let kd = tap / (kernel_w * kernel_h);
    let off = ci * x.stride(1) + kd * x.stride(2) + kh * x.stride(3) + kw * x.stride(4);
    let mut far = 0i32;
    if n >= n_total {
        far = 1 << 30;
    }
    (off as i32, kd as i32 + far, kh as i32, kw as i32)
}

/// What a unit's loads need, worked out once per cube: its `tn` columns of B (offsets in `x`
/// and taps, see [`column`]), the input's spatial size, its rows of A (`m0 + g + 16 i`) and
/// the convolution's stride and padding.
#[derive(CubeType)]
pub(super) struct Loader {
    off: Array<i32>,
    kd: Array<i32>,
    kh: Array<i32>,
    kw: Array<i32>,
    dims: (i32, i32, i32),
    rows: (usize, usize, usize),
    stride: (i32, i32, i32),
    pad: (i32, i32, i32),
}

/// Column `j = 4 jj + l` of unit `g`'s share of a tile starting at column `n0`.
#[cube]
fn tile_column(n0: usize, g: usize, j: usize) -> usize {
    n0 + VEC * g + j % VEC + SIDE * VEC * (j / VEC)
}

/// The loads of unit `g` in the tile at `(m0, n0)`: its columns are the ones it also
/// multiplies and stores as `tx`.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn loader<FX: Float>(
    x: &Tensor<FX>,
    corner: (usize, usize),
    g: usize,
    sizes: (usize, usize, usize),
    kernel: (usize, usize),
    stride: (i32, i32, i32),
    pad: (i32, i32, i32),
    #[comptime] tn: usize,
    #[comptime] channels_last: bool,
) -> Loader {
    let (m0, n0) = corner;
    let (m_total, n_total, channels_in) = sizes;
    let mut cols = Loader {
        off: Array::new(tn),
        kd: Array::new(tn),
        kh: Array::new(tn),
        kw: Array::new(tn),
        dims: (x.shape(2) as i32, x.shape(3) as i32, x.shape(4) as i32),
        rows: (m0, g, m_total),
        stride,
        pad,
    };
    let (kernel_h, kernel_w) = kernel;
    #[unroll]
    for j in 0..tn {
        let n = tile_column(n0, g, j);
        let (o, d, h, w) = column::<FX>(
            x,
            n,
            n_total,
            channels_in,
            kernel_h,
            kernel_w,
            channels_last,
        );
        cols.off[j] = o;
        cols.kd[j] = d;
        cols.kh[j] = h;
        cols.kw[j] = w;
    }
    cols
}

/// One K row of a step into registers: `tm` values of A (rows `m0 + g + 16 i`) and `tn` of B
/// (the unit's columns), cast to f32; zero for a row past the slice, a row past M, a column
/// past N or a tap in the padding.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn load_row<FX: Float, FY: Float>(
    x: &Tensor<FX>,
    dy: &Tensor<FY>,
    cols: &Loader,
    ra: &mut Array<f32>,
    rb: &mut Array<f32>,
    pos: (usize, usize, usize, usize),
    row_ok: bool,
    #[comptime] tm: usize,
    #[comptime] tn: usize,
) {
    let (m0, g, m_total) = cols.rows;
    let (a_row, x_row, bd, bh, bw) = row_offsets::<FX, FY>(x, dy, pos, cols.stride, cols.pad);
    #[unroll]
    for i in 0..tm {
        let m = m0 + g + SIDE * i;
        let mut v = 0.0f32;
        if row_ok && m < m_total {
            v = f32::cast_from(dy[a_row + m * dy.stride(1)]);
        }
        ra[i] = v;
    }
    let (dim_d, dim_h, dim_w) = cols.dims;
    #[unroll]
    for j in 0..tn {
        let id = bd + cols.kd[j];
        let ih = bh + cols.kh[j];
        let iw = bw + cols.kw[j];
        let inside = id >= 0 && id < dim_d && ih >= 0 && ih < dim_h && iw >= 0;
        let mut v = 0.0f32;
        if row_ok && inside && iw < dim_w {
            v = f32::cast_from(x[(x_row + cols.off[j]) as usize]);
        }
        rb[j] = v;
    }
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

/// Where the loads of one step start: the unit's K row in `dy` (`a_row`) and in `x` before the
/// taps (`x_row`, may be negative), and the row's first input position per axis.
#[cube]
pub(super) fn row_offsets<X: CubePrimitive, Y: CubePrimitive>(
    x: &Tensor<X>,
    dy: &Tensor<Y>,
    pos: (usize, usize, usize, usize),
    stride: (i32, i32, i32),
    pad: (i32, i32, i32),
) -> (usize, i32, i32, i32, i32) {
    let (b, od, oh, ow) = pos;
    let (sd, sh, sw) = stride;
    let (pd, ph, pw) = pad;
    let a_row = b * dy.stride(0) + od * dy.stride(2) + oh * dy.stride(3) + ow * dy.stride(4);
    let bd = od as i32 * sd - pd;
    let bh = oh as i32 * sh - ph;
    let bw = ow as i32 * sw - pw;
    let x_row = (b * x.stride(0)) as i32
        + bd * x.stride(2) as i32
        + bh * x.stride(3) as i32
        + bw * x.stride(4) as i32;
    (a_row, x_row, bd, bh, bw)
}

/// Where unit `tid` of this cube works: its K row in the loads (`kk`) and its place along the
/// tile (`g`), the tile's corner `(m0, n0)` and the cube's K slice `[k_begin, k_end)`.
#[cube]
pub(super) fn place(
    tid: usize,
    slice_len: usize,
    k_total: usize,
    #[comptime] tm: usize,
    #[comptime] tn: usize,
    #[comptime] channels_last: bool,
) -> (usize, usize, usize, usize, usize, usize) {
    let (mut kk, mut g) = (tid % BK, tid / BK);
    if channels_last {
        kk = tid / SIDE;
        g = tid % SIDE;
    }
    let k_begin = CUBE_POS_Z as usize * slice_len;
    let mut k_end = k_begin + slice_len;
    if k_end > k_total {
        k_end = k_total;
    }
    let m0 = CUBE_POS_Y as usize * SIDE * tm;
    let n0 = CUBE_POS_X as usize * SIDE * tn;
    (kk, g, m0, n0, k_begin, k_end)
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
    let (sizes, kernel, stride, pad) = scalars;
    let (m_total, n_total, channels_in, k_total, slice_len) = sizes;
    let sa = comptime!(staged_stride_a(SIDE * tm, channels_last));
    let sb = comptime!(staged_stride_b(SIDE * tn));
    let mut a_s = SharedMemory::<f32>::new(BK * sa);
    let mut b_s = SharedMemory::<Quad>::new(BK * sb);
    let (tx, ty) = (UNIT_POS_X as usize, UNIT_POS_Y as usize);
    let tid = ty * SIDE + tx;
    let (kk, g, m0, n0, k_begin, k_end) = place(tid, slice_len, k_total, tm, tn, channels_last);
    let slice = CUBE_POS_Z as usize;
    let cols = loader::<FX>(
        x,
        (m0, n0),
        g,
        (m_total, n_total, channels_in),
        kernel,
        stride,
        pad,
        tn,
        channels_last,
    );
    let (od_n, oh_n, ow_n) = (dy.shape(2), dy.shape(3), dy.shape(4));
    let mut acc = Array::<f32>::new(tm * tn);
    #[unroll]
    for e in 0..tm * tn {
        acc[e] = 0.0;
    }
    let (mut a, mut ra, mut rb) = (Array::<f32>::new(tm), Array::new(tm), Array::new(tn));
    let mut pos = decompose(k_begin + kk, od_n, oh_n, ow_n);
    let mut k = k_begin + kk;
    load_row::<FX, FY>(x, dy, &cols, &mut ra, &mut rb, pos, k < k_end, tm, tn);
    let mut k0 = k_begin;
    while k0 < k_end {
        stage(&mut a_s, &mut b_s, &ra, &rb, kk, g, tm, tn, sa, sb);
        sync_cube();
        k0 += BK;
        k += BK;
        if k0 < k_end {
            pos = advance(pos, od_n, oh_n, ow_n, BK);
            load_row::<FX, FY>(x, dy, &cols, &mut ra, &mut rb, pos, k < k_end, tm, tn);
        }
        multiply(&a_s, &b_s, &mut acc, &mut a, tx, ty, tm, tn, sa, sb);
        sync_cube();
    }
    let corner = (m0, n0, slice * m_total * n_total);
    store_partial(ws, &acc, corner, tx, ty, m_total, n_total, tm, tn);
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
