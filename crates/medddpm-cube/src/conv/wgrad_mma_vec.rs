//! The tensor-core weight gradient ([`wgrad_partial_mma`](super::mma::wgrad_partial_mma)) for
//! channels-last inputs, every load a vector of channels: one 16-bit vector load and one
//! shared-memory store where the scalar kernel makes eight of each (that kernel executed 3.7
//! to 4.2 G instructions a launch at the U-Net's top level: Nsight Compute, docs/benchmarks).
//! Products, planes and the partial sums' store are the scalar kernel's.

use cubecl::prelude::*;

use super::kernel::{Scalars, SIDE};
use super::mma::{multiply, plane_place, plane_share, store_partial};
use super::walk::{advance, decompose, new_loader, place, row_offsets, Loader};
use crate::conv::mma_ldm::{accumulator_sets, products_ldm, store_partial_ldm};

/// K rows one step of [`wgrad_partial_mma_vec`] stages: four times
/// [`BK`](super::kernel::BK), so that each barrier pair covers four 16-deep products per
/// accumulator.
pub(super) const BK_VEC: usize = 64;
/// Units that share one K row of a step (`256 / BK_VEC`).
pub(super) const UNITS_PER_ROW: usize = SIDE * SIDE / BK_VEC;

/// Vectors of `v` elements one unit loads from a step's K row of `width` columns: the row's
/// `width / v` vectors dealt out in turn to [`UNITS_PER_ROW`] units (unit `g` takes vectors
/// `g`, `g + 4`, ...; the last ones idle where the row has fewer).
pub(super) fn vectors_per_unit(width: usize, v: usize) -> usize {
    (width / v).div_ceil(UNITS_PER_ROW)
}

/// The K row of a step that the units of group `u` (`tid / UNITS_PER_ROW`) stage: `u` with its
/// low three bits rotated, so that the eight units of one 16-byte store phase take rows `r`
/// and `r + 4`, whose vectors fall in disjoint banks (staged rows are an odd number of 16
/// bytes apart, and each unit of a row takes every fourth vector), where rows `r` and `r + 1`
/// shared banks (Nsight Compute: two-way conflicts on every store).
#[cube]
pub(super) fn staged_row(u: usize, #[comptime] rotate: bool) -> usize {
    let mut row = u;
    if rotate {
        row = (u & !7usize) | ((u & 1) << 2) | ((u >> 1) & 3);
    }
    row
}

/// The compile-time shape of [`wgrad_partial_mma_vec`]: tile `16 tm x 16 tn`, shared-memory
/// stages, and a register cap per unit for the CUDA compiler (0: none), which the vendored
/// `cubecl-cuda` reads from the kernel's id (the field's name is the key: README.medddpm.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct VectorPipe {
    pub tm: usize,
    pub tn: usize,
    pub stages: usize,
    pub max_registers: u32,
    /// Products through `ldmatrix` and `mma.sync` (CUDA; see `mma_ldm`) instead of
    /// cooperative matrices.
    pub ldmatrix: bool,
    /// K rows dealt to units rotated (see [`staged_row`]).
    pub rotate_rows: bool,
}

