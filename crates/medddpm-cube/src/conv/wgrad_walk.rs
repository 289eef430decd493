//! Where a unit of the weight gradient's partial-product kernels ([`wgrad_partial`] and its
//! tensor-core twins) works and what it loads: its place in the cube's tile and K slice, its
//! columns of B worked out once ([`Loader`]), one K row at a time into registers, and the walk
//! down the slice that [`wgrad_partial`] and [`wgrad_partial_mma`] share ([`Walk`]).
//!
//! [`wgrad_partial`]: super::kernel::wgrad_partial
//! [`wgrad_partial_mma`]: super::mma::wgrad_partial_mma

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

/// What a unit's loads need, worked out once per cube: its `tn` columns of B (or, in
/// `wgrad_partial_mma_vec`, its vectors of them) as offsets in `x` and taps, `kd` far outside
/// every input for one past the tile or past `N` (see [`column`]), the input's spatial size,
/// its rows of A (`m0 + g + 16 i`) and the convolution's stride and padding.
#[derive(CubeType)]
pub(super) struct Loader {
    pub off: Array<i32>,
    pub kd: Array<i32>,
    pub kh: Array<i32>,
    pub kw: Array<i32>,
    pub dims: (i32, i32, i32),
    pub rows: (usize, usize, usize),
    pub stride: (i32, i32, i32),
    pub pad: (i32, i32, i32),
}

/// A [`Loader`] of `len` columns (or vectors of them), their offsets and taps still to be
/// filled in, for input `x` (its spatial size), the unit's rows of A `(m0, g, M)`, and the
/// convolution's stride and padding: what the scalar and the vector loads both start from.
#[cube]
pub(super) fn new_loader<X: CubePrimitive>(
    x: &Tensor<X>,
    rows: (usize, usize, usize),
    stride: (i32, i32, i32),
    pad: (i32, i32, i32),
    #[comptime] len: usize,
) -> Loader {
    Loader {
        off: Array::new(len),
        kd: Array::new(len),
        kh: Array::new(len),
        kw: Array::new(len),
        dims: (x.shape(2) as i32, x.shape(3) as i32, x.shape(4) as i32),
        rows,
        stride,
        pad,
    }
}

/// Column `j = 4 jj + l` of unit `g`'s share of a tile starting at column `n0`.
#[cube]
pub(super) fn tile_column(n0: usize, g: usize, j: usize) -> usize {
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
    let mut cols = new_loader::<FX>(x, (m0, g, m_total), stride, pad, tn);
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

/// A unit's walk down its cube's K slice, [`BK`] rows a step: where it works (see [`place`]),
/// its loads, the output gradient's spatial size, the K row it loaded last (`k`, at output
/// position `pos`) and the first row of the step about to be staged (`k0`).
#[derive(CubeType)]
pub(super) struct Walk {
    pub kk: usize,
    pub g: usize,
    pub m0: usize,
    pub n0: usize,
    pub k_end: usize,
    pub slice: usize,
    pub m_total: usize,
    pub n_total: usize,
    pub cols: Loader,
    pub out: (usize, usize, usize),
    pub pos: (usize, usize, usize, usize),
    pub k: usize,
    pub k0: usize,
}

/// Unit `tid`'s [`Walk`] with its first K row loaded into `ra`, `rb` (see [`load_row`]).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn first_row<FX: Float, FY: Float>(
    x: &Tensor<FX>,
    dy: &Tensor<FY>,
    scalars: Scalars,
    tid: usize,
    ra: &mut Array<f32>,
    rb: &mut Array<f32>,
    #[comptime] tm: usize,
    #[comptime] tn: usize,
    #[comptime] channels_last: bool,
) -> Walk {
    let (sizes, kernel, stride, pad) = scalars;
    let (m_total, n_total, channels_in, k_total, slice_len) = sizes;
    let (kk, g, m0, n0, k_begin, k_end) = place(tid, slice_len, k_total, tm, tn, channels_last);
    let sizes = (m_total, n_total, channels_in);
    let cols = loader::<FX>(
        x,
        (m0, n0),
        g,
        sizes,
        kernel,
        stride,
        pad,
        tn,
        channels_last,
    );
    let (od_n, oh_n, ow_n) = (dy.shape(2), dy.shape(3), dy.shape(4));
    let pos = decompose(k_begin + kk, od_n, oh_n, ow_n);
    let k = k_begin + kk;
    load_row::<FX, FY>(x, dy, &cols, ra, rb, pos, k < k_end, tm, tn);
    Walk {
        kk,
        g,
        m0,
        n0,
        k_end,
        slice: CUBE_POS_Z as usize,
        m_total,
        n_total,
        cols,
        out: (od_n, oh_n, ow_n),
        pos,
        k,
        k0: k_begin,
    }
}

/// One step on: `k0` and `k` move [`BK`] rows, and the next step's K row is loaded into `ra`,
/// `rb` where the slice has one (before the current step's multiply, so that its latency hides
/// behind the arithmetic).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn next_row<FX: Float, FY: Float>(
    x: &Tensor<FX>,
    dy: &Tensor<FY>,
    walk: &mut Walk,
    ra: &mut Array<f32>,
    rb: &mut Array<f32>,
    #[comptime] tm: usize,
    #[comptime] tn: usize,
) {
    walk.k0 += BK;
    walk.k += BK;
    if walk.k0 < walk.k_end {
        let (od_n, oh_n, ow_n) = walk.out;
        walk.pos = advance(walk.pos, od_n, oh_n, ow_n, BK);
        let row_ok = walk.k < walk.k_end;
        load_row::<FX, FY>(x, dy, &walk.cols, ra, rb, walk.pos, row_ok, tm, tn);
    }
}
