//! The forward convolution into a few output channels (the U-Net's last convolution: one to
//! four), read from a channels-last input in vectors of channels, on the FMA units.
//!
//! As a GEMM this product is `positions x (c_in taps) x c_out` with `c_out` of 1 to 4: a
//! tensor-core tile pads it to 16 columns (3.1 ms for 64 -> 1
//! at 128^3 on an H100 where cuDNN takes 1.7: docs/benchmarks), and the
//! FMA GEMM's scalar gathers were slower still. What bounds it is reading the input 27 times
//! (once per tap, mostly from L1), so here [`LANES`] units share one output voxel, each
//! loading every `LANES`-th vector of its channels: a plane's load is four voxels' channels,
//! whole cache lines, and the weight's matching vectors are one line read by every plane.

use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;
use cubecl::prelude::*;
use cubecl::CubeDim;

use super::gemm::{Dims, Strides, Window};
use super::launch::{arguments, channel_width, cube_count, widest_vector, Problem};

/// Units that share one output voxel (its input channels' vectors dealt out in turn).
pub(super) const LANES: usize = 8;
/// Units per cube.
pub(super) const UNITS: usize = 256;
/// Output voxels per cube.
pub(super) const VOXELS: usize = UNITS / LANES;
/// Most output channels the kernel is compiled for (its accumulators are per channel).
pub const MAX_NARROW_CHANNELS: usize = 4;

/// `y[b, co, o] = sum_{ci, j} x[b, ci, o * stride - pad + j] * w[j, co, ci]`, f32 sums written
/// as `Y`, for `c_out` (at most [`MAX_NARROW_CHANNELS`]) output channels. `x` is channels-last
/// with its channel count and strides multiples of `NV`; `w` is `[kd, kh, kw, c_out, c_in]`,
/// contiguous. Each voxel's `LANES` units add their partial sums through shared memory, in a
/// fixed order.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub(super) fn conv_narrow<X: Float, W: Float, Y: Float, NV: Size>(
    x: &Tensor<Vector<X, NV>>,
    w: &Tensor<Vector<W, NV>>,
    y: &mut Tensor<Y>,
    dims: Dims,
    window: Window,
    xs: Strides,
    ys: Strides,
    #[comptime] c_out: usize,
    #[define(X, W, Y)] _dtypes: [StorageType; 3],
) {
    let v = NV::value();
    let lane = UNIT_POS as usize % LANES;
    let voxel =
        (CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_X) as usize * VOXELS + UNIT_POS as usize / LANES;
    let valid = voxel < dims.m as usize;
    let (ow_n, oh_n, od_n) = (
        dims.out_w as usize,
        dims.out_h as usize,
        dims.out_d as usize,
    );
    let ow = voxel % ow_n;
    let oh = (voxel / ow_n) % oh_n;
    let od = (voxel / (ow_n * oh_n)) % od_n;
    let b = voxel / (ow_n * oh_n * od_n);
    let vectors = dims.c_in as usize / v;
    let mut acc = Array::<Vector<f32, NV>>::new(c_out);
    #[unroll]
    for co in 0..c_out {
        acc[co] = Vector::<f32, NV>::new(0.0);
    }
    let bd = (od * window.stride_d as usize) as i32 - window.pad_d;
    let bh = (oh * window.stride_h as usize) as i32 - window.pad_h;
    let bw = (ow * window.stride_w as usize) as i32 - window.pad_w;
    let (in_d, in_h, in_w) = (dims.in_d as i32, dims.in_h as i32, dims.in_w as i32);
    let mut tap = 0usize;
    for jd in 0..window.taps_d as i32 {
        for jh in 0..window.taps_h as i32 {
            for jw in 0..window.taps_w as i32 {
                let (id, ih, iw) = (bd + jd, bh + jh, bw + jw);
                let inside = id >= 0 && id < in_d && ih >= 0 && ih < in_h && iw >= 0 && iw < in_w;
                if valid && inside {
                    let at = b * xs.n as usize
                        + id as usize * xs.d as usize
                        + ih as usize * xs.h as usize
                        + iw as usize * xs.w as usize;
                    let w_at = tap * c_out * vectors;
                    add_products::<X, W, NV>(x, w, &mut acc, (at / v, w_at), lane, vectors, c_out);
                }
                tap += 1;
            }
        }
    }
    let mut sums = SharedMemory::<f32>::new(comptime!(UNITS * c_out));
    let me = UNIT_POS as usize;
    #[unroll]
    for co in 0..c_out {
        let mut s = 0.0f32;
        #[unroll]
        for l in 0..v {
            s += acc[co][l];
        }
        sums[me * c_out + co] = s;
    }
    sync_cube();
    if valid && lane == 0 {
        let at = b * ys.n as usize + od * ys.d as usize + oh * ys.h as usize + ow * ys.w as usize;
        #[unroll]
        for co in 0..c_out {
            let mut s = 0.0f32;
            #[unroll]
            for l in 0..LANES {
                s += sums[(me + l) * c_out + co];
            }
            y[at + co * ys.c as usize] = Y::cast_from(s);
        }
    }
}

