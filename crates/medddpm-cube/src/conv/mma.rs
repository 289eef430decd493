//! The implicit GEMM of [`gemm`](super::gemm) on tensor cores: the same implicit im2col (taps
//! outside, channels inside, strides for both layouts), the operands staged in their 16-bit
//! type and multiplied by 16 x 16 x 16 cooperative matrices with f32 accumulators (WMMA on
//! CUDA, `VK_KHR_cooperative_matrix` on Vulkan).
//!
//! A cube of 8 planes computes a `bm x bn` block ([`Tile::choose_tensor_cores`]): plane `p`
//! owns rows `p * bm / 8 ..` and every channel of the block, as `2 x bn / 16` accumulators.
//! The input tile is staged `[m, k]` (a row-major A) and the weight tile `[k, n]`, so that a
//! channels-last activation and the weight (output channels contiguous) are read and staged
//! as whole vectors of up to 8 channels (16 bytes; 4 on wgpu), one load and one shared store
//! where the scalar gather needed eight of each: that gather, not the products, was what the
//! kernel spent its instructions on (Nsight Compute, docs/benchmarks). At the end each
//! accumulator goes through a 16 x 16 f32 scratch of the plane's own to the output, in the
//! orientation that lets neighbouring units store neighbouring addresses (vectors of channels
//! for a channels-last output, positions otherwise).
//!
//! Only launched where the runtime lists the matching cooperative-matrix configuration
//! (`f16 x f16 -> f32` or `bf16 x bf16 -> f32`, 16 x 16 x 16) and the plane has 32 units.

use cubecl::prelude::*;

use super::gemm::{a_slot, row_plan, tap_offsets, Dims, Operands, Strides, WeightWalk, Window};
use super::mma_ldm::{accumulator_sets, multiply_ldm, write_out_ldm};
use super::mma_parts::{out_offset, PLANE};
use super::tile::Tile;

/// Side of one cooperative matrix.
const FRAG: u32 = 16;

/// [`conv_gemm`](super::gemm::conv_gemm) with the product on tensor cores, the staged operands
/// in `S` (f16 or bf16). `x`, `w` and `y` are read and written as vectors of `NA`, `NB` and
/// `NY` elements along their channels (1 unless [`vector_widths`](super::launch) found the
/// channels contiguous and every offset a multiple of the width).
///
/// One step of the reduction is one tap and `bk` input channels. The next step's operands are
/// loaded into registers while this step's products run, so the loads' latency hides behind
/// them. With two stages ([`Tile::stages`]), step `s` multiplies buffer `s % 2` while the other
/// is filled with step `s + 1`'s operands, so one barrier a step keeps both safe; with one,
/// the step's operands are staged first and a second barrier guards the buffer until every
/// plane is done with it.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
// `if comptime!(..) { if step + 1 < steps { .. } }` stays nested: the outer test is decided
// when the kernel is generated, the inner one at run time.
#[allow(clippy::collapsible_if)]
pub(super) fn conv_gemm_mma<
    X: Float,
    W: Float,
    Y: Float,
    S: Float,
    NA: Size,
    NB: Size,
    NY: Size,
