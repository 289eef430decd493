//! The one kernel every convolution here runs: a direct (unflipped) 3-D correlation as an
//! implicit GEMM, register-tiled, with f32 accumulation.
//!
//! Rows are output positions `m = ((b * out_d + od) * out_h + oh) * out_w + ow`, columns output
//! channels, and the reduction runs over the kernel taps (outer loop) and the input channels
//! (inner loop, in chunks of `bk`). Walking taps outside channels costs no integer division in
//! the inner loop: per tap each thread finds once where its rows' input voxels are (or that
//! they lie in the padding), and a chunk only adds `ci * channel_stride`.
//!
//! Every address comes from strides passed at launch, so one kernel reads and writes both
//! layouts (and permuted views); the weight's taps are walked with signed strides, so flipped
//! and strided sub-kernels (the data gradient's phases, see `dgrad`) need no copy; and the
//! output has a base offset and strides of its own, so a launch can write one phase of a
//! strided output.

use cubecl::prelude::*;

use super::tile::Tile;

/// Marks a row past the last output position: far enough below zero that no tap brings it
/// back into the input.
const NO_ROW: i32 = -(1 << 30);

/// Sizes of the product and of the input and output grids.
#[derive(CubeType, CubeLaunch, Clone)]
pub(super) struct Dims {
    /// Rows: batch times output voxels.
    pub m: u32,
    pub c_in: u32,
    pub c_out: u32,
    pub out_d: u32,
    pub out_h: u32,
    pub out_w: u32,
    pub in_d: u32,
    pub in_h: u32,
    pub in_w: u32,
}

/// The sliding window: stride, padding (signed: a data-gradient phase may start inside the
/// input) and kernel taps per axis.
#[derive(CubeType, CubeLaunch, Clone)]
pub(super) struct Window {
    pub stride_d: u32,
    pub stride_h: u32,
    pub stride_w: u32,
    pub pad_d: i32,
    pub pad_h: i32,
    pub pad_w: i32,
    pub taps_d: u32,
    pub taps_h: u32,
    pub taps_w: u32,
}

/// Element strides (and a base offset) of a `[batch, channels, d, h, w]` activation.
#[derive(CubeType, CubeLaunch, Clone)]
pub(super) struct Strides {
    pub base: u32,
    pub n: u32,
    pub c: u32,
    pub d: u32,
    pub h: u32,
    pub w: u32,
}

/// Where weight `(tap j, ci, co)` lies: `base + jd * d + jh * h + jw * w + ci * ci_stride +
/// co * co_stride`, the tap steps signed (negative for a flipped kernel).
#[derive(CubeType, CubeLaunch, Clone)]
pub(super) struct WeightWalk {
    pub base: i32,
    pub d: i32,
    pub h: i32,
    pub w: i32,
    pub ci: u32,
    pub co: u32,
}

/// The product's scalar arguments: sizes, window, input strides, weight walk, output strides.
pub(super) type Operands = (Dims, Window, Strides, WeightWalk, Strides);

/// `y[b, co, o] = sum_{ci, j} x[b, ci, o * stride - pad + j] * w[j, ci, co]` (zero outside
/// the input), in f32, written as `Y`.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub(super) fn conv_gemm<X: Float, W: Float, Y: Float>(
    x: &Tensor<X>,
    w: &Tensor<W>,
    y: &mut Tensor<Y>,
    args: Operands,
    #[comptime] tile: Tile,
    #[define(X, W, Y)] _dtypes: [StorageType; 3],
) {
    let (dims, window, xs, ws, ys) = args;
    let bm = comptime!(tile.threads_m * tile.tm);
    let bn = comptime!(tile.threads_n * tile.tn);
    let bk = comptime!(tile.bk);
    let m0 = (CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_X) * bm;
    if m0 >= dims.m {
        terminate!();
    }
    let n0 = CUBE_POS_Z * bn;
    let (rows_base, rows_d, rows_h, rows_w) = row_plan(&dims, &window, &xs, m0, tile);
    let mut acc = Array::<f32>::new(comptime!((tile.tm * tile.tn) as usize));
    #[unroll]
    for i in 0..tile.tm * tile.tn {
        acc[i as usize] = 0.0;
    }
    let mut a_s = SharedMemory::<f32>::new(comptime!((bk * tile.a_stride()) as usize));
    let mut b_s = SharedMemory::<f32>::new(comptime!((bk * bn) as usize));
    let taps = window.taps_d * window.taps_h * window.taps_w;
    let chunks = dims.c_in.div_ceil(bk);
    for tap in 0..taps {
        let jw = tap % window.taps_w;
        let jh = (tap / window.taps_w) % window.taps_h;
        let jd = tap / (window.taps_w * window.taps_h);
        let offsets = tap_offsets(
            &rows_base, &rows_d, &rows_h, &rows_w, jd, jh, jw, &dims, &xs, tile,
        );
        let w_tap = ws.base + jd as i32 * ws.d + jh as i32 * ws.h + jw as i32 * ws.w;
        for chunk in 0..chunks {
            let ci0 = chunk * bk;
            load_a(x, &offsets, ci0, dims.c_in, xs.c, &mut a_s, tile);
            load_b(w, w_tap, ci0, n0, &dims, &ws, &mut b_s, tile);
            sync_cube();
            multiply(&a_s, &b_s, &mut acc, tile);
            sync_cube();
        }
    }
    write_out(y, &acc, m0, n0, &dims, &ys, tile);
}