/// [`wgrad_partial_mma`] for a channels-last input whose channel count and strides are
/// multiples of `NV`: every load of `x` is a vector of `NV` input channels of one tap (columns
/// `(tap, ci)`), every load of `dy` one of `NA` output channels (`NA = NV` where `dy` is
/// channels-last with `M` and its strides multiples of it, else 1: the last convolution's
/// single output channel), staged whole, and a step stages [`BK_VEC`] K rows. Each K row of a
/// step is loaded by [`UNITS_PER_ROW`] neighbouring units, which take that row's vectors of A
/// and of B in turn, so a unit carries one position from step to step (by additions) for both
/// operands. With two stages buffer `now` multiplies while the other
/// fills, one barrier a step; with one, the step is staged first and a second barrier guards
/// the buffer until every plane is done with it.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub(super) fn wgrad_partial_mma_vec<FX: Float, FY: Float, S: Float, NA: Size, NV: Size>(
    x: &Tensor<Vector<FX, NV>>,
    dy: &Tensor<Vector<FY, NA>>,
    ws: &mut Tensor<f32>,
    scalars: Scalars,
    #[comptime] pipe: VectorPipe,
    #[define(FX, FY, S)] _dtypes: [StorageType; 3],
) {
    let (tm, tn, stages) = comptime!((pipe.tm, pipe.tn, pipe.stages));
    let (sizes, kernel, stride, pad) = scalars;
    let (m_total, n_total, channels_in, k_total, slice_len) = sizes;
    let v = NV::value();
    let u = NA::value();
    let sa = comptime!(SIDE * tm + 8);
    let sb = comptime!(SIDE * tn + 8);
    let va = comptime!(vectors_per_unit(SIDE * tm, u));
    let vb = comptime!(vectors_per_unit(SIDE * tn, v));
    let (a_len, b_len) = comptime!((BK_VEC * sa / u, BK_VEC * sb / v));
    let mut a_s = SharedMemory::<Vector<S, NA>>::new_aligned(comptime!(stages * a_len), 32usize);
    let mut b_s = SharedMemory::<Vector<S, NV>>::new_aligned(comptime!(stages * b_len), 32usize);
    let tid = UNIT_POS_Y as usize * SIDE + UNIT_POS_X as usize;
    let (_kk, _g, m0, n0, k_begin, k_end) = place(tid, slice_len, k_total, tm, tn, true);
    let kk = staged_row(tid / UNITS_PER_ROW, pipe.rotate_rows);
    let group = tid % UNITS_PER_ROW;
    let cols = vector_columns::<FX, NV>(
        x,
        (m0, n0),
        group,
        (m_total, n_total, channels_in),
        kernel,
        (stride, pad),
        tn,
    );
    let (od_n, oh_n, ow_n) = (dy.shape(2), dy.shape(3), dy.shape(4));
    let (pm, pn) = comptime!(plane_share(tm, tn));
    let (active, row0, col0) = plane_place(tid, tm, tn);
    let (mut acc, mut regs) = accumulator_sets(pm * pn, pipe.ldmatrix);
    let mut ra = Array::<Vector<S, NA>>::new(va);
    let mut rb = Array::<Vector<S, NV>>::new(vb);
    let mut pos = decompose(k_begin + kk, od_n, oh_n, ow_n);
    let mut k0 = k_begin;
    load_vectors::<FX, FY, S, NA, NV>(x, dy, pos, k0 + kk < k_end, &cols, &mut ra, &mut rb, tm, tn);
    if comptime!(stages == 2) {
        stage_vectors::<S, NA, NV>(&mut a_s, &mut b_s, &ra, &rb, (kk, group), 0usize, tm, tn);
        sync_cube();
    }
    let mut now = 0usize;
    while k0 < k_end {
        if comptime!(stages == 1) {
            stage_vectors::<S, NA, NV>(&mut a_s, &mut b_s, &ra, &rb, (kk, group), 0usize, tm, tn);
            sync_cube();
        }
        k0 += BK_VEC;
        let more = k0 < k_end;
        if more {
            pos = advance(pos, od_n, oh_n, ow_n, BK_VEC);
            let ok = k0 + kk < k_end;
            load_vectors::<FX, FY, S, NA, NV>(x, dy, pos, ok, &cols, &mut ra, &mut rb, tm, tn);
        }
        if active {
            products::<S, NA, NV>(&a_s, &b_s, &mut acc, &mut regs, (row0, col0), now, pipe);
        }
        if comptime!(stages == 2) {
            if more {
                let next = (1 - now) * a_len;
                stage_vectors::<S, NA, NV>(&mut a_s, &mut b_s, &ra, &rb, (kk, group), next, tm, tn);
            }
            now = 1 - now;
        }
        sync_cube();
    }
    if active {
        let z = CUBE_POS_Z as usize * m_total * n_total;
        let corner = (m0 + row0, n0 + col0, z);
        store(ws, &acc, &regs, corner, tid, (m_total, n_total), pipe);
    }
}