>(
    x: &Tensor<Vector<X, NA>>,
    w: &Tensor<Vector<W, NB>>,
    y: &mut Tensor<Vector<Y, NY>>,
    args: Operands,
    #[comptime] tile: Tile,
    #[define(X, W, Y, S)] _dtypes: [StorageType; 4],
) {
    let (dims, window, xs, ws, ys) = args;
    let m0 = (CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_X) * comptime!(tile.bm());
    if m0 >= dims.m {
        terminate!();
    }
    let n0 = CUBE_POS_Z * comptime!(tile.bn());
    let na_size = NA::value();
    let na = comptime!(na_size as u32);
    let nb_size = NB::value();
    let nb = comptime!(nb_size as u32);
    let rows = row_plan(&dims, &window, &xs, m0, tile);
    let a_len = comptime!((tile.bm() * tile.a_stride() / na) as usize);
    let b_len = comptime!((tile.bk * tile.b_stride() / nb) as usize);
    let (a_size, b_size) = comptime!((tile.stages as usize * a_len, tile.stages as usize * b_len));
    let mut a_s = SharedMemory::<Vector<S, NA>>::new_aligned(a_size, 32usize);
    let mut b_s = SharedMemory::<Vector<S, NB>>::new_aligned(b_size, 32usize);
    let plane_row = (UNIT_POS / PLANE) * comptime!(tile.plane_rows());
    let blocks = comptime!((tile.plane_rows() * tile.bn() / 256) as usize);
    let (mut acc, mut regs) = accumulator_sets(blocks, tile.ldmatrix);
    let steps =
        window.taps_d * window.taps_h * window.taps_w * dims.c_in.div_ceil(comptime!(tile.bk));
    let mut ra = Array::<Vector<S, NA>>::new(comptime!((tile.a_rows() * tile.a_run / na) as usize));
    let mut rb = Array::<Vector<S, NB>>::new(comptime!(b_vectors(tile, nb) as usize));
    let mut offsets = Array::<i32>::new(comptime!(tile.a_rows() as usize));
    let mut w_tap = enter_tap(0u32, &rows, &mut offsets, &dims, &window, &xs, &ws, tile);
    let mut tap = 0u32;
    let mut ci0 = 0u32;
    gather_a::<X, S, NA>(x, &offsets, ci0, dims.c_in, xs.c, &mut ra, tile);
    gather_b::<W, S, NB>(w, w_tap, ci0, n0, &dims, &ws, &mut rb, tile);
    if comptime!(tile.stages == 2) {
        stage::<S, NA, NB>(&ra, &rb, &mut a_s, &mut b_s, 0usize, 0usize, tile);
        sync_cube();
    }
    for step in 0..steps {
        let now = (step % comptime!(tile.stages)) as usize;
        if comptime!(tile.stages == 1) {
            stage::<S, NA, NB>(&ra, &rb, &mut a_s, &mut b_s, 0usize, 0usize, tile);
            sync_cube();
        }
        if step + 1 < steps {
            ci0 += comptime!(tile.bk);
            if ci0 >= dims.c_in {
                ci0 = 0;
                tap += 1;
                w_tap = enter_tap(tap, &rows, &mut offsets, &dims, &window, &xs, &ws, tile);
            }
            gather_a::<X, S, NA>(x, &offsets, ci0, dims.c_in, xs.c, &mut ra, tile);
            gather_b::<W, S, NB>(w, w_tap, ci0, n0, &dims, &ws, &mut rb, tile);
        }
        let at = (now * a_len, now * b_len);
        products::<S, NA, NB>(&a_s, &b_s, &mut acc, &mut regs, plane_row, at, tile);
        if comptime!(tile.stages == 2) {
            if step + 1 < steps {
                let (a_next, b_next) = ((1 - now) * a_len, (1 - now) * b_len);
                stage::<S, NA, NB>(&ra, &rb, &mut a_s, &mut b_s, a_next, b_next, tile);
            }
        }
        sync_cube();
    }
    finish::<Y, NY>(y, &acc, &regs, (m0 + plane_row, n0), &dims, &ys, tile);
}

/// Whichever accumulator set `tile` uses to `y` ([`write_out`] or [`write_out_ldm`]) from
/// `corner = (row, channel)`.
#[cube]
fn finish<Y: Float, NY: Size>(
    y: &mut Tensor<Vector<Y, NY>>,
    acc: &Sequence<cmma::Matrix<f32>>,
    regs: &Array<Vector<f32, Const<2>>>,
    corner: (u32, u32),
    dims: &Dims,
    ys: &Strides,
    #[comptime] tile: Tile,
) {
    let (row0, n0) = corner;
    if comptime!(tile.ldmatrix) {
        write_out_ldm::<Y, NY>(y, regs, row0, n0, dims, ys, tile);
    } else {
        write_out::<Y, NY>(y, acc, row0, n0, dims, ys, tile);
    }
}

