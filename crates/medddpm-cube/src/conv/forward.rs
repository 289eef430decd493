//! The forward convolution: one launch of the implicit GEMM over the weight laid out
//! `[kd, kh, kw, c_in, c_out]`.

use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::permute;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;

use super::launch::{choose_tile, launch, Problem};
use super::narrow::{launch_narrow, narrow_width};
use super::{check, check_dtypes, empty_in_layout, five, CubeConvError};
use crate::compute::Layout;
use crate::reference::conv_spec::Conv3dSpec;

/// `y = conv3d(x, weight)` (no bias) for `x` `[b, c_in, d, h, w]` in any memory order and
/// `weight` `[c_out, c_in, kd, kh, kw]`; `y` is `[b, c_out, od, oh, ow]` in the memory order
/// of `spec.compute.layout` (channels-last as the permuted view of a contiguous `[b, od, oh, ow, c_out]`
/// buffer), in `x`'s dtype, accumulated in f32.
pub fn conv3d_forward<R: CubeRuntime>(
    x: CubeTensor<R>,
    weight: CubeTensor<R>,
    spec: &Conv3dSpec,
) -> Result<CubeTensor<R>, CubeConvError> {
    let xs = five(x.meta.shape(), "input")?;
    let wsh = five(weight.meta.shape(), "weight")?;
    check_dtypes(&[x.dtype, weight.dtype])?;
    let out_size = check(xs, wsh, spec.stride, spec.padding)?;
    let layout = spec.compute.layout;
    let [b, c_in, d, h, w] = xs;
    let [c_out, _, kd, kh, kw] = wsh;
    let y = empty_in_layout(
        &x,
        [b, c_out, out_size[0], out_size[1], out_size[2]],
        layout,
    );
    let narrow = narrow_width(&x, c_in, c_out);
    // `[kd, kh, kw, c_in, c_out]`: the output channels of a weight-tile row are contiguous;
    // for the narrow kernel `[kd, kh, kw, c_out, c_in]`, its vectors along the input's.
    let order = if narrow.is_some() {
        [2, 3, 4, 0, 1]
    } else {
        [2, 3, 4, 1, 0]
    };
    let wt = into_contiguous(permute(weight, &order));
    let s = wt.meta.strides();
    let (w_ci, w_co) = if narrow.is_some() {
        (s[4], s[3])
    } else {
        (s[3], s[4])
    };
    let p = Problem {
        batch: b,
        c_in,
        c_out,
        in_size: [d, h, w],
        out_size,
        stride: spec.stride,
        pad: spec.padding.map(|v| v as i64),
        taps: [kd, kh, kw],
        x_strides: strides5(&x),
        x_base: 0,
        w_base: 0,
        w_taps: [s[0] as i64, s[1] as i64, s[2] as i64],
        w_ci,
        w_co,
        y_strides: strides5(&y),
        y_base: 0,
    };
    if let Some(width) = narrow {
        launch_narrow(&x, &wt, &y, &p, width);
        return Ok(y);
    }
    let tile = choose_tile(&x, c_in, c_out, layout == Layout::Ndhwc);
    launch(&x, &wt, &y, &p, tile);
    Ok(y)
}

/// The five strides of a rank-5 tensor.
pub(super) fn strides5<R: CubeRuntime>(t: &CubeTensor<R>) -> [usize; 5] {
    let s = t.meta.strides();
    [s[0], s[1], s[2], s[3], s[4]]
}
