//! The implicit GEMM of [`gemm`](super::gemm) on tensor cores: the same gathering of input
//! patches and weight chunks into shared memory (in the operands' 16-bit type instead of f32),
//! multiplied by 16 x 16 x 16 cooperative matrices with f32 accumulators (WMMA on CUDA).
//!
//! A cube of 8 planes computes a `bm x bn` block ([`Tile::choose_tensor_cores`]): plane `p`
//! owns rows `p * bm / 8 ..` and every channel of the block, as `2 x bn / 16` accumulators.
//! Per staged chunk each plane loads its 2 A fragments (the staged input is `[k, m]`, a
//! column-major A) and the block's `bn / 16` B fragments (`[k, n]`, row-major), then runs every
//! pair. At the end each accumulator goes through a 16 x 16 f32 scratch of the plane's own in
//! shared memory to the output, in the orientation that lets neighbouring units store
//! neighbouring addresses (channels for a channels-last output, positions otherwise).
//!
//! Only launched where the runtime lists the matching cooperative-matrix configuration
//! (`f16 x f16 -> f32` or `bf16 x bf16 -> f32`, 16 x 16 x 16) and the plane has 32 units.

use cubecl::prelude::*;

use super::gemm::{a_slot, row_plan, tap_offsets, Dims, Strides, WeightWalk, Window};
use super::tile::Tile;

/// Units per plane the kernel is written for (NVIDIA's warp).
pub(super) const PLANE: u32 = 32;
/// Side of one cooperative matrix.
const FRAG: u32 = 16;

/// [`conv_gemm`](super::gemm::conv_gemm) with the product on tensor cores, the staged operands
/// in `S` (f16 or bf16).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub(super) fn conv_gemm_mma<X: Float, W: Float, Y: Float, S: Float>(
    x: &Tensor<X>,
    w: &Tensor<W>,
    y: &mut Tensor<Y>,
    dims: Dims,
    window: Window,
    xs: Strides,
    ws: WeightWalk,
    ys: Strides,
    #[comptime] tile: Tile,
    #[define(X, W, Y, S)] _dtypes: [StorageType; 4],
) {
    let bm = comptime!(tile.bm());
    let bn = comptime!(tile.bn());
    let bk = comptime!(tile.bk);
    let a_stride = comptime!(tile.a_stride());
    let m0 = (CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_X) * bm;
    if m0 >= dims.m {
        terminate!();
    }
    let n0 = CUBE_POS_Z * bn;
    let (rows_base, rows_d, rows_h, rows_w) = row_plan(&dims, &window, &xs, m0, tile);
    let mut a_s = SharedMemory::<S>::new_aligned(comptime!((bk * a_stride) as usize), 32usize);
    let mut b_s = SharedMemory::<S>::new_aligned(comptime!((bk * bn) as usize), 32usize);
    let frags_m = comptime!(tile.plane_rows() / FRAG);
    let frags_n = comptime!(bn / FRAG);
    let plane_row = (UNIT_POS / PLANE) * comptime!(tile.plane_rows());
    let mut acc = zeroed_accumulators(comptime!((frags_m * frags_n) as usize));
    let taps = window.taps_d * window.taps_h * window.taps_w;
    let chunks = dims.c_in.div_ceil(bk);
    let steps = taps * chunks;
    // One step is one tap and `bk` input channels. The next step's operands are loaded into
    // registers while this step's products run, so the loads' latency hides behind them.
    let mut ra = Array::<S>::new(comptime!((tile.a_rows() * tile.a_run) as usize));
    let mut rb = Array::<S>::new(comptime!(tile.b_loads() as usize));
    let mut offsets = tap_offsets(
        &rows_base, &rows_d, &rows_h, &rows_w, 0u32, 0u32, 0u32, &dims, &xs, tile,
    );
    let mut w_tap = ws.base;
    let mut tap = 0u32;
    let mut ci0 = 0u32;
    gather_a::<X, S>(x, &offsets, ci0, dims.c_in, xs.c, &mut ra, tile);
    gather_b::<W, S>(w, w_tap, ci0, n0, &dims, &ws, &mut rb, tile);
    for step in 0..steps {
        stage(&ra, &rb, &mut a_s, &mut b_s, tile);
        sync_cube();
        if step + 1 < steps {
            ci0 += bk;
            if ci0 >= dims.c_in {
                ci0 = 0;
                tap += 1;
                let jw = tap % window.taps_w;
                let jh = (tap / window.taps_w) % window.taps_h;
                let jd = tap / (window.taps_w * window.taps_h);
                let next = tap_offsets(
                    &rows_base, &rows_d, &rows_h, &rows_w, jd, jh, jw, &dims, &xs, tile,
                );
                #[unroll]
                for r in 0..tile.a_rows() {
                    offsets[r as usize] = next[r as usize];
                }
                w_tap = ws.base + jd as i32 * ws.d + jh as i32 * ws.h + jw as i32 * ws.w;
            }
            gather_a::<X, S>(x, &offsets, ci0, dims.c_in, xs.c, &mut ra, tile);
            gather_b::<W, S>(w, w_tap, ci0, n0, &dims, &ws, &mut rb, tile);
        }
        multiply::<S>(&a_s, &b_s, &mut acc, plane_row, tile);
        sync_cube();
    }
    write_out::<Y>(y, &acc, m0 + plane_row, n0, &dims, &ys, tile);
}

