//! The weight gradient of a convolution into a few output channels (the U-Net's last: one to
//! four), for a channels-last input, on the FMA units.
//!
//! With `M` of 1 to 4 the product `dL/dw = dy^T x_cols` is a sum of `K` outer products of a
//! tiny `dy` row with a long `x` row: the tensor-core kernels pad `M` to 16 rows (4.0 ms for
//! 64 -> 1 at 128^3 on an H100 where cuDNN takes 2.4: docs/benchmarks).
//! Here each unit owns one vector of columns (`NV` input channels of one tap) and all `M`
//! rows, and walks its cube's slice of `K` one position at a time: per position the cube's
//! units load neighbouring vectors of neighbouring taps (whole cache lines of the input, most
//! of them hits in L1) and one broadcast `dy` row. The partial sums go to the split-K
//! workspace like the other kernels'.

use cubecl::prelude::*;

use super::kernel::Scalars;
use super::walk::{advance, decompose};

/// Units per cube, each owning `NV` columns.
pub(super) const UNITS: usize = 256;

/// The partial sums over K slice `CUBE_POS_Z` of columns `(tap, ci)` from `CUBE_POS_X * UNITS
/// * NV` for `m` (at most 4) output channels: `x` channels-last with its channel count and
/// strides multiples of `NV`, `dy` any layout (read one element at a time, the same for every
/// unit).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub(super) fn wgrad_partial_narrow<FX: Float, FY: Float, NV: Size>(
    x: &Tensor<Vector<FX, NV>>,
    dy: &Tensor<FY>,
    ws: &mut Tensor<f32>,
    scalars: Scalars,
    #[comptime] m: usize,
    #[define(FX, FY)] _dtypes: [StorageType; 2],
) {
    let (sizes, kernel, stride, pad) = scalars;
    let (_m_total, n_total, channels_in, k_total, slice_len) = sizes;
    let v = NV::value();
    let (kernel_h, kernel_w) = kernel;
    let (sd, sh, sw) = stride;
    let (pd, ph, pw) = pad;
    let group = CUBE_POS_X as usize * UNITS + UNIT_POS as usize;
    let col = group * v;
    let tap = col / channels_in;
    let kw = (tap % kernel_w) as i32;
    let kh = ((tap / kernel_w) % kernel_h) as i32;
    let kd = (tap / (kernel_w * kernel_h)) as i32;
    let owned = col < n_total;
    let ci = col % channels_in;
    let (dim_d, dim_h, dim_w) = (x.shape(2) as i32, x.shape(3) as i32, x.shape(4) as i32);
    let (od_n, oh_n, ow_n) = (dy.shape(2), dy.shape(3), dy.shape(4));
    let k_begin = CUBE_POS_Z as usize * slice_len;
    let mut k_end = k_begin + slice_len;
    if k_end > k_total {
        k_end = k_total;
    }
    let mut acc = Array::<Vector<f32, NV>>::new(m);
    #[unroll]
    for co in 0..m {
        acc[co] = Vector::<f32, NV>::new(0.0);
    }
    let mut pos = decompose(k_begin, od_n, oh_n, ow_n);
    let mut k = k_begin;
    while k < k_end {
        let (b, od, oh, ow) = pos;
        let (id, ih, iw) = (
            od as i32 * sd - pd + kd,
            oh as i32 * sh - ph + kh,
            ow as i32 * sw - pw + kw,
        );
        let inside = id >= 0 && id < dim_d && ih >= 0 && ih < dim_h && iw >= 0 && iw < dim_w;
        if owned && inside {
            let at = b * x.stride(0)
                + id as usize * x.stride(2)
                + ih as usize * x.stride(3)
                + iw as usize * x.stride(4)
                + ci;
            let xv = Vector::<f32, NV>::cast_from(x[at / v]);
            let row = b * dy.stride(0) + od * dy.stride(2) + oh * dy.stride(3) + ow * dy.stride(4);
            #[unroll]
            for co in 0..m {
                let a = f32::cast_from(dy[row + co * dy.stride(1)]);
                acc[co] += xv * Vector::<f32, NV>::new(a);
            }
        }
        k += 1;
        pos = advance(pos, od_n, oh_n, ow_n, 1usize);
    }
    if owned {
        let base = CUBE_POS_Z as usize * comptime!(m) * n_total + col;
        #[unroll]
        for co in 0..m {
            #[unroll]
            for l in 0..v {
                ws[base + co * n_total + l] = acc[co][l];
            }
        }
    }
}