/// This step's products into whichever accumulator set `tile` uses ([`multiply`] or
/// [`multiply_ldm`]), from vectors `at = (a, b)` of the staged buffers.
#[cube]
#[allow(clippy::too_many_arguments)]
fn products<S: Float, NA: Size, NB: Size>(
    a_s: &SharedMemory<Vector<S, NA>>,
    b_s: &SharedMemory<Vector<S, NB>>,
    matrices: &mut Sequence<cmma::Matrix<f32>>,
    registers: &mut Array<Vector<f32, Const<2>>>,
    plane_row: u32,
    at: (usize, usize),
    #[comptime] tile: Tile,
) {
    let (a_at, b_at) = at;
    if comptime!(tile.ldmatrix) {
        multiply_ldm::<S, NA, NB>(a_s, b_s, registers, plane_row, a_at, b_at, tile);
    } else {
        multiply::<S, NA, NB>(a_s, b_s, matrices, plane_row, a_at, b_at, tile);
    }
}

/// Moves the reduction on to tap `tap`: the planned rows' ([`row_plan`]) input offsets for it
/// into `offsets` (see [`tap_offsets`]), and the offset of its weights, returned.
#[cube]
#[allow(clippy::too_many_arguments)]
fn enter_tap(
    tap: u32,
    rows: &(Array<u32>, Array<i32>, Array<i32>, Array<i32>),
    offsets: &mut Array<i32>,
    dims: &Dims,
    window: &Window,
    xs: &Strides,
    ws: &WeightWalk,
    #[comptime] tile: Tile,
) -> i32 {
    let jw = tap % window.taps_w;
    let jh = (tap / window.taps_w) % window.taps_h;
    let jd = tap / (window.taps_w * window.taps_h);
    let next = tap_offsets(
        &rows.0, &rows.1, &rows.2, &rows.3, jd, jh, jw, dims, xs, tile,
    );
    #[unroll]
    for r in 0..tile.a_rows() {
        offsets[r as usize] = next[r as usize];
    }
    ws.base + jd as i32 * ws.d + jh as i32 * ws.h + jw as i32 * ws.w
}

/// Vectors of `nb` weights each unit stages per step.
fn b_vectors(tile: Tile, nb: u32) -> u32 {
    (tile.bn() * tile.bk / nb).div_ceil(tile.threads())
}

/// This unit's share of the `[bm, bk]` input tile of channels `ci0..ci0 + bk` (rows and
/// runs as the FMA kernel's, [`a_slot`]) into registers, in `S`: `a_run` channels of each of
/// its [`Tile::a_rows`] rows, `NA` at a time (`NA > 1` only where the channels are contiguous
/// and `c_in` a multiple of `NA`, so a vector is wholly inside or past the last channel).
#[cube]
fn gather_a<X: Float, S: Float, NA: Size>(
    x: &Tensor<Vector<X, NA>>,
    offsets: &Array<i32>,
    ci0: u32,
    c_in: u32,
    channel_stride: u32,
    ra: &mut Array<Vector<S, NA>>,
    #[comptime] tile: Tile,
) {
    let na_size = NA::value();
    let na = comptime!(na_size as u32);
    let per_row = comptime!(tile.a_run / na);
    #[unroll]
    for r in 0..tile.a_rows() {
        let (row, k0) = a_slot(r, tile);
        let at = offsets[r as usize];
        #[unroll]
        for c in 0..per_row {
            let ci = ci0 + k0 + c * na;
            let mut v = Vector::<S, NA>::new(S::from_int(0));
            if row < comptime!(tile.bm()) && at >= 0 && ci < c_in {
                v = Vector::<S, NA>::cast_from(
                    x[((at as u32 + ci * channel_stride) / na) as usize],
                );
            }
            ra[(r * per_row + c) as usize] = v;
        }
    }
}

