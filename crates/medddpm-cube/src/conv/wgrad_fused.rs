//! The weight gradient as a burn-fusion custom operation, so it runs in order with the fused
//! stream around it on `burn::backend::Wgpu` and `burn::backend::Cuda`. The operands are
//! checked when the operation is registered, where an error can still be returned.

use burn::tensor::ops::FloatTensor;
use burn::tensor::DType;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeRuntime, FloatElement, IntElement};
use burn_ir::OperationOutput;

use super::{check_shapes, conv3d_weight_grad, five, WgradError};
use crate::reference::conv_spec::Conv3dSpec;
use crate::{fixed, register, Fused, Kernel};

/// The weight gradient as a fusion operation: inputs `x, grad_out`.
#[derive(Debug)]
struct WgradOp {
    kernel: [usize; 3],
    spec: Conv3dSpec,
    out_dtype: DType,
}

impl<R: CubeRuntime> Kernel<R> for WgradOp {
    fn run(&self, inputs: Vec<CubeTensor<R>>) -> Vec<CubeTensor<R>> {
        let [x, grad_out] = fixed(inputs);
        let dw = conv3d_weight_grad(x, grad_out, self.kernel, &self.spec, self.out_dtype)
            .expect("the operands were checked when the operation was registered");
        vec![dw]
    }
}

/// [`conv3d_weight_grad`](super::conv3d_weight_grad) on burn's fused CubeCL backends:
/// `dL/dweight` in `weight`'s shape and dtype from the convolution's input `x` and output
/// gradient `grad_out` (logically `[b, c, d, h, w]`, channels-last as permuted views). The
/// weight itself is not read, so the operation does not wait for it.
pub fn conv3d_weight_grad_fused<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    x: FloatTensor<Fused<R, F, I, BT>>,
    weight: &FloatTensor<Fused<R, F, I, BT>>,
    grad_out: FloatTensor<Fused<R, F, I, BT>>,
    spec: &Conv3dSpec,
) -> Result<FloatTensor<Fused<R, F, I, BT>>, WgradError> {
    let kernel = weight_grad_check::<R, F, I, BT>(&x, weight, &grad_out, spec)?;
    Ok(weight_grad_checked::<R, F, I, BT>(
        x, weight, grad_out, kernel, spec,
    ))
}

/// Registers the weight gradient of operands [`weight_grad_check`] accepted (`kernel`, the
/// spatial size it returned).
pub(crate) fn weight_grad_checked<
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
>(
    x: FloatTensor<Fused<R, F, I, BT>>,
    weight: &FloatTensor<Fused<R, F, I, BT>>,
    grad_out: FloatTensor<Fused<R, F, I, BT>>,
    kernel: [usize; 3],
    spec: &Conv3dSpec,
) -> FloatTensor<Fused<R, F, I, BT>> {
    let (spec, out_dtype) = (*spec, weight.dtype);
    let outputs = vec![(weight.shape.clone(), out_dtype)];
    let [dw] = register::<R, F, I, BT, _>(
        "medddpm_cube_conv3d_weight_grad",
        vec![x, grad_out],
        outputs,
        WgradOp {
            kernel,
            spec,
            out_dtype,
        },
    )
    .outputs();
    dw
}

/// Why [`conv3d_weight_grad_fused`] would refuse these operands, checked without taking them;
/// else the kernel's spatial size.
pub(crate) fn weight_grad_check<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    x: &FloatTensor<Fused<R, F, I, BT>>,
    weight: &FloatTensor<Fused<R, F, I, BT>>,
    grad_out: &FloatTensor<Fused<R, F, I, BT>>,
    spec: &Conv3dSpec,
) -> Result<[usize; 3], WgradError> {
    let w = five("weight", &weight.shape)?;
    let kernel = [w[2], w[3], w[4]];
    let shape = check_shapes(
        (&x.shape, x.dtype),
        (&grad_out.shape, grad_out.dtype),
        kernel,
        spec,
        weight.dtype,
    )?;
    let expected = [shape.m, x.shape[1], kernel[0], kernel[1], kernel[2]];
    if w != expected {
        return Err(WgradError::Weight {
            weight: w.to_vec(),
            expected: expected.to_vec(),
        });
    }
    Ok(kernel)
}
