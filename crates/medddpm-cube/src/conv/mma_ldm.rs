//! The products of [`conv_gemm_mma`](super::mma::conv_gemm_mma) on CUDA's own instructions:
//! `ldmatrix` loads of the staged tiles and `mma.sync` 16 x 8 x 16 products on registers the
//! kernel holds, where the cooperative-matrix path ([`multiply`](super::mma)) compiles to
//! generic loads, byte permutes and transposes (NVRTC's `wmma::load_matrix_sync` for bf16:
//! 42 % of the forward kernel's instructions on an H100, Nsight Compute).
//!
//! Register layouts (PTX ISA, `mma.m16n8k16` with 16-bit operands): lane `l` holds, with `g =
//! l / 4` and `t = l % 4`, A's elements `(g, 2t..2t+1)`, `(g + 8, ..)`, `(g, 2t + 8..)`, `(g +
//! 8, 2t + 8..)`, B's `(2t..2t+1, g)` and `(2t + 8.., g)`, and the accumulator's `(g, 2t..2t+1)`
//! and `(g + 8, 2t..2t+1)`. One `ldmatrix.x4` gives a 16 x 16 A block as those four registers
//! (lanes `8q..8q+7` pointing at the rows of 8 x 8 block `q`), and one `ldmatrix.x4.trans` of
//! a `[k, n]` tile gives the B registers of two neighbouring 8-column products.

use cubecl::cmma::MmaDefinition;
use cubecl::ir::MatrixIdent;
use cubecl::prelude::*;

use super::gemm::{Dims, Strides};
use super::mma_parts::{out_offset, zeroed_accumulators, PLANE};
use super::tile::Tile;

/// Side of one staged 16 x 16 block.
const FRAG: u32 = 16;

/// Two f32 of one accumulator row, as `mma.sync` holds them.
type Pair = Vector<f32, Const<2>>;

/// A tensor-core kernel's accumulators for `blocks` 16 x 16 blocks a plane, as two sets of
/// which one is empty: cooperative matrices, or where `ldmatrix` the `mma.sync` registers
/// (four vectors a block: two 16 x 8 products of two rows each).
#[cube]
pub(super) fn accumulator_sets(
    #[comptime] blocks: usize,
    #[comptime] ldmatrix: bool,
) -> (Sequence<cmma::Matrix<f32>>, Array<Pair>) {
    let (matrices, registers) = comptime!(if ldmatrix {
        (0, blocks * 4)
    } else {
        (blocks, 0)
    });
    (zeroed_accumulators(matrices), zeroed_registers(registers))
}

/// `count` accumulator vectors, zero.
#[cube]
pub(super) fn zeroed_registers(#[comptime] count: usize) -> Array<Pair> {
    let mut acc = Array::<Pair>::new(count);
    #[unroll]
    for i in 0..count {
        acc[i] = Pair::new(0.0);
    }
    acc
}

/// Every accumulator of this plane plus the products of the chunk staged from vectors `a_at`,
/// `b_at` of the buffers (A `[m, k]`, B `[k, n]`, rows [`Tile::a_stride`] and
/// [`Tile::b_stride`] apart, both 16-byte aligned), one 16-deep step at a time.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn multiply_ldm<S: Float, NA: Size, NB: Size>(
    a_s: &SharedMemory<Vector<S, NA>>,
    b_s: &SharedMemory<Vector<S, NB>>,
    acc: &mut Array<Pair>,
    plane_row: u32,
    a_at: usize,
    b_at: usize,
    #[comptime] tile: Tile,
) {
    let strides = comptime!((tile.a_stride(), tile.b_stride()));
    let (frags_m, blocks_n) = comptime!((tile.plane_rows() / FRAG, tile.bn() / FRAG));
    products_ldm::<S, NA, NB>(
        a_s,
        b_s,
        acc,
        (plane_row, 0u32),
        (a_at, b_at),
        strides,
        tile.bk,
        frags_m,
        blocks_n,
        false,
    );
}