/// This unit's share of the `[bk, bn]` weight tile (output channels contiguous in `w`) into
/// registers, in `S`, `NB` output channels at a time.
#[cube]
#[allow(clippy::too_many_arguments)]
fn gather_b<W: Float, S: Float, NB: Size>(
    w: &Tensor<Vector<W, NB>>,
    w_tap: i32,
    ci0: u32,
    n0: u32,
    dims: &Dims,
    ws: &WeightWalk,
    rb: &mut Array<Vector<S, NB>>,
    #[comptime] tile: Tile,
) {
    let nb_size = NB::value();
    let nb = comptime!(nb_size as u32);
    let row = comptime!(tile.bn() / nb);
    #[unroll]
    for j in 0..comptime!(b_vectors(tile, nb)) {
        let e = UNIT_POS + j * comptime!(tile.threads());
        let ci = ci0 + e / row;
        let co = n0 + (e % row) * nb;
        let mut v = Vector::<S, NB>::new(S::from_int(0));
        if e < comptime!(row * tile.bk) && ci < dims.c_in && co < dims.c_out {
            let at = (w_tap + (ci * ws.ci + co * ws.co) as i32) as u32;
            v = Vector::<S, NB>::cast_from(w[(at / nb) as usize]);
        }
        rb[j as usize] = v;
    }
}

/// The registers [`gather_a`] and [`gather_b`] filled into the staged tiles from vectors
/// `a_at`, `b_at` of the buffers (the stage's): A as `[m, k]` rows [`Tile::a_stride`] apart,
/// B as `[k, n]` rows [`Tile::b_stride`] apart.
#[cube]
#[allow(clippy::too_many_arguments)]
fn stage<S: Float, NA: Size, NB: Size>(
    ra: &Array<Vector<S, NA>>,
    rb: &Array<Vector<S, NB>>,
    a_s: &mut SharedMemory<Vector<S, NA>>,
    b_s: &mut SharedMemory<Vector<S, NB>>,
    a_at: usize,
    b_at: usize,
    #[comptime] tile: Tile,
) {
    let na_size = NA::value();
    let na = comptime!(na_size as u32);
    let nb_size = NB::value();
    let nb = comptime!(nb_size as u32);
    let per_row = comptime!(tile.a_run / na);
    let a_stride = comptime!(tile.a_stride());
    #[unroll]
    for r in 0..tile.a_rows() {
        let (row, k0) = a_slot(r, tile);
        if row < comptime!(tile.bm()) {
            #[unroll]
            for c in 0..per_row {
                a_s[a_at + ((row * a_stride + k0) / na + c) as usize] =
                    ra[(r * per_row + c) as usize];
            }
        }
    }
    let row = comptime!(tile.bn() / nb);
    let b_row = comptime!(tile.b_stride() / nb);
    #[unroll]
    for j in 0..comptime!(b_vectors(tile, nb)) {
        let e = UNIT_POS + j * comptime!(tile.threads());
        if e < comptime!(row * tile.bk) {
            b_s[b_at + ((e / row) * b_row + e % row) as usize] = rb[j as usize];
        }
    }
}

/// Every accumulator of this plane plus the products of the chunk staged from vectors `a_at`,
/// `b_at` of the buffers, one 16-deep step of the reduction at a time.
#[cube]
#[allow(clippy::too_many_arguments)]
fn multiply<S: Float, NA: Size, NB: Size>(
    a_s: &SharedMemory<Vector<S, NA>>,
    b_s: &SharedMemory<Vector<S, NB>>,
    acc: &mut Sequence<cmma::Matrix<f32>>,
    plane_row: u32,
    a_at: usize,
    b_at: usize,
    #[comptime] tile: Tile,
) {
    let na_size = NA::value();
    let na = comptime!(na_size as u32);
    let nb_size = NB::value();
    let nb = comptime!(nb_size as u32);
    let a_stride = comptime!(tile.a_stride());
    let b_stride = comptime!(tile.b_stride());
    let a_len = comptime!((tile.stages * tile.bm() * a_stride / na) as usize);
    let b_len = comptime!((tile.stages * tile.bk * b_stride / nb) as usize);
    let frags_m = comptime!(tile.plane_rows() / FRAG);
    let frags_n = comptime!(tile.bn() / FRAG);
    #[unroll]
    for ks in 0..tile.bk / FRAG {
        let mut a = Sequence::<cmma::Matrix<S>>::new();
        #[unroll]
        for i in 0..frags_m {
            let start = a_at + (((plane_row + i * FRAG) * a_stride + ks * FRAG) / na) as usize;
            a.push(fragment::<S, NA>(
                cmma::MatrixIdent::A,
                cmma::MatrixLayout::RowMajor,
                &a_s.slice(start, a_len),
                a_stride,
            ));
        }
        #[unroll]
        for j in 0..frags_n {
            let start = b_at + ((ks * FRAG * b_stride + j * FRAG) / nb) as usize;
            let b = fragment::<S, NB>(
                cmma::MatrixIdent::B,
                cmma::MatrixLayout::RowMajor,
                &b_s.slice(start, b_len),
                b_stride,
            );
            #[unroll]
            for i in 0..frags_m {
                let c = acc.index((i * frags_n + j) as usize);
                cmma::execute::<S, S, f32, f32>(a.index(i as usize), &b, c, c);
            }
        }
    }
}

