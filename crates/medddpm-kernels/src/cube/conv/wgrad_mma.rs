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

use super::super::mma::{fragment, zeroed_accumulators};
use super::kernel::{advance, decompose, load_row, loader, place, BK, SIDE, VEC};

/// Staged 16-bit values one at a time (the scalar kernel's).
type One<S> = Vector<S, Const<1>>;

/// Units per plane the kernel is written for (NVIDIA's warp).
const PLANE: usize = 32;
/// Side of one cooperative matrix.
const FRAG: usize = 16;
/// Planes per cube (`SIDE * SIDE / PLANE`).
const PLANES: usize = 8;

/// Planes along M and along N for a tile of `tm x tn` accumulators (`tm` in 1, 2, 4, 8; `tn`
/// 4 or 8): two rows of planes where there are two rows of accumulators, else one. Planes
/// past `planes_m * planes_n` stage but do not multiply (only a one-row tile, `tm = 1` with
/// `tn = 4`, leaves four idle).
pub(super) fn planes(tm: usize, tn: usize) -> (usize, usize) {
    let planes_m = if tm >= 2 { 2 } else { 1 };
    (planes_m, (PLANES / planes_m).min(tn))
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
    sizes: (usize, usize, usize, usize, usize),
    kernel: (usize, usize),
    stride: (i32, i32, i32),
    pad: (i32, i32, i32),
    #[comptime] tm: usize,
    #[comptime] tn: usize,
    #[comptime] channels_last: bool,
    #[define(FX, FY, S)] _dtypes: [StorageType; 3],
) {
    let (m_total, n_total, channels_in, k_total, slice_len) = sizes;
    let sa = comptime!(SIDE * tm + 8);
    let sb = comptime!(SIDE * tn + 8);
    let mut a_s = SharedMemory::<One<S>>::new_aligned(BK * sa, 32usize);
    let mut b_s = SharedMemory::<One<S>>::new_aligned(BK * sb, 32usize);
    let tid = UNIT_POS_Y as usize * SIDE + UNIT_POS_X as usize;
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
    let planes_m = comptime!(planes(tm, tn).0);
    let planes_n = comptime!(planes(tm, tn).1);
    let pm = comptime!(tm / planes_m);
    let pn = comptime!(tn / planes_n);
    let plane = tid / PLANE;
    let active = plane < planes_m * planes_n;
    let row0 = (plane / planes_n) * pm * FRAG;
    let col0 = (plane % planes_n) * pn * FRAG;
    let mut acc = zeroed_accumulators(pm * pn);
    let (mut ra, mut rb) = (Array::<f32>::new(tm), Array::<f32>::new(tn));
    let mut pos = decompose(k_begin + kk, od_n, oh_n, ow_n);
    let mut k = k_begin + kk;
    load_row::<FX, FY>(x, dy, &cols, &mut ra, &mut rb, pos, k < k_end, tm, tn);
    let mut k0 = k_begin;
    while k0 < k_end {
        stage::<S>(&mut a_s, &mut b_s, &ra, &rb, kk, g, tm, tn);
        sync_cube();
        k0 += BK;
        k += BK;
        if k0 < k_end {
            pos = advance(pos, od_n, oh_n, ow_n, BK);
            load_row::<FX, FY>(x, dy, &cols, &mut ra, &mut rb, pos, k < k_end, tm, tn);
        }
        if active {
            multiply::<S, Const<1>, Const<1>>(
                &a_s,
                &b_s,
                &mut acc,
                (row0, col0),
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
        let corner = (m0 + row0, n0 + col0, slice * m_total * n_total);
        store_partial(ws, &acc, corner, tid, m_total, n_total, pm, pn);
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

/// This plane's `pm x pn` accumulators plus the staged step's products over `depth` K rows
/// (A staged `[k, m]` as vectors of `NA`, B `[k, n]` as vectors of `NB`, rows 8 elements
/// longer than the tile).
#[cube]
#[allow(clippy::too_many_arguments)]
fn multiply<S: Float, NA: Size, NB: Size>(
    a_s: &SharedMemory<Vector<S, NA>>,
    b_s: &SharedMemory<Vector<S, NB>>,
    acc: &mut Sequence<cmma::Matrix<f32>>,
    corner: (usize, usize),
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
                &a_s.slice((ks * FRAG * sa + row0 + i * FRAG) / u, depth * sa / u),
                sa as u32,
            ));
        }
        #[unroll]
        for j in 0..pn {
            let b = fragment::<S, NB>(
                cmma::MatrixIdent::B,
                cmma::MatrixLayout::RowMajor,
                &b_s.slice((ks * FRAG * sb + col0 + j * FRAG) / v, depth * sb / v),
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

/// K rows one step of [`wgrad_partial_mma_vec`] stages: four times [`BK`], so that each
/// barrier pair covers four 16-deep products per accumulator.
pub(super) const BK_VEC: usize = 64;
/// Units that share one K row of a step (`256 / BK_VEC`).
pub(super) const UNITS_PER_ROW: usize = SIDE * SIDE / BK_VEC;

/// Vectors of `v` elements one unit loads from a step's K row of `width` columns: the row's
/// `width / v` vectors split over [`UNITS_PER_ROW`] units (the last ones idle where the row
/// has fewer).
pub(super) fn vectors_per_unit(width: usize, v: usize) -> usize {
    (width / v).div_ceil(UNITS_PER_ROW)
}

/// The unit's columns of B in [`wgrad_partial_mma_vec`]: per vector, the offset of its first
/// input channel and taps in `x`, and the taps `(kd, kh, kw)`, `kd` far outside every input
/// for a vector past the tile or past `N` (its loads read zeros).
#[derive(CubeType)]
pub(super) struct VectorColumns {
    off: Array<i32>,
    kd: Array<i32>,
    kh: Array<i32>,
    kw: Array<i32>,
}

/// [`wgrad_partial_mma`] for a channels-last input whose channel count and strides are
/// multiples of `NV`: every load of `x` is a vector of `NV` input channels of one tap (columns
/// `(tap, ci)`), every load of `dy` one of `NA` output channels (`NA = NV` where `dy` is
/// channels-last with `M` and its strides multiples of it, else 1: the last convolution's
/// single output channel), staged whole, and a step stages [`BK_VEC`] K rows. Each K row of a step is loaded by [`UNITS_PER_ROW`]
/// neighbouring units, each taking neighbouring vectors of A and of B from that one row, so a
/// unit carries one position from step to step (by additions) for both operands.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub(super) fn wgrad_partial_mma_vec<FX: Float, FY: Float, S: Float, NA: Size, NV: Size>(
    x: &Tensor<Vector<FX, NV>>,
    dy: &Tensor<Vector<FY, NA>>,
    ws: &mut Tensor<f32>,
    sizes: (usize, usize, usize, usize, usize),
    kernel: (usize, usize),
    stride: (i32, i32, i32),
    pad: (i32, i32, i32),
    #[comptime] tm: usize,
    #[comptime] tn: usize,
    #[define(FX, FY, S)] _dtypes: [StorageType; 3],
) {
    let (m_total, n_total, channels_in, k_total, slice_len) = sizes;
    let v = NV::value();
    let u = NA::value();
    let sa = comptime!(SIDE * tm + 8);
    let sb = comptime!(SIDE * tn + 8);
    let va = comptime!(vectors_per_unit(SIDE * tm, u));
    let vb = comptime!(vectors_per_unit(SIDE * tn, v));
    let mut a_s = SharedMemory::<Vector<S, NA>>::new_aligned(comptime!(BK_VEC * sa / u), 32usize);
    let mut b_s = SharedMemory::<Vector<S, NV>>::new_aligned(comptime!(BK_VEC * sb / v), 32usize);
    let tid = UNIT_POS_Y as usize * SIDE + UNIT_POS_X as usize;
    let (_kk, _g, m0, n0, k_begin, k_end) = place(tid, slice_len, k_total, tm, tn, true);
    let slice = CUBE_POS_Z as usize;
    let kk = tid / UNITS_PER_ROW;
    let group = tid % UNITS_PER_ROW;
    let cols = vector_columns::<FX, NV>(x, n0, group, n_total, channels_in, kernel, tn);
    let (od_n, oh_n, ow_n) = (dy.shape(2), dy.shape(3), dy.shape(4));
    let planes_m = comptime!(planes(tm, tn).0);
    let planes_n = comptime!(planes(tm, tn).1);
    let pm = comptime!(tm / planes_m);
    let pn = comptime!(tn / planes_n);
    let plane = tid / PLANE;
    let active = plane < planes_m * planes_n;
    let row0 = (plane / planes_n) * pm * FRAG;
    let col0 = (plane % planes_n) * pn * FRAG;
    let mut acc = zeroed_accumulators(pm * pn);
    let mut ra = Array::<Vector<S, NA>>::new(va);
    let mut rb = Array::<Vector<S, NV>>::new(vb);
    let mut pos = decompose(k_begin + kk, od_n, oh_n, ow_n);
    let mut k0 = k_begin;
    let rows = (m0, group, m_total);
    let window = (stride, pad);
    load_vectors::<FX, FY, S, NA, NV>(
        x,
        dy,
        pos,
        k0 + kk < k_end,
        rows,
        &cols,
        window,
        &mut ra,
        &mut rb,
        tm,
        tn,
    );
    while k0 < k_end {
        #[unroll]
        for i in 0..va {
            let c = group * va + i;
            if c < comptime!(SIDE * tm / u) {
                a_s[kk * sa / u + c] = ra[i];
            }
        }
        #[unroll]
        for i in 0..vb {
            let c = group * vb + i;
            if c < comptime!(SIDE * tn / v) {
                b_s[kk * sb / v + c] = rb[i];
            }
        }
        sync_cube();
        k0 += BK_VEC;
        if k0 < k_end {
            pos = advance(pos, od_n, oh_n, ow_n, BK_VEC);
            load_vectors::<FX, FY, S, NA, NV>(
                x,
                dy,
                pos,
                k0 + kk < k_end,
                rows,
                &cols,
                window,
                &mut ra,
                &mut rb,
                tm,
                tn,
            );
        }
        if active {
            multiply::<S, NA, NV>(&a_s, &b_s, &mut acc, (row0, col0), BK_VEC, tm, tn, pm, pn);
        }
        sync_cube();
    }
    if active {
        let corner = (m0 + row0, n0 + col0, slice * m_total * n_total);
        store_partial(ws, &acc, corner, tid, m_total, n_total, pm, pn);
    }
}

/// The [`VectorColumns`] of the unit in place `group` of its K row, in the tile from column
/// `n0`.
#[cube]
fn vector_columns<FX: Float, NV: Size>(
    x: &Tensor<Vector<FX, NV>>,
    n0: usize,
    group: usize,
    n_total: usize,
    channels_in: usize,
    kernel: (usize, usize),
    #[comptime] tn: usize,
) -> VectorColumns {
    let v = NV::value();
    let vb = comptime!(vectors_per_unit(SIDE * tn, v));
    let (kernel_h, kernel_w) = kernel;
    let mut cols = VectorColumns {
        off: Array::new(vb),
        kd: Array::new(vb),
        kh: Array::new(vb),
        kw: Array::new(vb),
    };
    #[unroll]
    for i in 0..vb {
        let c = group * vb + i;
        let col = n0 + c * v;
        let tap = col / channels_in;
        let kw = tap % kernel_w;
        let kh = (tap / kernel_w) % kernel_h;
        let kd = tap / (kernel_w * kernel_h);
        cols.off[i] =
            (col % channels_in + kd * x.stride(2) + kh * x.stride(3) + kw * x.stride(4)) as i32;
        let mut far = 0i32;
        if c >= comptime!(SIDE * tn / v) || col >= n_total {
            far = 1 << 30;
        }
        cols.kd[i] = kd as i32 + far;
        cols.kh[i] = kh as i32;
        cols.kw[i] = kw as i32;
    }
    cols
}

/// One K row's vectors of [`wgrad_partial_mma_vec`] into registers, as `S`: the unit's `va`
/// vectors of A (output channels from `m0 + group * va * NA`) and `vb` of B; zero for a row
/// past the slice (`row_ok` false), channels past `M`, or a tap in the padding.
#[cube]
#[allow(clippy::too_many_arguments)]
fn load_vectors<FX: Float, FY: Float, S: Float, NA: Size, NV: Size>(
    x: &Tensor<Vector<FX, NV>>,
    dy: &Tensor<Vector<FY, NA>>,
    pos: (usize, usize, usize, usize),
    row_ok: bool,
    rows: (usize, usize, usize),
    cols: &VectorColumns,
    window: ((i32, i32, i32), (i32, i32, i32)),
    ra: &mut Array<Vector<S, NA>>,
    rb: &mut Array<Vector<S, NV>>,
    #[comptime] tm: usize,
    #[comptime] tn: usize,
) {
    let u = NA::value();
    let v = NV::value();
    let va = comptime!(vectors_per_unit(SIDE * tm, u));
    let vb = comptime!(vectors_per_unit(SIDE * tn, v));
    let (m0, group, m_total) = rows;
    let (b, od, oh, ow) = pos;
    let a_row = b * dy.stride(0) + od * dy.stride(2) + oh * dy.stride(3) + ow * dy.stride(4);
    #[unroll]
    for i in 0..va {
        let c = group * va + i;
        let m = m0 + c * u;
        let mut value = Vector::<S, NA>::new(S::from_int(0));
        if row_ok && c < comptime!(SIDE * tm / u) && m < m_total {
            value = Vector::<S, NA>::cast_from(dy[(a_row + m * dy.stride(1)) / u]);
        }
        ra[i] = value;
    }
    let (stride, pad) = window;
    let (x_row, bd, bh, bw) = input_row::<FX, NV>(x, pos, stride, pad);
    let (dim_d, dim_h, dim_w) = (x.shape(2) as i32, x.shape(3) as i32, x.shape(4) as i32);
    #[unroll]
    for i in 0..vb {
        let (id, ih, iw) = (bd + cols.kd[i], bh + cols.kh[i], bw + cols.kw[i]);
        let inside = id >= 0 && id < dim_d && ih >= 0 && ih < dim_h && iw >= 0 && iw < dim_w;
        let mut value = Vector::<S, NV>::new(S::from_int(0));
        if row_ok && inside {
            value = Vector::<S, NV>::cast_from(x[((x_row + cols.off[i]) as usize) / v]);
        }
        rb[i] = value;
    }
}

/// Where K row `pos` reads `x` before the taps (may be negative), and its first input
/// position per axis.
#[cube]
fn input_row<FX: Float, NV: Size>(
    x: &Tensor<Vector<FX, NV>>,
    pos: (usize, usize, usize, usize),
    stride: (i32, i32, i32),
    pad: (i32, i32, i32),
) -> (i32, i32, i32, i32) {
    let (b, od, oh, ow) = pos;
    let (sd, sh, sw) = stride;
    let (pd, ph, pw) = pad;
    let bd = od as i32 * sd - pd;
    let bh = oh as i32 * sh - ph;
    let bw = ow as i32 * sw - pw;
    let x_row = (b * x.stride(0)) as i32
        + bd * x.stride(2) as i32
        + bh * x.stride(3) as i32
        + bw * x.stride(4) as i32;
    (x_row, bd, bh, bw)
}

/// The plane's sums into `ws[base + m * n_total + n]` (`corner = (m0, n0, base)` of the
/// plane's block), through a 16 x 16 scratch per plane.
#[cube]
#[allow(clippy::too_many_arguments)]
fn store_partial(
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
    use super::super::kernel::{BK, SIDE};
    use super::{planes, vectors_per_unit, BK_VEC, PLANES, UNITS_PER_ROW};

    /// Every tile width the plan chooses, loaded as vectors of 4 (wgpu) or 8 (CUDA): the units
    /// of one K row cover its vectors exactly once, and a step's rows take all 256 units.
    #[test]
    fn vector_loads_cover_each_step_once() {
        assert_eq!(UNITS_PER_ROW * BK_VEC, SIDE * SIDE);
        assert_eq!(BK_VEC % BK, 0);
        for width in [16, 32, 64, 128] {
            for v in [4, 8] {
                let per_unit = vectors_per_unit(width, v);
                let covered = per_unit * UNITS_PER_ROW;
                assert!(covered >= width / v, "width {width} v {v}");
                assert!(
                    covered - width / v < per_unit.max(UNITS_PER_ROW),
                    "width {width} v {v}"
                );
            }
        }
        assert_eq!(vectors_per_unit(128, 8), 4);
        assert_eq!(vectors_per_unit(16, 8), 1);
    }

    /// Every tile `plan` can choose splits evenly over at most eight planes.
    #[test]
    fn every_planned_tile_splits_over_the_planes() {
        for tm in [1, 2, 4, 8] {
            for tn in [4, 8] {
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