/// Row `r` (of [`Tile::a_rows`]) of this thread's share of the input tile, and the first of
/// the `a_run` consecutive channels (within the chunk) it stages there. The cube's units
/// split each row's `bk` channels into runs of `a_run`, neighbouring units taking
/// neighbouring runs of one row, then the next row: with `a_run = bk` (channels-first input)
/// neighbouring units stage neighbouring rows (neighbouring addresses), with a short run
/// (channels-last input) a few units stage one row's contiguous channels.
///
/// A tensor-core tile of 32-channel steps in runs of 8 (rows 80 bytes apart) swaps the low
/// bits of the row so that the eight units of one 16-byte store phase take rows `r` and `r +
/// 4` (whose 64 bytes fall in disjoint banks) instead of `r` and `r + 1` (which share one: a
/// two-way conflict on every store, Nsight Compute).
#[cube]
pub(super) fn a_slot(r: u32, #[comptime] tile: Tile) -> (u32, u32) {
    let runs = comptime!(tile.bk / tile.a_run);
    let mut u = UNIT_POS / runs;
    if comptime!(tile.rotate_rows && tile.tensor_cores && tile.bk == 32 && tile.a_run == 8) {
        u = (u & !7u32) | ((u & 1) << 2) | ((u >> 1) & 3);
    }
    let row = u + r * comptime!(tile.threads() / runs);
    let k = (UNIT_POS % runs) * tile.a_run;
    (row, k)
}

/// Output row `m`'s batch item and position `(b, od, oh, ow)`.
#[cube]
pub(super) fn position(m: u32, dims: &Dims) -> (u32, u32, u32, u32) {
    let ow = m % dims.out_w;
    let oh = (m / dims.out_w) % dims.out_h;
    let rest = m / (dims.out_w * dims.out_h);
    let od = rest % dims.out_d;
    let b = rest / dims.out_d;
    (b, od, oh, ow)
}

/// Per row of this thread's share of the input tile: the row's batch offset in `x` and the
/// input voxel that tap 0 of its window reads (`NO_ROW` past the last row).
#[cube]
pub(super) fn row_plan(
    dims: &Dims,
    window: &Window,
    xs: &Strides,
    m0: u32,
    #[comptime] tile: Tile,
) -> (Array<u32>, Array<i32>, Array<i32>, Array<i32>) {
    let rows = comptime!(tile.a_rows() as usize);
    let mut base = Array::<u32>::new(rows);
    let mut d0 = Array::<i32>::new(rows);
    let mut h0 = Array::<i32>::new(rows);
    let mut w0 = Array::<i32>::new(rows);
    #[unroll]
    for j in 0..tile.a_rows() {
        let (row, _k) = a_slot(j, tile);
        let m = m0 + row;
        base[j as usize] = 0;
        d0[j as usize] = NO_ROW;
        h0[j as usize] = NO_ROW;
        w0[j as usize] = NO_ROW;
        if m < dims.m {
            let (b, od, oh, ow) = position(m, dims);
            base[j as usize] = xs.base + b * xs.n;
            d0[j as usize] = (od * window.stride_d) as i32 - window.pad_d;
            h0[j as usize] = (oh * window.stride_h) as i32 - window.pad_h;
            w0[j as usize] = (ow * window.stride_w) as i32 - window.pad_w;
        }
    }
    (base, d0, h0, w0)
}

/// Per planned row: the offset of channel 0 of the voxel tap `(jd, jh, jw)` reads, or -1
/// where that voxel is padding.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn tap_offsets(
    base: &Array<u32>,
    d0: &Array<i32>,
    h0: &Array<i32>,
    w0: &Array<i32>,
    jd: u32,
    jh: u32,
    jw: u32,
    dims: &Dims,
    xs: &Strides,
    #[comptime] tile: Tile,
) -> Array<i32> {
    let mut offsets = Array::<i32>::new(comptime!(tile.a_rows() as usize));
    #[unroll]
    for j in 0..tile.a_rows() {
        let id = d0[j as usize] + jd as i32;
        let ih = h0[j as usize] + jh as i32;
        let iw = w0[j as usize] + jw as i32;
        let inside = id >= 0
            && ih >= 0
            && iw >= 0
            && (id as u32) < dims.in_d
            && (ih as u32) < dims.in_h
            && (iw as u32) < dims.in_w;
        offsets[j as usize] = -1;
        if inside {
            offsets[j as usize] =
                (base[j as usize] + id as u32 * xs.d + ih as u32 * xs.h + iw as u32 * xs.w) as i32;
        }
    }
    offsets
}

