//! [`wgrad_partial`](super::kernel::wgrad_partial) on tensor cores: the same split-K tiles,
//! loads and staging order, the staged rows in the operands' 16-bit type, and each step's
//! `16 tm x BK` by `BK x 16 tn` product as 16 x 16 x 16 cooperative matrices with f32
//! accumulators (WMMA on CUDA).
//!
//! The tile's `tm x tn` accumulators are shared by the cube's 8 planes: a grid of
//! `planes_m x planes_n` planes ([`planes`]), each owning `tm / planes_m` by `tn / planes_n`
//! of them. Staged A is `[k, m]` (a column-major A), staged B `[k, n]` (row-major), rows 8
//! elements longer than the tile so that they stay 16-byte aligned. The partial sums leave
//! through a 16 x 16 f32 scratch per plane, neighbouring units storing neighbouring columns
//! of the workspace.

use cubecl::prelude::*;

use super::super::mma::fragment;
pub(super) use super::super::mma_parts::zeroed_accumulators;
use super::kernel::{Scalars, BK, SIDE, VEC};
use super::walk::{first_row, next_row};

/// Staged 16-bit values one at a time (the scalar kernel's).
type One<S> = Vector<S, Const<1>>;

/// Units per plane the kernel is written for (NVIDIA's warp).
const PLANE: usize = 32;
/// Side of one cooperative matrix.
const FRAG: usize = 16;
/// Planes per cube (`SIDE * SIDE / PLANE`).
const PLANES: usize = 8;

/// Planes along M and along N for a tile of `tm x tn` accumulators (`tm` in 1, 2, 4, 8; `tn`
/// 4, 8 or 16): two rows of planes where there are two rows of accumulators, else one. Planes
/// past `planes_m * planes_n` stage but do not multiply (only a one-row tile, `tm = 1` with
/// `tn = 4`, leaves four idle).
pub(super) fn planes(tm: usize, tn: usize) -> (usize, usize) {
    let planes_m = if tm >= 2 { 2 } else { 1 };
    (planes_m, (PLANES / planes_m).min(tn))
}

/// Accumulators each plane owns of a `tm x tn` tile: `(rows, columns)`.
pub(super) fn plane_share(tm: usize, tn: usize) -> (usize, usize) {
    let (planes_m, planes_n) = planes(tm, tn);
    (tm / planes_m, tn / planes_n)
}

/// Whether unit `tid`'s plane multiplies, and the first row and column of its accumulators.
#[cube]
pub(super) fn plane_place(
    tid: usize,
    #[comptime] tm: usize,
    #[comptime] tn: usize,
) -> (bool, usize, usize) {
    let planes_n = comptime!(planes(tm, tn).1);
    let (pm, pn) = comptime!(plane_share(tm, tn));
    let plane = tid / PLANE;
    let active = plane < comptime!(planes(tm, tn).0 * planes_n);
    (
        active,
        (plane / planes_n) * pm * FRAG,
        (plane % planes_n) * pn * FRAG,
    )
}

/// The partial sums of one `16 tm x 16 tn` tile of `dL/dw` over K slice `CUBE_POS_Z` into
/// `ws[slice, m, n]`, as [`wgrad_partial`](super::kernel::wgrad_partial) but on tensor cores
/// (operands staged as `S`).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub(super) fn wgrad_partial_mma<FX: Float, FY: Float, S: Float>(
    x: &Tensor<FX>,
    dy: &Tensor<FY>,
    ws: &mut Tensor<f32>,
    scalars: Scalars,
    #[comptime] tm: usize,
    #[comptime] tn: usize,
    #[comptime] channels_last: bool,
    #[define(FX, FY, S)] _dtypes: [StorageType; 3],
) {
    let sa = comptime!(SIDE * tm + 8);
    let sb = comptime!(SIDE * tn + 8);
    let mut a_s = SharedMemory::<One<S>>::new_aligned(BK * sa, 32usize);
    let mut b_s = SharedMemory::<One<S>>::new_aligned(BK * sb, 32usize);
    let tid = UNIT_POS_Y as usize * SIDE + UNIT_POS_X as usize;
    let (pm, pn) = comptime!(plane_share(tm, tn));
    let (active, row0, col0) = plane_place(tid, tm, tn);
    let mut acc = zeroed_accumulators(pm * pn);
    let (mut ra, mut rb) = (Array::<f32>::new(tm), Array::<f32>::new(tn));
    let mut w = first_row::<FX, FY>(x, dy, scalars, tid, &mut ra, &mut rb, tm, tn, channels_last);
    while w.k0 < w.k_end {
        stage::<S>(&mut a_s, &mut b_s, &ra, &rb, w.kk, w.g, tm, tn);
        sync_cube();
        next_row::<FX, FY>(x, dy, &mut w, &mut ra, &mut rb, tm, tn);
        if active {
            multiply::<S, Const<1>, Const<1>>(
                &a_s,
                &b_s,
                &mut acc,
                (row0, col0),
                0usize,
                0usize,
                BK,
                tm,
                tn,
                pm,
                pn,
            );
        }
        sync_cube();
    }
    if active {
        let corner = (w.m0 + row0, w.n0 + col0, w.slice * w.m_total * w.n_total);
        store_partial(ws, &acc, corner, tid, w.m_total, w.n_total, pm, pn);
    }
}

