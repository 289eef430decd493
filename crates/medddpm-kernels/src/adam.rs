//! Adam updates of many parameter tensors as one backend operation.
//!
//! burn's Adam spends about a dozen tensor operations per parameter tensor and step; with a
//! few hundred parameter tensors that is thousands of operations whose host-side cost, not
//! their arithmetic, made the optimizer phase 15.7-18.9 ms of a bf16 training step on an H100
//! (9.9 ms with one operation per tensor; docs/benchmarks/README.md, fourth session).
//! [`crate::KernelBackend::adam_steps`] updates a whole list of tensors in one operation (on
//! the CubeCL backends one kernel launch per few dozen tensors), with [`adam_step_reference`]
//! per tensor as its plain-op twin.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Shape, Tensor, TensorMetadata, TensorPrimitive};

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

/// The plain-op reference: `[param, moment_1, moment_2]` after one update, with burn's Adam's
/// operations in burn's order (so it matches `burn::optim::Adam` to the last bit).
pub fn adam_step_reference<B: Backend, const D: usize>(
    param: Tensor<B, D>,
    grad: Tensor<B, D>,
    moment_1: Tensor<B, D>,
    moment_2: Tensor<B, D>,
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
/// to recycle are dropped): the provided body of [`crate::KernelBackend::adam_steps`].
pub(crate) fn adam_steps_primitive<B: Backend>(
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
pub(crate) fn adam_step_primitive<B: Backend>(
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
    let grad = crate::cast_to(flat(grad), dtype);
    let out = adam_step_reference(flat(param), grad, flat(moment_1), flat(moment_2), step);
    let copy = copy.map(|d| crate::cast_to(out[0].clone(), d));
    let back = |t: Tensor<B, 1>| B::float_reshape(t.into_primitive().tensor(), shape.clone());
    AdamOutput {
        updated: out.map(back),
        copy: copy.map(back),
    }
}

/// [`crate::KernelBackend::adam_steps`] on one tensor: `[param, moment_1, moment_2]` after one
/// update with gradient `grad` (parameter and moments of one shape and dtype; the gradient of
/// that shape, in that dtype or a lower one).
pub fn adam_step<B: crate::KernelBackend, const D: usize>(
    param: Tensor<B, D>,
    grad: Tensor<B, D>,
    moment_1: Tensor<B, D>,
    moment_2: Tensor<B, D>,
    step: AdamStep,
) -> [Tensor<B, D>; 3] {
    let prim = |t: Tensor<B, D>| t.into_primitive().tensor();
    let item = AdamTensors {
        param: prim(param),
        grad: prim(grad),
        moment_1: prim(moment_1),
        moment_2: prim(moment_2),
        recycle: None,
    };
    let out = B::adam_steps(vec![item], step, None)
        .pop()
        .expect("one update per item");
    out.updated
        .map(|t| Tensor::from_primitive(TensorPrimitive::Float(t)))
}

/// The lengths of the parameter tensors [`engine_vs_reference`] updates together: `len`, then
/// 69 more from 1 value to about `len` (enough that the GPU kernels work through more than
/// one launch's worth of tensors, of uneven sizes).
pub fn case_lengths(len: usize) -> Vec<usize> {
    let mut lengths = vec![len];
    lengths.extend((1..70).map(|k| 1 + (len * (k % 7)) / 7 + k % 5));
    lengths
}

/// Relative L2 differences of backend `B`'s [`crate::KernelBackend::adam_steps`] against
/// [`adam_step_reference`] in f32 on the CPU after `steps` updates of the parameters of
/// [`case_lengths`]`(len)`, all updated by one call (learning rate and step count changing
/// every update, gradients of every scale down to where epsilon matters), the worst tensor's:
/// `[param, moment_1, moment_2, copy]`. With `work` (mixed precision), the gradients arrive in
/// that dtype and the update also writes the parameters in it; `copy` is the last update's
/// copies against the casts of the parameters that update returned (0 when they agree
/// exactly, and without `work`). Each update gets the previous one's copies to recycle.
pub fn engine_vs_reference<B: crate::KernelBackend>(
    device: &B::Device,
    len: usize,
    steps: usize,
    seed: u64,
    work: Option<DType>,
) -> [f64; 4] {
    use burn::backend::Flex;
    use burn::tensor::Distribution;
    let cpu = Default::default();
    Flex::seed(&cpu, seed);
    let on = |t: &Tensor<Flex, 1>| Tensor::<B, 1>::from_data(t.to_data(), device);
    let back = |t: Tensor<B, 1>| {
        Tensor::<Flex, 1>::from_data(crate::cast_to(t, DType::F32).to_data(), &cpu)
    };
    let prim = |t: Tensor<B, 1>| t.into_primitive().tensor();
    let tensor = |t: FloatTensor<B>| Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(t));
    let lengths = case_lengths(len);
    let mut want: Vec<[Tensor<Flex, 1>; 3]> = lengths
        .iter()
        .map(|&n| {
            let param = Tensor::<Flex, 1>::random([n], Distribution::Normal(0.0, 1.0), &cpu);
            [param.clone(), param.zeros_like(), param.zeros_like()]
        })
        .collect();
    let mut got: Vec<[Tensor<B, 1>; 3]> =
        want.iter().map(|[p, m, v]| [on(p), on(m), on(v)]).collect();
    let mut copy_err: f64 = 0.0;
    // The copies of the previous update, handed back to the next one to consume.
    let mut last_copies: Vec<Option<FloatTensor<B>>> = lengths.iter().map(|_| None).collect();
    for t in 1..=steps {
        let scale = 10f64.powi(t as i32 - steps as i32 - 3);
        let mut grads: Vec<Tensor<Flex, 1>> = lengths
            .iter()
            .map(|&n| Tensor::<Flex, 1>::random([n], Distribution::Normal(0.0, scale), &cpu))
            .collect();
        let step = AdamStep {
            lr: 1e-3 * t as f64,
            beta_1: 0.9,
            beta_2: 0.999,
            epsilon: 1e-8,
            time: t,
        };
        // The gradients as the working dtype holds them, for both sides.
        let device_grads: Vec<Tensor<B, 1>> = grads
            .iter()
            .map(|g| match work {
                None => on(g),
                Some(dtype) => crate::cast_to(on(g), dtype),
            })
            .collect();
        if work.is_some() {
            grads = device_grads.iter().map(|g| back(g.clone())).collect();
        }
        let items = got
            .into_iter()
            .zip(device_grads)
            .zip(last_copies)
            .map(|(([p, m, v], g), recycle)| AdamTensors {
                param: prim(p),
                grad: prim(g),
                moment_1: prim(m),
                moment_2: prim(v),
                recycle,
            })
            .collect();
        let out = B::adam_steps(items, step, work);
        copy_err = 0.0;
        last_copies = Vec::with_capacity(lengths.len());
        got = out
            .into_iter()
            .map(|o| {
                let updated = o.updated.map(tensor);
                if let (Some(dtype), Some(copy)) = (work, o.copy) {
                    let err = crate::conv::rel_l2(
                        back(tensor(copy.clone())),
                        back(crate::cast_to(updated[0].clone(), dtype)),
                    );
                    copy_err = crate::conv::worse(copy_err, err);
                    last_copies.push(Some(copy));
                } else {
                    last_copies.push(None);
                }
                updated
            })
            .collect();
        want = want
            .into_iter()
            .zip(grads)
            .map(|([p, m, v], g)| adam_step_reference(p, g, m, v, step))
            .collect();
    }
    let mut worst = [0.0f64, 0.0, 0.0, copy_err];
    for (g, w) in got.into_iter().zip(want) {
        for (k, (a, b)) in g.into_iter().zip(w).enumerate() {
            worst[k] = crate::conv::worse(worst[k], crate::conv::rel_l2(back(a), b));
        }
    }
    worst
}