/// Stages the `[bk, bm]` input tile of channels `ci0..ci0 + bk` in shared memory (as f32,
/// zeros for padding and for channels past the last), rows `a_stride` apart.
#[cube]
fn load_a<X: Float>(
    x: &Tensor<X>,
    offsets: &Array<i32>,
    ci0: u32,
    c_in: u32,
    channel_stride: u32,
    a_s: &mut SharedMemory<f32>,
    #[comptime] tile: Tile,
) {
    let bm = comptime!(tile.bm());
    let a_stride = comptime!(tile.a_stride());
    #[unroll]
    for r in 0..tile.a_rows() {
        let (row, k0) = a_slot(r, tile);
        // Only when the cube has more units than a tile's rows have runs.
        if row < bm {
            let at = offsets[r as usize];
            #[unroll]
            for c in 0..tile.a_run {
                let ci = ci0 + k0 + c;
                let mut v = 0.0f32;
                if at >= 0 && ci < c_in {
                    v = f32::cast_from(x[(at as u32 + ci * channel_stride) as usize]);
                }
                a_s[((k0 + c) * a_stride + row) as usize] = v;
            }
        }
    }
}

/// Stages the `[bk, bn]` weight tile of tap `w_tap`, channels `ci0..` and output channels
/// `n0..` in shared memory (as f32, zeros past the last channels), output channels fastest
/// across threads (the caller lays the weight out with them contiguous).
#[cube]
#[allow(clippy::too_many_arguments)]
fn load_b<W: Float>(
    w: &Tensor<W>,
    w_tap: i32,
    ci0: u32,
    n0: u32,
    dims: &Dims,
    ws: &WeightWalk,
    b_s: &mut SharedMemory<f32>,
    #[comptime] tile: Tile,
) {
    let bn = comptime!(tile.threads_n * tile.tn);
    let size = comptime!(bn * tile.bk);
    #[unroll]
    for j in 0..tile.b_loads() {
        let e = UNIT_POS + j * comptime!(tile.threads());
        if e < size {
            let col = e % bn;
            let k = e / bn;
            let ci = ci0 + k;
            let co = n0 + col;
            let mut v = 0.0f32;
            if ci < dims.c_in && co < dims.c_out {
                let at = w_tap + (ci * ws.ci + co * ws.co) as i32;
                v = f32::cast_from(w[at as usize]);
            }
            b_s[(k * bn + col) as usize] = v;
        }
    }
}

/// This thread's place in the grid of register tiles: its rows are `um + i * threads_m`, its
/// columns `un + j * threads_n`. Output channels fastest across threads when the output is
/// channels-last, rows fastest otherwise, so that the stores of neighbouring threads land on
/// neighbouring addresses.
#[cube]
fn unit_place(#[comptime] tile: Tile) -> (u32, u32) {
    let mut um = UNIT_POS % tile.threads_m;
    let mut un = UNIT_POS / tile.threads_m;
    if comptime!(tile.out_channels_fastest) {
        um = UNIT_POS / tile.threads_n;
        un = UNIT_POS % tile.threads_n;
    }
    (um, un)
}

/// `acc += A_chunk^T B_chunk` for this thread's `tm x tn` register tile: per step of the
/// chunk, `tm + tn` shared-memory reads feed `tm * tn` fused multiply-adds.
#[cube]
fn multiply(
    a_s: &SharedMemory<f32>,
    b_s: &SharedMemory<f32>,
    acc: &mut Array<f32>,
    #[comptime] tile: Tile,
) {
    let a_stride = comptime!(tile.a_stride());
    let bn = comptime!(tile.threads_n * tile.tn);
    let (um, un) = unit_place(tile);
    let mut a = Array::<f32>::new(comptime!(tile.tm as usize));
    let mut b = Array::<f32>::new(comptime!(tile.tn as usize));
    #[unroll]
    for kk in 0..tile.bk {
        #[unroll]
        for i in 0..tile.tm {
            a[i as usize] = a_s[(kk * a_stride + um + i * tile.threads_m) as usize];
        }
        #[unroll]
        for j in 0..tile.tn {
            b[j as usize] = b_s[(kk * bn + un + j * tile.threads_n) as usize];
        }
        #[unroll]
        for i in 0..tile.tm {
            #[unroll]
            for j in 0..tile.tn {
                let at = (i * tile.tn + j) as usize;
                acc[at] = fma(a[i as usize], b[j as usize], acc[at]);
            }
        }
    }
}

/// Writes this thread's register tile (rows and channels past the last skipped).
#[cube]
fn write_out<Y: Float>(
    y: &mut Tensor<Y>,
    acc: &Array<f32>,
    m0: u32,
    n0: u32,
    dims: &Dims,
    ys: &Strides,
    #[comptime] tile: Tile,
) {
    let (um, un) = unit_place(tile);
    #[unroll]
    for i in 0..tile.tm {
        let m = m0 + um + i * tile.threads_m;
        if m < dims.m {
            let (b, od, oh, ow) = position(m, dims);
            let at = ys.base + b * ys.n + od * ys.d + oh * ys.h + ow * ys.w;
            #[unroll]
            for j in 0..tile.tn {
                let co = n0 + un + j * tile.threads_n;
                if co < dims.c_out {
                    y[(at + co * ys.c) as usize] = Y::cast_from(acc[(i * tile.tn + j) as usize]);
                }
            }
        }
    }
}
