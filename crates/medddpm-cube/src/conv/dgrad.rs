//! The data gradient by phase decomposition: one forward-kernel launch per phase of `dL/dx`.
//!
//! With stride `s`, padding `p` and `K` taps on an axis, input voxel `i = s q + r` (phase `r`
//! in `0..s`) receives `dL/dy[o] w[k]` exactly for the taps `k = k0 + s t` with
//! `k0 = (r + p) mod s` and `t` in `0..T`, `T = ceil((K - k0) / s)`, from output
//! `o = q + c - t` with `c = (r + p - k0) / s`. Written as a stride-1 correlation over `q`,
//! `dL/dx[s q + r] = sum_j dL/dy[q - (T - 1 - c) + j] w[k0 + s (T - 1 - j)]`: the sub-kernel of
//! the phase's taps, flipped, with padding `T - 1 - c` (zero outside `dL/dy`). Every
//! multiply-add is one the gradient needs (zero insertion would spend 7 in 8 of them on zeros
//! at stride 2), and the phases' outputs partition `dL/dx`, so nothing is zeroed first. Stride
//! 1 is the one phase `r = 0`: the whole kernel flipped, padding `K - 1 - p`.
//!
//! The kernel walks the sub-kernel through the weight with signed tap steps (`-s` taps per
//! step, starting at tap `k0 + s (T - 1)`), and writes the phase through output strides `s`
//! times those of `dL/dx` from offset `r`: no weight or gradient is copied. Channels swap
//! roles: the product's input channels are the convolution's output channels.

use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::permute;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;

use super::forward::strides5;
use super::launch::{choose_tile, launch, Problem};
use super::{check, check_dtypes, empty_in_layout, five, CubeConvError};
use crate::compute::Layout;
use crate::reference::conv_spec::Conv3dSpec;

/// One axis of one phase: taps, padding, first weight tap and outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct AxisPhase {
    /// Input voxels `s q + r` of the phase (`q` in `0..outputs`).
    outputs: usize,
    /// Taps of the sub-kernel (0 where no tap reaches the phase).
    taps: usize,
    /// Padding of the stride-1 correlation (may be negative).
    pad: i64,
    /// The weight tap that the correlation's tap 0 reads.
    first_tap: usize,
}

/// Phase `r` of an axis of `size` input voxels, kernel `k`, stride `s` and padding `p`.
fn axis_phase(r: usize, size: usize, k: usize, s: usize, p: usize) -> AxisPhase {
    let outputs = size.saturating_sub(r).div_ceil(s);
    let k0 = (r + p) % s;
    let taps = k.saturating_sub(k0).div_ceil(s);
    if taps == 0 {
        return AxisPhase {
            outputs,
            taps,
            pad: 0,
            first_tap: 0,
        };
    }
    let c = (r + p - k0) / s;
    AxisPhase {
        outputs,
        taps,
        pad: (taps - 1) as i64 - c as i64,
        first_tap: k0 + s * (taps - 1),
    }
}

