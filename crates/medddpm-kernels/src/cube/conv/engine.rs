//! The `cubecl` convolution engine: our portable kernels as the three convolution operations of
//! [`crate::KernelBackend`] on burn's fused CubeCL backends (wgpu, CUDA). Operands the kernels
//! do not take (f64, a tensor of 2^31 elements or more) go to burn's own kernels instead, with
//! one note on stderr the first time.

use std::sync::atomic::{AtomicBool, Ordering};

use burn::tensor::ops::{FloatTensor, ModuleOps};
use burn_cubecl::{BoolElement, CubeRuntime, FloatElement, IntElement};

use super::{
    conv3d_data_grad_fused, conv3d_forward_fused, data_grad_check, forward_check,
    wgrad::{conv3d_weight_grad_fused, weight_grad_check},
};
use crate::conv::Conv3dSpec;
use crate::cube::Fused;

/// Says once per process that burn's kernels stood in for ours, and why.
fn note_fallback(why: &dyn std::fmt::Display) {
    static NOTED: AtomicBool = AtomicBool::new(false);
    if !NOTED.swap(true, Ordering::Relaxed) {
        eprintln!("convolutions: burn's kernels compute what ours do not take ({why})");
    }
}

/// `y = conv(x, weight)`.
pub fn forward<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    x: FloatTensor<Fused<R, F, I, BT>>,
    weight: FloatTensor<Fused<R, F, I, BT>>,
    spec: Conv3dSpec,
) -> FloatTensor<Fused<R, F, I, BT>> {
    if let Err(why) = forward_check::<R, F, I, BT>(&x, &weight, spec.stride, spec.padding) {
        note_fallback(&why);
        return Fused::<R, F, I, BT>::conv3d(x, weight, None, spec.options());
    }
    conv3d_forward_fused::<R, F, I, BT>(x, weight, spec.stride, spec.padding, spec.compute.layout)
        .expect("the operands were checked")
}

/// `dL/dx` given `dL/dy`.
pub fn data_grad<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    x: FloatTensor<Fused<R, F, I, BT>>,
    weight: FloatTensor<Fused<R, F, I, BT>>,
    grad_out: FloatTensor<Fused<R, F, I, BT>>,
    spec: Conv3dSpec,
) -> FloatTensor<Fused<R, F, I, BT>> {
    let x_shape: Option<[usize; 5]> = x.shape.iter().copied().collect::<Vec<_>>().try_into().ok();
    let checked = x_shape
        .map(|s| data_grad_check::<R, F, I, BT>(s, &weight, &grad_out, spec.stride, spec.padding));
    match (x_shape, checked) {
        (Some(x_shape), Some(Ok(()))) => conv3d_data_grad_fused::<R, F, I, BT>(
            x_shape,
            weight,
            grad_out,
            spec.stride,
            spec.padding,
            spec.compute.layout,
        )
        .expect("the operands were checked"),
        (_, checked) => {
            match checked {
                Some(Err(why)) => note_fallback(&why),
                _ => note_fallback(&"the input is not 5-D"),
            }
            Fused::<R, F, I, BT>::conv3d_x_backward(x, weight, grad_out, spec.options())
        }
    }
}

/// `dL/dweight` given `dL/dy`.
pub fn weight_grad<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    x: FloatTensor<Fused<R, F, I, BT>>,
    weight: FloatTensor<Fused<R, F, I, BT>>,
    grad_out: FloatTensor<Fused<R, F, I, BT>>,
    spec: Conv3dSpec,
) -> FloatTensor<Fused<R, F, I, BT>> {
    if let Err(why) = weight_grad_check::<R, F, I, BT>(&x, &weight, &grad_out, &spec) {
        note_fallback(&why);
        return Fused::<R, F, I, BT>::conv3d_weight_backward(x, weight, grad_out, spec.options());
    }
    conv3d_weight_grad_fused::<R, F, I, BT>(x, &weight, grad_out, &spec)
        .expect("the operands were checked")
}
