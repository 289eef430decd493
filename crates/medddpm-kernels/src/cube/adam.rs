//! One Adam update of one parameter tensor in one kernel (see [`crate::adam`]): each thread
//! reads a parameter, its gradient and both moments, and writes the three updated values.
//! Arithmetic in f32, in the order of [`crate::adam::adam_step_reference`].

use burn::tensor::DType;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;
use cubecl::prelude::*;
use cubecl::{calculate_cube_count_elemwise, CubeDim};

use crate::AdamStep;

/// One element's update, in f32 and in [`crate::adam::adam_step_reference`]'s order.
#[derive(CubeType)]
struct Updated {
    param: f32,
    moment_1: f32,
    moment_2: f32,
}

#[cube]
#[allow(clippy::too_many_arguments)]
fn updated(
    param: f32,
    g: f32,
    moment_1: f32,
    moment_2: f32,
    beta_1: f32,
    one_minus_beta_1: f32,
    beta_2: f32,
    one_minus_beta_2: f32,
    combined: f32,
    eps_hat: f32,
    lr: f32,
) -> Updated {
    let m = moment_1 * beta_1 + g * one_minus_beta_1;
    let v = moment_2 * beta_2 + (g * g) * one_minus_beta_2;
    let update = (m * combined) / (f32::sqrt(v) + eps_hat);
    Updated {
        param: param - update * lr,
        moment_1: m,
        moment_2: v,
    }
}

/// Parameter and moments in `F`, the gradient in `G` (a bf16 forward pass gives bf16
/// gradients for the f32 master weights).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn adam_update<F: Float, G: Float>(
    param: &Tensor<F>,
    grad: &Tensor<G>,
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
    #[define(F, G)] _dtypes: [StorageType; 2],
) {
    let i = ABSOLUTE_POS;
    if i >= param.len() {
        terminate!();
    }
    let u = updated(
        f32::cast_from(param[i]),
        f32::cast_from(grad[i]),
        f32::cast_from(moment_1[i]),
        f32::cast_from(moment_2[i]),
        beta_1,
        one_minus_beta_1,
        beta_2,
        one_minus_beta_2,
        combined,
        eps_hat,
        lr,
    );
    param_out[i] = F::cast_from(u.param);
    moment_1_out[i] = F::cast_from(u.moment_1);
    moment_2_out[i] = F::cast_from(u.moment_2);
}

/// [`adam_update`], and the updated parameter also written in `W` (the working copy of the
/// next forward pass, so that no cast runs between the optimizer and the network).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn adam_update_copy<F: Float, G: Float, W: Float>(
    param: &Tensor<F>,
    grad: &Tensor<G>,
    moment_1: &Tensor<F>,
    moment_2: &Tensor<F>,
    param_out: &mut Tensor<F>,
    moment_1_out: &mut Tensor<F>,
    moment_2_out: &mut Tensor<F>,
    copy_out: &mut Tensor<W>,
    beta_1: f32,
    one_minus_beta_1: f32,
    beta_2: f32,
    one_minus_beta_2: f32,
    combined: f32,
    eps_hat: f32,
    lr: f32,
    #[define(F, G, W)] _dtypes: [StorageType; 3],
) {
    let i = ABSOLUTE_POS;
    if i >= param.len() {
        terminate!();
    }
    let u = updated(
        f32::cast_from(param[i]),
        f32::cast_from(grad[i]),
        f32::cast_from(moment_1[i]),
        f32::cast_from(moment_2[i]),
        beta_1,
        one_minus_beta_1,
        beta_2,
        one_minus_beta_2,
        combined,
        eps_hat,
        lr,
    );
    // The master value rounded to F first, so that the copy is exactly the cast of the
    // parameter the optimizer keeps (what casting it again would give).
    let p = F::cast_from(u.param);
    param_out[i] = p;
    copy_out[i] = W::cast_from(p);
    moment_1_out[i] = F::cast_from(u.moment_1);
    moment_2_out[i] = F::cast_from(u.moment_2);
}

/// `[param, moment_1, moment_2]` after one update (parameter and moments of one shape and
/// dtype, the gradient of that shape in any float dtype), and with `copy` the updated
/// parameter in that dtype as a fourth tensor.
pub fn run<R: CubeRuntime>(
    param: CubeTensor<R>,
    grad: CubeTensor<R>,
    moment_1: CubeTensor<R>,
    moment_2: CubeTensor<R>,
    step: AdamStep,
    copy: Option<DType>,
) -> Vec<CubeTensor<R>> {
    let [param, grad, moment_1, moment_2] = [param, grad, moment_1, moment_2].map(into_contiguous);
    let out = |dtype: DType| {
        empty_device_contiguous_dtype::<R>(
            param.client.clone(),
            param.device.clone(),
            param.meta.shape().clone(),
            dtype,
        )
    };
    let mut outputs = vec![out(param.dtype), out(param.dtype), out(param.dtype)];
    let dim = CubeDim::new_1d(256);
    let count = calculate_cube_count_elemwise(&param.client, param.meta.num_elements(), dim);
    let (combined, eps_hat) = step.factors();
    let client = param.client.clone();
    let dtype: StorageType = param.dtype.into();
    let grad_dtype: StorageType = grad.dtype.into();
    let [p_out, m_out, v_out] = [0, 1, 2].map(|i| outputs[i].clone().into_tensor_arg());
    match copy {
        None => adam_update::launch::<R>(
            &client,
            count,
            dim,
            param.into_tensor_arg(),
            grad.into_tensor_arg(),
            moment_1.into_tensor_arg(),
            moment_2.into_tensor_arg(),
            p_out,
            m_out,
            v_out,
            step.beta_1,
            1.0 - step.beta_1,
            step.beta_2,
            1.0 - step.beta_2,
            combined,
            eps_hat,
            step.lr as f32,
            [dtype, grad_dtype],
        ),
        Some(copy_dtype) => {
            let copy = out(copy_dtype);
            outputs.push(copy.clone());
            adam_update_copy::launch::<R>(
                &client,
                count,
                dim,
                param.into_tensor_arg(),
                grad.into_tensor_arg(),
                moment_1.into_tensor_arg(),
                moment_2.into_tensor_arg(),
                p_out,
                m_out,
                v_out,
                copy.into_tensor_arg(),
                step.beta_1,
                1.0 - step.beta_1,
                step.beta_2,
                1.0 - step.beta_2,
                combined,
                eps_hat,
                step.lr as f32,
                [dtype, grad_dtype, copy_dtype.into()],
            )
        }
    }
    outputs
}
