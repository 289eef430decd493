//! One Adam update of one parameter tensor in one kernel (see [`crate::adam`]): each thread
//! reads a parameter, its gradient and both moments, and writes the three updated values.
//! Arithmetic in f32, in the order of [`crate::adam::adam_step_reference`].

use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;
use cubecl::prelude::*;
use cubecl::{calculate_cube_count_elemwise, CubeDim};

use crate::AdamStep;

#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn adam_update<F: Float>(
    param: &Tensor<F>,
    grad: &Tensor<F>,
    moment_1: &Tensor<F>,
    moment_2: &Tensor<F>,
    param_out: &mut Tensor<F>,
    moment_1_out: &mut Tensor<F>,
    moment_2_out: &mut Tensor<F>,
    beta_1: f32,
    one_minus_beta_1: f32,
    beta_2: f32,
    one_minus_beta_2: f32,
    combined: f32,
    eps_hat: f32,
    lr: f32,
    #[define(F)] _dtype: StorageType,
) {
    let i = ABSOLUTE_POS;
    if i >= param.len() {
        terminate!();
    }
    let g = f32::cast_from(grad[i]);
    let m = f32::cast_from(moment_1[i]) * beta_1 + g * one_minus_beta_1;
    let v = f32::cast_from(moment_2[i]) * beta_2 + (g * g) * one_minus_beta_2;
    let update = (m * combined) / (f32::sqrt(v) + eps_hat);
    param_out[i] = F::cast_from(f32::cast_from(param[i]) - update * lr);
    moment_1_out[i] = F::cast_from(m);
    moment_2_out[i] = F::cast_from(v);
}

/// `[param, moment_1, moment_2]` after one update (inputs of one shape and dtype).
pub fn run<R: CubeRuntime>(
    param: CubeTensor<R>,
    grad: CubeTensor<R>,
    moment_1: CubeTensor<R>,
    moment_2: CubeTensor<R>,
    step: AdamStep,
) -> [CubeTensor<R>; 3] {
    let [param, grad, moment_1, moment_2] = [param, grad, moment_1, moment_2].map(into_contiguous);
    let out = || {
        empty_device_contiguous_dtype::<R>(
            param.client.clone(),
            param.device.clone(),
            param.meta.shape().clone(),
            param.dtype,
        )
    };
    let outputs = [out(), out(), out()];
    let dim = CubeDim::new_1d(256);
    let count = calculate_cube_count_elemwise(&param.client, param.meta.num_elements(), dim);
    let (combined, eps_hat) = step.factors();
    let client = param.client.clone();
    let dtype: StorageType = param.dtype.into();
    adam_update::launch::<R>(
        &client,
        count,
        dim,
        param.into_tensor_arg(),
        grad.into_tensor_arg(),
        moment_1.into_tensor_arg(),
        moment_2.into_tensor_arg(),
        outputs[0].clone().into_tensor_arg(),
        outputs[1].clone().into_tensor_arg(),
        outputs[2].clone().into_tensor_arg(),
        step.beta_1,
        1.0 - step.beta_1,
        step.beta_2,
        1.0 - step.beta_2,
        combined,
        eps_hat,
        step.lr as f32,
        dtype,
    );
    outputs
}