/// The plane's sums from whichever accumulator set `pipe` uses into `ws[base + m * n_total +
/// n]` (`corner = (m0, n0, base)` of the plane's block; `sizes = (M, N)`).
#[cube]
fn store(
    ws: &mut Tensor<f32>,
    acc: &Sequence<cmma::Matrix<f32>>,
    regs: &Array<Vector<f32, Const<2>>>,
    corner: (usize, usize, usize),
    tid: usize,
    sizes: (usize, usize),
    #[comptime] pipe: VectorPipe,
) {
    let (m_total, n_total) = sizes;
    let (pm, pn) = comptime!(plane_share(pipe.tm, pipe.tn));
    if comptime!(pipe.ldmatrix) {
        store_partial_ldm(ws, regs, corner, m_total, n_total, pm, pn);
    } else {
        store_partial(ws, acc, corner, tid, m_total, n_total, pm, pn);
    }
}

/// This plane's products over the stage `now` (0 or 1) of the staged tiles, `BK_VEC` K rows,
/// into whichever accumulator set `pipe` uses: cooperative matrices ([`multiply`]) or the
/// `mma.sync` registers ([`products_ldm`], A staged `[k, m]`: transposed).
#[cube]
#[allow(clippy::too_many_arguments)]
fn products<S: Float, NA: Size, NV: Size>(
    a_s: &SharedMemory<Vector<S, NA>>,
    b_s: &SharedMemory<Vector<S, NV>>,
    acc: &mut Sequence<cmma::Matrix<f32>>,
    regs: &mut Array<Vector<f32, Const<2>>>,
    corner: (usize, usize),
    now: usize,
    #[comptime] pipe: VectorPipe,
) {
    let u = NA::value();
    let v = NV::value();
    let (tm, tn) = comptime!((pipe.tm, pipe.tn));
    let (sa, sb) = comptime!((SIDE * tm + 8, SIDE * tn + 8));
    let (a_len, b_len) = comptime!((BK_VEC * sa / u, BK_VEC * sb / v));
    let (pm, pn) = comptime!(plane_share(tm, tn));
    let (a_at, b_at) = (now * a_len, now * b_len);
    if comptime!(pipe.ldmatrix) {
        let (row0, col0) = corner;
        let strides = comptime!((sa as u32, sb as u32));
        let (fm, fn_) = comptime!((pm as u32, pn as u32));
        let at = (a_at, b_at);
        products_ldm::<S, NA, NV>(
            a_s,
            b_s,
            regs,
            (row0 as u32, col0 as u32),
            at,
            strides,
            BK_VEC as u32,
            fm,
            fn_,
            true,
        );
    } else {
        multiply::<S, NA, NV>(a_s, b_s, acc, corner, a_at, b_at, BK_VEC, tm, tn, pm, pn);
    }
}

/// The unit's loaded vectors into K row `kk` of the staged tiles (A `[k, m]`, B `[k, n]`), at
/// its place `group` along the row, in the stage whose A tile starts at vector `a_at` (0 or
/// one stage's length; B's stage follows from it).
#[cube]
#[allow(clippy::too_many_arguments)]
fn stage_vectors<S: Float, NA: Size, NV: Size>(
    a_s: &mut SharedMemory<Vector<S, NA>>,
    b_s: &mut SharedMemory<Vector<S, NV>>,
    ra: &Array<Vector<S, NA>>,
    rb: &Array<Vector<S, NV>>,
    place: (usize, usize),
    a_at: usize,
    #[comptime] tm: usize,
    #[comptime] tn: usize,
) {
    let (kk, group) = place;
    let u = NA::value();
    let v = NV::value();
    let sa = comptime!(SIDE * tm + 8);
    let sb = comptime!(SIDE * tn + 8);
    let a_len = comptime!(BK_VEC * sa / u);
    let b_at = (a_at / a_len) * comptime!(BK_VEC * sb / v);
    let va = comptime!(vectors_per_unit(SIDE * tm, u));
    let vb = comptime!(vectors_per_unit(SIDE * tn, v));
    #[unroll]
    for i in 0..va {
        let c = i * UNITS_PER_ROW + group;
        if c < comptime!(SIDE * tm / u) {
            a_s[a_at + kk * sa / u + c] = ra[i];
        }
    }
    #[unroll]
    for i in 0..vb {
        let c = i * UNITS_PER_ROW + group;
        if c < comptime!(SIDE * tn / v) {
            b_s[b_at + kk * sb / v + c] = rb[i];
        }
    }
}

