//! Adam's operands and its plain-burn-op twin: the update that every backend gets as
//! `KernelBackend::adam_steps`'s provided body, and that the
//! kernels are checked against.
//! It never uses the trait (only burn and the crate's ground modules), so the trait can use it.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Shape, Tensor, TensorMetadata, TensorPrimitive};

use crate::dtype::cast_to;

/// The scalars of one Adam update without weight decay: `lr`, the betas, epsilon, and the
/// 1-based step count `time` for the bias corrections. The betas and epsilon are f32 and the
/// factors below computed in f32, as burn's Adam does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamStep {
    /// Learning rate.
    pub lr: f64,
    /// Decay of the first moment.
    pub beta_1: f32,
    /// Decay of the second moment.
    pub beta_2: f32,
    /// Added to the square root of the second moment (PyTorch's default is 1e-8).
    pub epsilon: f32,
    /// Updates so far, this one included (1 on the first).
    pub time: usize,
}

impl AdamStep {
    /// `(combined, eps_hat)` of burn's arrangement of the bias corrections:
    /// `update = m * combined / (sqrt(v) + eps_hat)`, which is PyTorch's
    /// `m_hat / (sqrt(v_hat) + epsilon)` multiplied through by `sqrt(1 - beta_2^t)`.
    pub fn factors(&self) -> (f32, f32) {
        let t = self.time as i32;
        let bias_correction2_sqrt = (1.0 - self.beta_2.powi(t)).sqrt();
        (
            bias_correction2_sqrt / (1.0 - self.beta_1.powi(t)),
            self.epsilon * bias_correction2_sqrt,
        )
    }
}

/// The plain-op reference: `[param, moment_1, moment_2]` after one update of that state with
/// `grad`, with burn's Adam's operations in burn's order (so it matches `burn::optim::Adam` to
/// the last bit). The state goes in as it comes out, so steps chain.
pub fn adam_step_reference<B: Backend, const D: usize>(
    [param, moment_1, moment_2]: [Tensor<B, D>; 3],
    grad: Tensor<B, D>,
    step: AdamStep,
) -> [Tensor<B, D>; 3] {
    let moment_1 = moment_1
        .mul_scalar(step.beta_1)
        .add(grad.clone().mul_scalar(1.0 - step.beta_1));
    let moment_2 = moment_2
        .mul_scalar(step.beta_2)
        .add(grad.square().mul_scalar(1.0 - step.beta_2));
    let (combined, eps_hat) = step.factors();
    let update = moment_1
        .clone()
        .mul_scalar(combined)
        .div(moment_2.clone().sqrt().add_scalar(eps_hat));
    [param - update.mul_scalar(step.lr), moment_1, moment_2]
}

/// What one Adam update of one parameter tensor gives: `[param, moment_1, moment_2]`, and the
/// updated parameter in the working dtype when one was asked for.
pub struct AdamOutput<B: Backend> {
    /// The updated parameter and moments, in the parameter's dtype.
    pub updated: [FloatTensor<B>; 3],
    /// The updated parameter cast to the working dtype.
    pub copy: Option<FloatTensor<B>>,
}

/// One parameter tensor's inputs to an Adam update: the parameter and its moments (one shape
/// and dtype) and the gradient (that shape, in that dtype or a lower one).
pub struct AdamTensors<B: Backend> {
    /// The parameter before the update.
    pub param: FloatTensor<B>,
    /// Its gradient.
    pub grad: FloatTensor<B>,
    /// The first moment before the update.
    pub moment_1: FloatTensor<B>,
    /// The second moment before the update.
    pub moment_2: FloatTensor<B>,
    /// The working copy the previous update wrote, no longer needed: the update consumes it
    /// (and on the CubeCL backends writes the new copy into its buffer when nothing else holds
    /// it), so that it is not freed on its own afterwards.
    pub recycle: Option<FloatTensor<B>>,
}

/// [`adam_step_reference`] on each item's primitives (see [`adam_step_primitive`]; the copies
/// to recycle are dropped): the provided body of `medddpm_kernels::KernelBackend::adam_steps`.
pub fn adam_steps_primitive<B: Backend>(
    items: Vec<AdamTensors<B>>,
    step: AdamStep,
    copy: Option<DType>,
) -> Vec<AdamOutput<B>> {
    items
        .into_iter()
        .map(|t| adam_step_primitive(t.param, t.grad, t.moment_1, t.moment_2, step, copy))
        .collect()
}

/// [`adam_step_reference`] on primitives of any rank (viewed as vectors), the gradient first
/// cast to the parameter's dtype, and with `copy` the updated parameter cast to that dtype.
pub fn adam_step_primitive<B: Backend>(
    param: FloatTensor<B>,
    grad: FloatTensor<B>,
    moment_1: FloatTensor<B>,
    moment_2: FloatTensor<B>,
    step: AdamStep,
    copy: Option<DType>,
) -> AdamOutput<B> {
    let shape = param.shape();
    let dtype = param.dtype();
    let flat = |t: FloatTensor<B>| {
        let n = t.shape().num_elements();
        Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(B::float_reshape(t, Shape::new([n]))))
    };
    let grad = cast_to(flat(grad), dtype);
    let state = [param, moment_1, moment_2].map(flat);
    let out = adam_step_reference(state, grad, step);
    let copy = copy.map(|d| cast_to(out[0].clone(), d));
    let back = |t: Tensor<B, 1>| B::float_reshape(t.into_primitive().tensor(), shape.clone());
    AdamOutput {
        updated: out.map(back),
        copy: copy.map(back),
    }
}
