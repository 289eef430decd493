//! The convolution kernels as burn-fusion custom operations, so they run in order with the
//! fused stream around them on `burn::backend::Wgpu` and `burn::backend::Cuda`. The operands
//! are checked when the operation is registered, where an error can still be returned.

use burn::tensor::ops::FloatTensor;
use burn::tensor::Shape;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeRuntime, FloatElement, IntElement};
use burn_ir::OperationOutput;

use super::{check, check_dtypes, conv3d_data_grad, conv3d_forward, five, CubeConvError};
use crate::reference::conv_spec::Conv3dSpec;
use crate::{fixed, register, Fused, Kernel};

/// What a launch needs besides its two operands (the [`Kernel`] a convolution registers).
#[derive(Debug, Clone, Copy)]
struct Geometry {
    spec: Conv3dSpec,
    /// The convolution's input shape (what the data gradient returns).
    x_shape: [usize; 5],
    data_grad: bool,
}

impl Geometry {
    /// `spec`'s convolution of an input of `x_shape`, or its data gradient.
    fn new(spec: &Conv3dSpec, x_shape: [usize; 5], data_grad: bool) -> Self {
        Geometry {
            spec: *spec,
            x_shape,
            data_grad,
        }
    }
}

impl<R: CubeRuntime> Kernel<R> for Geometry {
    fn run(&self, inputs: Vec<CubeTensor<R>>) -> Vec<CubeTensor<R>> {
        let [a, w] = fixed(inputs);
        let g = self;
        let result = if g.data_grad {
            conv3d_data_grad(g.x_shape, w, a, &g.spec)
        } else {
            conv3d_forward(a, w, &g.spec)
        };
        vec![result.expect("the operands were checked when the operation was registered")]
    }
}

/// [`conv3d_forward`](super::conv3d_forward) on burn's fused CubeCL backends: `x`
/// `[b, c_in, d, h, w]` (channels-last as a permuted view, `spec.compute.layout` saying
/// which), `weight` `[c_out, c_in, kd, kh, kw]`.
pub fn conv3d_forward_fused<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    x: FloatTensor<Fused<R, F, I, BT>>,
    weight: FloatTensor<Fused<R, F, I, BT>>,
    spec: &Conv3dSpec,
) -> Result<FloatTensor<Fused<R, F, I, BT>>, CubeConvError> {
    let shapes = forward_check::<R, F, I, BT>(&x, &weight, spec)?;
    Ok(forward_checked::<R, F, I, BT>(x, weight, shapes, spec))
}

/// [`conv3d_data_grad`](super::conv3d_data_grad) on burn's fused CubeCL backends.
pub fn conv3d_data_grad_fused<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    x_shape: [usize; 5],
    weight: FloatTensor<Fused<R, F, I, BT>>,
    grad_out: FloatTensor<Fused<R, F, I, BT>>,
    spec: &Conv3dSpec,
) -> Result<FloatTensor<Fused<R, F, I, BT>>, CubeConvError> {
    data_grad_check::<R, F, I, BT>(x_shape, &weight, &grad_out, spec)?;
    Ok(data_grad_checked::<R, F, I, BT>(
        x_shape, weight, grad_out, spec,
    ))
}

/// The input's and the output's shapes of a forward convolution whose operands passed
/// [`forward_check`].
pub(super) struct ForwardShapes {
    x: [usize; 5],
    out: Shape,
}

/// Why [`conv3d_forward_fused`] would refuse these operands, checked without taking them; else
/// what registering it needs.
pub(super) fn forward_check<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    x: &FloatTensor<Fused<R, F, I, BT>>,
    weight: &FloatTensor<Fused<R, F, I, BT>>,
    spec: &Conv3dSpec,
) -> Result<ForwardShapes, CubeConvError> {
    check_dtypes(&[x.dtype, weight.dtype])?;
    let x_shape = five(&x.shape, "input")?;
    let w_shape = five(&weight.shape, "weight")?;
    let [od, oh, ow] = check(x_shape, w_shape, spec.stride, spec.padding)?;
    Ok(ForwardShapes {
        x: x_shape,
        out: Shape::new([x_shape[0], w_shape[0], od, oh, ow]),
    })
}

/// Registers the forward convolution of operands [`forward_check`] accepted.
pub(super) fn forward_checked<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    x: FloatTensor<Fused<R, F, I, BT>>,
    weight: FloatTensor<Fused<R, F, I, BT>>,
    shapes: ForwardShapes,
    spec: &Conv3dSpec,
) -> FloatTensor<Fused<R, F, I, BT>> {
    let geometry = Geometry::new(spec, shapes.x, false);
    registered::<R, F, I, BT>(geometry, x, weight, shapes.out)
}

/// Why [`conv3d_data_grad_fused`] would refuse these operands, checked without taking them.
pub(super) fn data_grad_check<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    x_shape: [usize; 5],
    weight: &FloatTensor<Fused<R, F, I, BT>>,
    grad_out: &FloatTensor<Fused<R, F, I, BT>>,
    spec: &Conv3dSpec,
) -> Result<(), CubeConvError> {
    check_dtypes(&[grad_out.dtype, weight.dtype])?;
    let w_shape = five(&weight.shape, "weight")?;
    let [od, oh, ow] = check(x_shape, w_shape, spec.stride, spec.padding)?;
    let got = five(&grad_out.shape, "output gradient")?;
    let want = [x_shape[0], w_shape[0], od, oh, ow];
    if got != want {
        return Err(CubeConvError::GradShape { got, want });
    }
    Ok(())
}

/// Registers the data gradient of operands [`data_grad_check`] accepted.
pub(super) fn data_grad_checked<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    x_shape: [usize; 5],
    weight: FloatTensor<Fused<R, F, I, BT>>,
    grad_out: FloatTensor<Fused<R, F, I, BT>>,
    spec: &Conv3dSpec,
) -> FloatTensor<Fused<R, F, I, BT>> {
    let geometry = Geometry::new(spec, x_shape, true);
    registered::<R, F, I, BT>(geometry, grad_out, weight, Shape::new(x_shape))
}

/// Registers the convolution `geometry` says of activation `a` with `weight`, giving a tensor
/// of `out` in `a`'s dtype.
fn registered<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    geometry: Geometry,
    a: FloatTensor<Fused<R, F, I, BT>>,
    weight: FloatTensor<Fused<R, F, I, BT>>,
    out: Shape,
) -> FloatTensor<Fused<R, F, I, BT>> {
    let name = match geometry.data_grad {
        true => "medddpm_cube_conv3d_data_grad",
        false => "medddpm_cube_conv3d_forward",
    };
    let dtype = a.dtype;
    let [y] =
        register::<R, F, I, BT, _>(name, vec![a, weight], vec![(out, dtype)], geometry).outputs();
    y
}