/// This plane's `16 frags_m x 16 blocks_n` block of products (from `corner = (row, column)`
/// of the staged tiles) over `depth` staged rows of the reduction, added to `acc`. A is staged
/// `[m, k]`, or `[k, m]` where `a_trans` (the weight gradient's), B `[k, n]`; `at` are the
/// stage's first vectors, `strides` the rows' distances in elements (multiples of 8: rows stay
/// 16-byte aligned for `ldmatrix`).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn products_ldm<S: Float, NA: Size, NB: Size>(
    a_s: &SharedMemory<Vector<S, NA>>,
    b_s: &SharedMemory<Vector<S, NB>>,
    acc: &mut Array<Pair>,
    corner: (u32, u32),
    at: (usize, usize),
    #[comptime] strides: (u32, u32),
    #[comptime] depth: u32,
    #[comptime] frags_m: u32,
    #[comptime] blocks_n: u32,
    #[comptime] a_trans: bool,
) {
    let def = MmaDefinition::<S, S, f32>::new(16usize, 8usize, 16usize);
    let na_size = NA::value();
    let na = comptime!(na_size as u32);
    let nb_size = NB::value();
    let nb = comptime!(nb_size as u32);
    let (a_stride, b_stride) = strides;
    let (row0, col0) = corner;
    let (a_at, b_at) = at;
    let lane = UNIT_POS % PLANE;
    // Lanes `8q..8q+7` point `ldmatrix` at the rows of 8 x 8 block `q`: (0-7, 0-7), (8-15,
    // 0-7), (0-7, 8-15), (8-15, 8-15) of a 16 x 16 operand, as (row, column) of A and (k, n)
    // of B; a transposed A stages those blocks' columns as rows.
    let (r8, hi, c) = (lane % 8, (lane / 8) % 2 * 8, lane / 16 * 8);
    #[unroll]
    for ks in 0..depth / FRAG {
        let mut a = Sequence::<Array<Vector<S, Const<2>>>>::new();
        #[unroll]
        for i in 0..frags_m {
            let mut e = (row0 + i * FRAG + r8 + hi) * a_stride + ks * FRAG + c;
            if a_trans {
                e = (ks * FRAG + r8 + c) * a_stride + row0 + i * FRAG + hi;
            }
            let rows = a_s.slice(a_at + (e / na) as usize, a_s.len());
            a.push(def.load_matrix::<Vector<S, NA>, Const<2>>(
                &rows,
                MatrixIdent::A,
                4usize,
                a_trans,
            ));
        }
        #[unroll]
        for j in 0..blocks_n {
            let e = (ks * FRAG + r8 + hi) * b_stride + col0 + j * FRAG + c;
            let rows = b_s.slice(b_at + (e / nb) as usize, b_s.len());
            let b = def.load_matrix::<Vector<S, NB>, Const<2>>(&rows, MatrixIdent::B, 4usize, true);
            #[unroll]
            for h in 0..2u32 {
                let mut bh = Array::<Vector<S, Const<2>>>::new(2usize);
                bh[0] = b[(2 * h) as usize];
                bh[1] = b[(2 * h + 1) as usize];
                #[unroll]
                for i in 0..frags_m {
                    let at = (((i * blocks_n + j) * 2 + h) * 2) as usize;
                    let mut cd = Array::<Pair>::new(2usize);
                    cd[0] = acc[at];
                    cd[1] = acc[at + 1];
                    let d = def.execute(a.index(i as usize), &bh, &cd);
                    acc[at] = d[0];
                    acc[at + 1] = d[1];
                }
            }
        }
    }
}