/// One tap's products for this unit's vectors (every [`LANES`]-th from `lane`): `at = (x
/// vector, w vector)` where the voxel's channels and the tap's weight rows start.
#[cube]
fn add_products<X: Float, W: Float, NV: Size>(
    x: &Tensor<Vector<X, NV>>,
    w: &Tensor<Vector<W, NV>>,
    acc: &mut Array<Vector<f32, NV>>,
    at: (usize, usize),
    lane: usize,
    vectors: usize,
    #[comptime] c_out: usize,
) {
    let (x_at, w_at) = at;
    let mut j = lane;
    while j < vectors {
        let xv = Vector::<f32, NV>::cast_from(x[x_at + j]);
        #[unroll]
        for co in 0..c_out {
            let wv = Vector::<f32, NV>::cast_from(w[w_at + co * vectors + j]);
            acc[co] += xv * wv;
        }
        j += LANES;
    }
}

/// Elements per vector [`conv_narrow`] would load from `x` for a product of `c_in` into
/// `c_out` channels, or `None` where it does not apply: more than [`MAX_NARROW_CHANNELS`]
/// output channels, or an input whose channels do not load as vectors of at least 4
/// (channels-first, or a channel count or stride not a multiple of 4).
pub(super) fn narrow_width<R: CubeRuntime>(
    x: &CubeTensor<R>,
    c_in: usize,
    c_out: usize,
) -> Option<usize> {
    if c_out == 0 || c_out > MAX_NARROW_CHANNELS {
        return None;
    }
    let width = channel_width(widest_vector(x), x.meta.strides(), c_in);
    (width >= 4).then_some(width)
}

/// Runs [`conv_narrow`] for `p` with `x` loaded in vectors of `width` (from [`narrow_width`])
/// and `w` laid out `[kd, kh, kw, c_out, c_in]`, contiguous.
pub(super) fn launch_narrow<R: CubeRuntime>(
    x: &CubeTensor<R>,
    w: &CubeTensor<R>,
    y: &CubeTensor<R>,
    p: &Problem,
    width: usize,
) {
    let rows = p.rows();
    if rows == 0 {
        return;
    }
    let count = cube_count(rows.div_ceil(VOXELS), 1);
    let (dims, window, xs, _, ys) = arguments::<R>(p);
    // SAFETY: a unit reads `x` only at a voxel inside the input grid (its index from the
    // strides in `p`, which the caller sized the buffer to) and channel vectors below
    // `c_in / width`, which `narrow_width` checked lie whole inside one voxel's channels;
    // `w` below `taps * c_out * c_in / width` vectors; `y` only for a voxel below `rows`.
    unsafe {
        conv_narrow::launch_unchecked::<R>(
            &x.client,
            count,
            CubeDim::new_1d(UNITS as u32),
            width,
            x.clone().into_tensor_arg(),
            w.clone().into_tensor_arg(),
            y.clone().into_tensor_arg(),
            dims,
            window,
            xs,
            ys,
            p.c_out,
            [x.dtype.into(), w.dtype.into(), y.dtype.into()],
        );
    }
}