/// The [`Loader`] of the unit in place `group` of its K row, in the tile at `corner`
/// `(m0, n0)`; `sizes` are `(M, N, c_in)`.
#[cube]
fn vector_columns<FX: Float, NV: Size>(
    x: &Tensor<Vector<FX, NV>>,
    corner: (usize, usize),
    group: usize,
    sizes: (usize, usize, usize),
    kernel: (usize, usize),
    window: ((i32, i32, i32), (i32, i32, i32)),
    #[comptime] tn: usize,
) -> Loader {
    let v = NV::value();
    let vb = comptime!(vectors_per_unit(SIDE * tn, v));
    let (m0, n0) = corner;
    let (m_total, n_total, channels_in) = sizes;
    let (kernel_h, kernel_w) = kernel;
    let (stride, pad) = window;
    let mut cols = new_loader::<Vector<FX, NV>>(x, (m0, group, m_total), stride, pad, vb);
    #[unroll]
    for i in 0..vb {
        let c = i * UNITS_PER_ROW + group;
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
    cols: &Loader,
    ra: &mut Array<Vector<S, NA>>,
    rb: &mut Array<Vector<S, NV>>,
    #[comptime] tm: usize,
    #[comptime] tn: usize,
) {
    let u = NA::value();
    let v = NV::value();
    let va = comptime!(vectors_per_unit(SIDE * tm, u));
    let vb = comptime!(vectors_per_unit(SIDE * tn, v));
    let (m0, group, m_total) = cols.rows;
    let (a_row, x_row, bd, bh, bw) =
        row_offsets::<Vector<FX, NV>, Vector<FY, NA>>(x, dy, pos, cols.stride, cols.pad);
    #[unroll]
    for i in 0..va {
        let c = i * UNITS_PER_ROW + group;
        let m = m0 + c * u;
        let mut value = Vector::<S, NA>::new(S::from_int(0));
        if row_ok && c < comptime!(SIDE * tm / u) && m < m_total {
            value = Vector::<S, NA>::cast_from(dy[(a_row + m * dy.stride(1)) / u]);
        }
        ra[i] = value;
    }
    let (dim_d, dim_h, dim_w) = cols.dims;
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

#[cfg(test)]
mod tests {
    use super::super::kernel::{BK, SIDE};
    use super::{vectors_per_unit, BK_VEC, UNITS_PER_ROW};

    /// Every tile width the plan chooses, loaded as vectors of 4 (wgpu) or 8 (CUDA): the units
    /// of one K row (vector `i * UNITS_PER_ROW + group`, as the kernel numbers them) cover each of
    /// its vectors exactly once, and a step's rows take all 256 units.
    #[test]
    fn vector_loads_cover_each_step_once() {
        assert_eq!(UNITS_PER_ROW * BK_VEC, SIDE * SIDE);
        assert_eq!(BK_VEC % BK, 0);
        for width in [16, 32, 64, 128] {
            for v in [1, 4, 8] {
                let per_unit = vectors_per_unit(width, v);
                let mut loads = vec![0; width / v];
                for group in 0..UNITS_PER_ROW {
                    for i in 0..per_unit {
                        if let Some(n) = loads.get_mut(i * UNITS_PER_ROW + group) {
                            *n += 1;
                        }
                    }
                }
                assert!(
                    loads.iter().all(|&n| n == 1),
                    "width {width} v {v}: {loads:?}"
                );
            }
        }
        assert_eq!(vectors_per_unit(128, 8), 4);
        assert_eq!(vectors_per_unit(16, 8), 1);
    }
}