/// The loaded K row into shared memory as `S`: A at `[kk, g + 16 i]`, B at `[kk, c]` for the
/// unit's columns `c = 4 g + l + 64 jj` of the tile.
#[cube]
#[allow(clippy::too_many_arguments)]
fn stage<S: Float>(
    a_s: &mut SharedMemory<One<S>>,
    b_s: &mut SharedMemory<One<S>>,
    ra: &Array<f32>,
    rb: &Array<f32>,
    kk: usize,
    g: usize,
    #[comptime] tm: usize,
    #[comptime] tn: usize,
) {
    let sa = comptime!(SIDE * tm + 8);
    let sb = comptime!(SIDE * tn + 8);
    #[unroll]
    for i in 0..tm {
        a_s[kk * sa + g + SIDE * i] = One::<S>::new(S::cast_from(ra[i]));
    }
    #[unroll]
    for j in 0..tn {
        let c = VEC * g + j % VEC + SIDE * VEC * (j / VEC);
        b_s[kk * sb + c] = One::<S>::new(S::cast_from(rb[j]));
    }
}

/// This plane's `pm x pn` accumulators plus the products over `depth` K rows of the stage
/// starting at vectors `a_at` of A and `b_at` of B
/// (A staged `[k, m]` as vectors of `NA`, B `[k, n]` as vectors of `NB`, rows 8 elements
/// longer than the tile).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn multiply<S: Float, NA: Size, NB: Size>(
    a_s: &SharedMemory<Vector<S, NA>>,
    b_s: &SharedMemory<Vector<S, NB>>,
    acc: &mut Sequence<cmma::Matrix<f32>>,
    corner: (usize, usize),
    a_at: usize,
    b_at: usize,
    #[comptime] depth: usize,
    #[comptime] tm: usize,
    #[comptime] tn: usize,
    #[comptime] pm: usize,
    #[comptime] pn: usize,
) {
    let (row0, col0) = corner;
    let u = NA::value();
    let v = NB::value();
    let sa = comptime!(SIDE * tm + 8);
    let sb = comptime!(SIDE * tn + 8);
    #[unroll]
    for ks in 0..depth / FRAG {
        let mut a = Sequence::<cmma::Matrix<S>>::new();
        #[unroll]
        for i in 0..pm {
            a.push(fragment::<S, NA>(
                cmma::MatrixIdent::A,
                cmma::MatrixLayout::ColMajor,
                &a_s.slice(a_at + (ks * FRAG * sa + row0 + i * FRAG) / u, a_s.len()),
                sa as u32,
            ));
        }
        #[unroll]
        for j in 0..pn {
            let b = fragment::<S, NB>(
                cmma::MatrixIdent::B,
                cmma::MatrixLayout::RowMajor,
                &b_s.slice(b_at + (ks * FRAG * sb + col0 + j * FRAG) / v, b_s.len()),
                sb as u32,
            );
            #[unroll]
            for i in 0..pm {
                let c = acc.index(i * pn + j);
                cmma::execute::<S, S, f32, f32>(a.index(i), &b, c, c);
            }
        }
    }
}

/// The plane's sums into `ws[base + m * n_total + n]` (`corner = (m0, n0, base)` of the
/// plane's block), through a 16 x 16 scratch per plane.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn store_partial(
    ws: &mut Tensor<f32>,
    acc: &Sequence<cmma::Matrix<f32>>,
    corner: (usize, usize, usize),
    tid: usize,
    m_total: usize,
    n_total: usize,
    #[comptime] pm: usize,
    #[comptime] pn: usize,
) {
    let (m0, n0, base) = corner;
    let mut scratch = SharedMemory::<f32>::new_aligned(PLANES * FRAG * FRAG, 32usize);
    let at0 = (tid / PLANE) * FRAG * FRAG;
    let lane = tid % PLANE;
    #[unroll]
    for i in 0..pm {
        #[unroll]
        for j in 0..pn {
            let mut view = scratch.slice_mut(at0, at0 + FRAG * FRAG);
            cmma::store(
                &mut view,
                acc.index(i * pn + j),
                FRAG as u32,
                cmma::MatrixLayout::RowMajor,
            );
            sync_plane();
            #[unroll]
            for e in 0..FRAG * FRAG / PLANE {
                let at = e * PLANE + lane;
                let m = m0 + i * FRAG + at / FRAG;
                let n = n0 + j * FRAG + at % FRAG;
                if m < m_total && n < n_total {
                    ws[base + m * n_total + n] = scratch[at0 + at];
                }
            }
            sync_plane();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{planes, PLANES};

    /// Every tile `plan` can choose splits evenly over at most eight planes.
    #[test]
    fn every_planned_tile_splits_over_the_planes() {
        for tm in [1, 2, 4, 8] {
            for tn in [4, 8, 16] {
                let (pm, pn) = planes(tm, tn);
                assert!(pm * pn <= PLANES, "{tm} x {tn}");
                assert_eq!(tm % pm, 0, "{tm} x {tn}");
                assert_eq!(tn % pn, 0, "{tm} x {tn}");
            }
        }
        assert_eq!(planes(8, 8), (2, 4));
        assert_eq!(planes(1, 8), (1, 8));
    }
}