/// A 16 x 16 operand loaded from staged rows (or columns, as `layout` says) `stride` elements
/// apart, stored as vectors of `N`.
#[cube]
pub(super) fn fragment<S: Float, N: Size>(
    #[comptime] ident: cmma::MatrixIdent,
    layout: cmma::MatrixLayout,
    rows: &Slice<Vector<S, N>>,
    stride: u32,
) -> cmma::Matrix<S> {
    // SAFETY: every element of the matrix is loaded right below.
    let m = unsafe { cmma::Matrix::<S>::uninitialized(ident, 16usize, 16usize, 16usize, layout) };
    cmma::load(&m, rows, stride);
    m
}

/// Each accumulator through the plane's 16 x 16 scratch to `y` (rows from `row0`, channels
/// from `n0`; rows and channels past the last skipped). With `NY > 1` (a channels-last output)
/// each unit stores `NY` neighbouring channels of one position as one vector.
#[cube]
fn write_out<Y: Float, NY: Size>(
    y: &mut Tensor<Vector<Y, NY>>,
    acc: &Sequence<cmma::Matrix<f32>>,
    row0: u32,
    n0: u32,
    dims: &Dims,
    ys: &Strides,
    #[comptime] tile: Tile,
) {
    let ny_size = NY::value();
    let ny = comptime!(ny_size as u32);
    let frag_len = comptime!(FRAG * FRAG);
    let mut scratch = SharedMemory::<Vector<f32, NY>>::new_aligned(
        comptime!((tile.planes() * frag_len / ny) as usize),
        32usize,
    );
    let base = (UNIT_POS / PLANE) * comptime!(frag_len / ny);
    let lane = UNIT_POS % PLANE;
    let frags_m = comptime!(tile.plane_rows() / FRAG);
    let frags_n = comptime!(tile.bn() / FRAG);
    // Channels-last: scratch rows are positions, neighbouring units take neighbouring channels.
    let layout = comptime!(if tile.out_channels_fastest {
        cmma::MatrixLayout::RowMajor
    } else {
        cmma::MatrixLayout::ColMajor
    });
    let per_row = comptime!(FRAG / ny);
    #[unroll]
    for i in 0..frags_m {
        #[unroll]
        for j in 0..frags_n {
            let mut view = scratch.slice_mut(base as usize, (base + frag_len / ny) as usize);
            cmma::store(
                &mut view,
                acc.index((i * frags_n + j) as usize),
                FRAG,
                layout,
            );
            sync_plane();
            #[unroll]
            for e in 0..frag_len / ny / PLANE {
                let at = e * PLANE + lane;
                let mut r = at % FRAG;
                let mut c = at / FRAG;
                if comptime!(tile.out_channels_fastest) {
                    r = at / per_row;
                    c = (at % per_row) * ny;
                }
                let m = row0 + i * FRAG + r;
                let co = n0 + j * FRAG + c;
                if m < dims.m && co < dims.c_out {
                    let out = out_offset(m, co, dims, ys);
                    y[(out / ny) as usize] =
                        Vector::<Y, NY>::cast_from(scratch[(base + at) as usize]);
                }
            }
            sync_plane();
        }
    }
}