/// `count` 16 x 16 f32 accumulators, zero.
#[cube]
pub(super) fn zeroed_accumulators(#[comptime] count: usize) -> Sequence<cmma::Matrix<f32>> {
    let mut acc = Sequence::<cmma::Matrix<f32>>::new();
    #[unroll]
    for _i in 0..count {
        acc.push(cmma::Matrix::<f32>::from_value(
            cmma::MatrixIdent::Accumulator,
            16usize,
            16usize,
            16usize,
            cmma::MatrixLayout::Undefined,
            0.0,
        ));
    }
    acc
}

/// This unit's share of the `[bk, bm]` input tile of channels `ci0..ci0 + bk` (as in
/// the FMA kernel's `load_a`) into registers, in `S`: `a_run` channels of each of its
/// [`Tile::a_rows`] rows.
#[cube]
fn gather_a<X: Float, S: Float>(
    x: &Tensor<X>,
    offsets: &Array<i32>,
    ci0: u32,
    c_in: u32,
    channel_stride: u32,
    ra: &mut Array<S>,
    #[comptime] tile: Tile,
) {
    #[unroll]
    for r in 0..tile.a_rows() {
        let (row, k0) = a_slot(r, tile);
        let at = offsets[r as usize];
        #[unroll]
        for c in 0..tile.a_run {
            let ci = ci0 + k0 + c;
            let mut v = S::from_int(0);
            if row < comptime!(tile.bm()) && at >= 0 && ci < c_in {
                v = S::cast_from(x[(at as u32 + ci * channel_stride) as usize]);
            }
            ra[(r * tile.a_run + c) as usize] = v;
        }
    }
}

/// This unit's share of the `[bk, bn]` weight tile (as in the FMA kernel's `load_b`)
/// into registers, in `S`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn gather_b<W: Float, S: Float>(
    w: &Tensor<W>,
    w_tap: i32,
    ci0: u32,
    n0: u32,
    dims: &Dims,
    ws: &WeightWalk,
    rb: &mut Array<S>,
    #[comptime] tile: Tile,
) {
    let bn = comptime!(tile.bn());
    #[unroll]
    for j in 0..tile.b_loads() {
        let e = UNIT_POS + j * comptime!(tile.threads());
        let ci = ci0 + e / bn;
        let co = n0 + e % bn;
        let mut v = S::from_int(0);
        if e < comptime!(bn * tile.bk) && ci < dims.c_in && co < dims.c_out {
            v = S::cast_from(w[(w_tap + (ci * ws.ci + co * ws.co) as i32) as usize]);
        }
        rb[j as usize] = v;
    }
}

/// The registers [`gather_a`] and [`gather_b`] filled into the staged tiles.
#[cube]
fn stage<S: Float>(
    ra: &Array<S>,
    rb: &Array<S>,
    a_s: &mut SharedMemory<S>,
    b_s: &mut SharedMemory<S>,
    #[comptime] tile: Tile,
) {
    let a_stride = comptime!(tile.a_stride());
    #[unroll]
    for r in 0..tile.a_rows() {
        let (row, k0) = a_slot(r, tile);
        if row < comptime!(tile.bm()) {
            #[unroll]
            for c in 0..tile.a_run {
                a_s[((k0 + c) * a_stride + row) as usize] = ra[(r * tile.a_run + c) as usize];
            }
        }
    }
    #[unroll]
    for j in 0..tile.b_loads() {
        let e = UNIT_POS + j * comptime!(tile.threads());
        if e < comptime!(tile.bn() * tile.bk) {
            b_s[e as usize] = rb[j as usize];
        }
    }
}

