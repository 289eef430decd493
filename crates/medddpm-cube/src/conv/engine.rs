//! The convolutions of burn's fused CubeCL backends (wgpu, CUDA) when cuDNN does not compute
//! them: our portable kernels with `--conv-engine cubecl`, burn's own otherwise. Operands our
//! kernels do not take (f64, a tensor of 2^31 elements or more) go to burn's kernels too, with
//! one note on stderr the first time.

use std::sync::atomic::{AtomicBool, Ordering};

use burn::tensor::ops::{FloatTensor, ModuleOps};
use burn_cubecl::{BoolElement, CubeRuntime, FloatElement, IntElement};

use super::five;
use super::fused::{data_grad_check, data_grad_checked, forward_check, forward_checked};
use super::wgrad::{weight_grad_check, weight_grad_checked};
use crate::reference::conv_spec::Conv3dSpec;
use crate::Fused;

/// Says once per process that burn's kernels stood in for ours, and why.
fn note_fallback(why: &dyn std::fmt::Display) {
    static NOTED: AtomicBool = AtomicBool::new(false);
    if !NOTED.swap(true, Ordering::Relaxed) {
        log::info!("convolutions: burn's kernels compute what ours do not take ({why})");
    }
}

/// What `check` returns where `spec` asks for our kernels and they take the operands; `None`
/// (burn's kernels compute it) otherwise, noting why where they refused.
fn ours<T, E: std::fmt::Display>(
    spec: &Conv3dSpec,
    check: impl FnOnce() -> Result<T, E>,
) -> Option<T> {
    if !spec.compute.uses_portable_kernels() {
        return None;
    }
    check().map_err(|why| note_fallback(&why)).ok()
}

/// `y = conv(x, weight)`.
pub fn forward<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    x: FloatTensor<Fused<R, F, I, BT>>,
    weight: FloatTensor<Fused<R, F, I, BT>>,
    spec: Conv3dSpec,
) -> FloatTensor<Fused<R, F, I, BT>> {
    let check = || forward_check::<R, F, I, BT>(&x, &weight, &spec);
    if let Some(shapes) = ours(&spec, check) {
        return forward_checked::<R, F, I, BT>(x, weight, shapes, &spec);
    }
    Fused::<R, F, I, BT>::conv3d(x, weight, None, spec.options())
}

/// `dL/dx` given `dL/dy`.
pub fn data_grad<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    x: FloatTensor<Fused<R, F, I, BT>>,
    weight: FloatTensor<Fused<R, F, I, BT>>,
    grad_out: FloatTensor<Fused<R, F, I, BT>>,
    spec: Conv3dSpec,
) -> FloatTensor<Fused<R, F, I, BT>> {
    let check = || {
        let x_shape = five(&x.shape, "input")?;
        data_grad_check::<R, F, I, BT>(x_shape, &weight, &grad_out, &spec).map(|()| x_shape)
    };
    if let Some(x_shape) = ours(&spec, check) {
        return data_grad_checked::<R, F, I, BT>(x_shape, weight, grad_out, &spec);
    }
    Fused::<R, F, I, BT>::conv3d_x_backward(x, weight, grad_out, spec.options())
}

/// `dL/dweight` given `dL/dy`.
pub fn weight_grad<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    x: FloatTensor<Fused<R, F, I, BT>>,
    weight: FloatTensor<Fused<R, F, I, BT>>,
    grad_out: FloatTensor<Fused<R, F, I, BT>>,
    spec: Conv3dSpec,
) -> FloatTensor<Fused<R, F, I, BT>> {
    let check = || weight_grad_check::<R, F, I, BT>(&x, &weight, &grad_out, &spec);
    if let Some(kernel) = ours(&spec, check) {
        return weight_grad_checked::<R, F, I, BT>(x, &weight, grad_out, kernel, &spec);
    }
    Fused::<R, F, I, BT>::conv3d_weight_backward(x, weight, grad_out, spec.options())
}