/// `dL/dx` of `y = conv3d(x, weight)` for `x` of shape `x_shape` `[b, c_in, d, h, w]`, given
/// `grad_out` `[b, c_out, od, oh, ow]` (any memory order) and `weight`
/// `[c_out, c_in, kd, kh, kw]`; the result is in the memory order of `spec.compute.layout`
/// and in `grad_out`'s dtype, accumulated in f32.
pub fn conv3d_data_grad<R: CubeRuntime>(
    x_shape: [usize; 5],
    weight: CubeTensor<R>,
    grad_out: CubeTensor<R>,
    spec: &Conv3dSpec,
) -> Result<CubeTensor<R>, CubeConvError> {
    let (stride, padding, layout) = (spec.stride, spec.padding, spec.compute.layout);
    let wsh = five(weight.meta.shape(), "weight")?;
    check_dtypes(&[grad_out.dtype, weight.dtype])?;
    let out_size = check(x_shape, wsh, stride, padding)?;
    let gsh = five(grad_out.meta.shape(), "output gradient")?;
    let [b, c_in, d, h, w] = x_shape;
    let [c_out, _, kd, kh, kw] = wsh;
    let want = [b, c_out, out_size[0], out_size[1], out_size[2]];
    if gsh != want {
        return Err(CubeConvError::GradShape { got: gsh, want });
    }
    let dx = empty_in_layout(&grad_out, x_shape, layout);
    // `[kd, kh, kw, c_out, c_in]`: the product's output channels (the convolution's input
    // channels) contiguous.
    let wt = into_contiguous(permute(weight, &[2, 3, 4, 0, 1]));
    let ws = wt.meta.strides().to_vec();
    let dx_strides = strides5(&dx);
    let tile = choose_tile(&grad_out, c_out, c_in, layout == Layout::Ndhwc);
    let (size, kernel) = ([d, h, w], [kd, kh, kw]);
    for rd in 0..stride[0] {
        for rh in 0..stride[1] {
            for rw in 0..stride[2] {
                let r = [rd, rh, rw];
                let ph: [AxisPhase; 3] = std::array::from_fn(|a| {
                    axis_phase(r[a], size[a], kernel[a], stride[a], padding[a])
                });
                let p = Problem {
                    batch: b,
                    c_in: c_out,
                    c_out: c_in,
                    in_size: out_size,
                    out_size: ph.map(|a| a.outputs),
                    stride: [1; 3],
                    pad: ph.map(|a| a.pad),
                    taps: ph.map(|a| a.taps),
                    x_strides: strides5(&grad_out),
                    x_base: 0,
                    w_base: (0..3).map(|a| (ph[a].first_tap * ws[a]) as i64).sum(),
                    w_taps: std::array::from_fn(|a| -((stride[a] * ws[a]) as i64)),
                    w_ci: ws[3],
                    w_co: ws[4],
                    y_strides: [
                        dx_strides[0],
                        dx_strides[1],
                        stride[0] * dx_strides[2],
                        stride[1] * dx_strides[3],
                        stride[2] * dx_strides[4],
                    ],
                    y_base: (0..3).map(|a| r[a] * dx_strides[a + 2]).sum(),
                };
                launch(&grad_out, &wt, &dx, &p, tile);
            }
        }
    }
    Ok(dx)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `dL/dx` of a 1-D convolution by the phase formula, against the direct sum over taps.
    fn by_phases(x: usize, k: usize, s: usize, p: usize, dy: &[f64], w: &[f64]) -> Vec<f64> {
        let mut dx = vec![0.0; x];
        for r in 0..s {
            let a = axis_phase(r, x, k, s, p);
            for q in 0..a.outputs {
                for j in 0..a.taps {
                    let o = q as i64 - a.pad + j as i64;
                    if o >= 0 && (o as usize) < dy.len() {
                        dx[s * q + r] += dy[o as usize] * w[a.first_tap - s * j];
                    }
                }
            }
        }
        dx
    }

    #[test]
    fn phases_give_the_transposed_convolution_in_one_dimension() {
        for (x, k, s, p) in [
            (8, 3, 2, 1),
            (7, 3, 2, 1),
            (9, 3, 1, 1),
            (5, 1, 1, 0),
            (6, 1, 2, 0),
            (11, 5, 3, 2),
            (10, 4, 2, 0),
            (4, 1, 1, 1),
        ] {
            let out = (x + 2 * p - k) / s + 1;
            let dy: Vec<f64> = (0..out).map(|i| (i * 7 % 5) as f64 - 1.5).collect();
            let w: Vec<f64> = (0..k).map(|i| (i * 3 % 4) as f64 + 0.5).collect();
            let mut want = vec![0.0; x];
            for (o, g) in dy.iter().enumerate() {
                for (t, v) in w.iter().enumerate() {
                    let i = (o * s + t) as i64 - p as i64;
                    if i >= 0 && (i as usize) < x {
                        want[i as usize] += g * v;
                    }
                }
            }
            assert_eq!(
                by_phases(x, k, s, p, &dy, &w),
                want,
                "x {x} k {k} s {s} p {p}"
            );
        }
    }
}