/// Every accumulator of this plane plus the staged chunk's products, one 16-deep step of the
/// reduction at a time.
#[cube]
fn multiply<S: Float>(
    a_s: &SharedMemory<S>,
    b_s: &SharedMemory<S>,
    acc: &mut Sequence<cmma::Matrix<f32>>,
    plane_row: u32,
    #[comptime] tile: Tile,
) {
    let a_stride = comptime!(tile.a_stride());
    let bn = comptime!(tile.bn());
    let a_len = comptime!((tile.bk * tile.a_stride()) as usize);
    let b_len = comptime!((tile.bk * bn) as usize);
    let frags_m = comptime!(tile.plane_rows() / FRAG);
    let frags_n = comptime!(bn / FRAG);
    #[unroll]
    for ks in 0..tile.bk / FRAG {
        let mut a = Sequence::<cmma::Matrix<S>>::new();
        #[unroll]
        for i in 0..frags_m {
            let start = (ks * FRAG * a_stride + plane_row + i * FRAG) as usize;
            a.push(cmma::Matrix::<S>::from_slice(
                cmma::MatrixIdent::A,
                16usize,
                16usize,
                16usize,
                cmma::MatrixLayout::ColMajor,
                &a_s.slice(start, a_len),
                a_stride,
            ));
        }
        #[unroll]
        for j in 0..frags_n {
            let start = (ks * FRAG * bn + j * FRAG) as usize;
            let b = cmma::Matrix::<S>::from_slice(
                cmma::MatrixIdent::B,
                16usize,
                16usize,
                16usize,
                cmma::MatrixLayout::RowMajor,
                &b_s.slice(start, b_len),
                bn,
            );
            #[unroll]
            for i in 0..frags_m {
                let c = acc.index((i * frags_n + j) as usize);
                cmma::execute::<S, S, f32, f32>(a.index(i as usize), &b, c, c);
            }
        }
    }
}

/// Each accumulator through the plane's 16 x 16 scratch to `y` (rows from `row0`, channels
/// from `n0`; rows and channels past the last skipped).
#[cube]
fn write_out<Y: Float>(
    y: &mut Tensor<Y>,
    acc: &Sequence<cmma::Matrix<f32>>,
    row0: u32,
    n0: u32,
    dims: &Dims,
    ys: &Strides,
    #[comptime] tile: Tile,
) {
    let frag_len = comptime!(FRAG * FRAG);
    let mut scratch =
        SharedMemory::<f32>::new_aligned(comptime!((8 * FRAG * FRAG) as usize), 32usize);
    let base = (UNIT_POS / PLANE) * frag_len;
    let lane = UNIT_POS % PLANE;
    let frags_m = comptime!(tile.plane_rows() / FRAG);
    let frags_n = comptime!(tile.bn() / FRAG);
    // Channels-last: scratch rows are positions, neighbouring units take neighbouring channels.
    let layout = comptime!(if tile.out_channels_fastest {
        cmma::MatrixLayout::RowMajor
    } else {
        cmma::MatrixLayout::ColMajor
    });
    #[unroll]
    for i in 0..frags_m {
        #[unroll]
        for j in 0..frags_n {
            let mut view = scratch.slice_mut(base as usize, (base + frag_len) as usize);
            cmma::store(
                &mut view,
                acc.index((i * frags_n + j) as usize),
                FRAG,
                layout,
            );
            sync_plane();
            #[unroll]
            for e in 0..frag_len / PLANE {
                let at = e * PLANE + lane;
                let mut r = at % FRAG;
                let mut c = at / FRAG;
                if comptime!(tile.out_channels_fastest) {
                    r = at / FRAG;
                    c = at % FRAG;
                }
                let m = row0 + i * FRAG + r;
                let co = n0 + j * FRAG + c;
                if m < dims.m && co < dims.c_out {
                    let ow = m % dims.out_w;
                    let oh = (m / dims.out_w) % dims.out_h;
                    let rest = m / (dims.out_w * dims.out_h);
                    let od = rest % dims.out_d;
                    let b = rest / dims.out_d;
                    let out = ys.base + b * ys.n + od * ys.d + oh * ys.h + ow * ys.w + co * ys.c;
                    y[out as usize] = Y::cast_from(scratch[(base + at) as usize]);
                }
            }
            sync_plane();
        }
    }
}