/// The `16 frags_m x 16 blocks_n` sums of [`products_ldm`] into `ws[base + m * n_total + n]`
/// (`corner = (m0, n0, base)` of the plane's block), rows and columns past the last skipped:
/// each lane its own pairs of neighbouring columns.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn store_partial_ldm(
    ws: &mut Tensor<f32>,
    acc: &Array<Pair>,
    corner: (usize, usize, usize),
    m_total: usize,
    n_total: usize,
    #[comptime] frags_m: usize,
    #[comptime] blocks_n: usize,
) {
    let (m0, n0, base) = corner;
    let lane = UNIT_POS as usize % PLANE as usize;
    let (g, t) = (lane / 4, lane % 4);
    #[unroll]
    for i in 0..frags_m {
        #[unroll]
        for j in 0..blocks_n {
            #[unroll]
            for q in 0..4usize {
                let pair = acc[((i * blocks_n + j) * 2 + q / 2) * 2 + q % 2];
                let m = m0 + i * 16 + g + q % 2 * 8;
                #[unroll]
                for e in 0..2usize {
                    let n = n0 + j * 16 + q / 2 * 8 + 2 * t + e;
                    if m < m_total && n < n_total {
                        ws[base + m * n_total + n] = pair[e];
                    }
                }
            }
        }
    }
}

/// Each 16 x 16 block of this plane's accumulators through its 16 x 16 f32 scratch to `y`
/// (rows from `row0`, channels from `n0`; rows and channels past the last skipped), as
/// `write_out` does for the cooperative matrices: with `NY > 1` each unit stores `NY`
/// neighbouring channels of one position as one vector.
#[cube]
pub(super) fn write_out_ldm<Y: Float, NY: Size>(
    y: &mut Tensor<Vector<Y, NY>>,
    acc: &Array<Pair>,
    row0: u32,
    n0: u32,
    dims: &Dims,
    ys: &Strides,
    #[comptime] tile: Tile,
) {
    let ny_size = NY::value();
    let ny = comptime!(ny_size as u32);
    let frag_len = comptime!(FRAG * FRAG);
    let mut scratch = SharedMemory::<f32>::new(comptime!((tile.planes() * frag_len) as usize));
    let base = (UNIT_POS / PLANE) * frag_len;
    let lane = UNIT_POS % PLANE;
    let (g, t) = (lane / 4, lane % 4);
    let frags_m = comptime!(tile.plane_rows() / FRAG);
    let blocks_n = comptime!(tile.bn() / FRAG);
    let fastest = comptime!(tile.out_channels_fastest);
    let per_row = comptime!(FRAG / ny);
    #[unroll]
    for i in 0..frags_m {
        #[unroll]
        for j in 0..blocks_n {
            #[unroll]
            for q in 0..4u32 {
                // Product `h = q / 2` of the block, row `g + 8 (q % 2)`.
                let pair = acc[(((i * blocks_n + j) * 2 + q / 2) * 2 + q % 2) as usize];
                let r = g + q % 2 * 8;
                #[unroll]
                for e in 0..2u32 {
                    let c = q / 2 * 8 + 2 * t + e;
                    let mut at = c * FRAG + r;
                    if fastest {
                        at = r * FRAG + c;
                    }
                    scratch[(base + at) as usize] = pair[e as usize];
                }
            }
            sync_plane();
            #[unroll]
            for e in 0..frag_len / ny / PLANE {
                let at = e * PLANE + lane;
                let mut r = at % FRAG;
                let mut c = at / FRAG;
                if fastest {
                    r = at / per_row;
                    c = (at % per_row) * ny;
                }
                let m = row0 + i * FRAG + r;
                let co = n0 + j * FRAG + c;
                if m < dims.m && co < dims.c_out {
                    let mut v = Vector::<f32, NY>::empty();
                    #[unroll]
                    for l in 0..ny {
                        v[l as usize] = scratch[(base + at * ny + l) as usize];
                    }
                    let out = out_offset(m, co, dims, ys);
                    y[(out / ny) as usize] = Vector::<Y, NY>::cast_from(v);
                }
            }
            sync_plane();
        }
    }
}
