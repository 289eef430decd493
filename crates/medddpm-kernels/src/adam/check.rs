//! The agreement check of a backend's Adam updates against the plain-op twin (what
//! `medddpm check-kernels` and the tests run).

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Tensor, TensorPrimitive};

use crate::agreement::{rel_l2, worse};
use crate::dtype::cast_to;
use crate::extension::KernelBackend;
use crate::reference::adam::{adam_step_reference, AdamOutput, AdamStep, AdamTensors};

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
/// exactly, and without `work`). Each update gets the previous one's copies to recycle;
/// every other one finds its parameters and moments still held elsewhere (see the loop).
pub fn engine_vs_reference<B: KernelBackend>(
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
    let lengths = case_lengths(len);
    let mut want: Vec<[Tensor<Flex, 1>; 3]> = lengths
        .iter()
        .map(|&n| {
            let param = Tensor::<Flex, 1>::random([n], Distribution::Normal(0.0, 1.0), &cpu);
            [param.clone(), param.zeros_like(), param.zeros_like()]
        })
        .collect();
    let on = |t: &Tensor<Flex, 1>| to_backend::<B>(t, device);
    let mut got: Vec<[Tensor<B, 1>; 3]> =
        want.iter().map(|[p, m, v]| [on(p), on(m), on(v)]).collect();
    let mut copy_err: f64 = 0.0;
    // The copies of the previous update, handed back to the next one to consume.
    let mut last_copies: Vec<Option<FloatTensor<B>>> = lengths.iter().map(|_| None).collect();
    for t in 1..=steps {
        let (grads, device_grads) = check_gradients::<B>(&lengths, t, steps, work, device);
        let step = AdamStep {
            lr: 1e-3 * t as f64,
            beta_1: 0.9,
            beta_2: 0.999,
            epsilon: 1e-8,
            time: t,
        };
        // Every other update with the old values held elsewhere too (as the trainer's EMA holds
        // them before it starts blending), so that the update writes new buffers; the others
        // hand their tensors over and are updated in place.
        let held = (t % 2 == 0).then(|| got.clone());
        let out = B::adam_steps(adam_inputs(got, device_grads, last_copies), step, work);
        drop(held);
        (got, last_copies, copy_err) = read_outputs(out, work);
        want = want
            .into_iter()
            .zip(grads)
            .map(|(state, g)| adam_step_reference(state, g, step))
            .collect();
    }
    let mut worst = [0.0f64, 0.0, 0.0, copy_err];
    for (g, w) in got.into_iter().zip(want) {
        for (k, (a, b)) in g.into_iter().zip(w).enumerate() {
            worst[k] = worse(worst[k], rel_l2(to_cpu(a), b));
        }
    }
    worst
}

/// `t` on `device`.
fn to_backend<B: Backend>(t: &Tensor<burn::backend::Flex, 1>, device: &B::Device) -> Tensor<B, 1> {
    Tensor::<B, 1>::from_data(t.to_data(), device)
}

/// `t` in f32 on the CPU.
fn to_cpu<B: Backend>(t: Tensor<B, 1>) -> Tensor<burn::backend::Flex, 1> {
    Tensor::from_data(cast_to(t, DType::F32).to_data(), &Default::default())
}

/// Update `t`'s gradients in [`engine_vs_reference`] (of scale `10^(t - steps - 3)`, one per
/// length), drawn on the CPU: as the reference gets them and as `B` gets them (both as the
/// working dtype holds them, with `work`).
fn check_gradients<B: Backend>(
    lengths: &[usize],
    t: usize,
    steps: usize,
    work: Option<DType>,
    device: &B::Device,
) -> (Vec<Tensor<burn::backend::Flex, 1>>, Vec<Tensor<B, 1>>) {
    use burn::backend::Flex;
    use burn::tensor::Distribution;
    let cpu = Default::default();
    let scale = 10f64.powi(t as i32 - steps as i32 - 3);
    let mut grads: Vec<Tensor<Flex, 1>> = lengths
        .iter()
        .map(|&n| Tensor::<Flex, 1>::random([n], Distribution::Normal(0.0, scale), &cpu))
        .collect();
    // The gradients as the working dtype holds them, for both sides.
    let device_grads: Vec<Tensor<B, 1>> = grads
        .iter()
        .map(|g| match work {
            None => to_backend::<B>(g, device),
            Some(dtype) => cast_to(to_backend::<B>(g, device), dtype),
        })
        .collect();
    if work.is_some() {
        grads = device_grads.iter().map(|g| to_cpu(g.clone())).collect();
    }
    (grads, device_grads)
}

/// The items of one [`crate::KernelBackend::adam_steps`] call: parameters and moments,
/// gradients, and the copies to recycle.
fn adam_inputs<B: Backend>(
    got: Vec<[Tensor<B, 1>; 3]>,
    grads: Vec<Tensor<B, 1>>,
    recycle: Vec<Option<FloatTensor<B>>>,
) -> Vec<AdamTensors<B>> {
    let prim = |t: Tensor<B, 1>| t.into_primitive().tensor();
    got.into_iter()
        .zip(grads)
        .zip(recycle)
        .map(|(([p, m, v], g), recycle)| AdamTensors {
            param: prim(p),
            grad: prim(g),
            moment_1: prim(m),
            moment_2: prim(v),
            recycle,
        })
        .collect()
}

/// The updated tensors of one call, its copies (for the next call to recycle), and the worst
/// copy's error against the cast of its updated parameter (0 without `work`).
#[allow(clippy::type_complexity)]
fn read_outputs<B: Backend>(
    out: Vec<AdamOutput<B>>,
    work: Option<DType>,
) -> (Vec<[Tensor<B, 1>; 3]>, Vec<Option<FloatTensor<B>>>, f64) {
    let tensor = |t: FloatTensor<B>| Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(t));
    let mut copy_err: f64 = 0.0;
    let mut last_copies = Vec::with_capacity(out.len());
    let got = out
        .into_iter()
        .map(|o| {
            let updated = o.updated.map(tensor);
            if let (Some(dtype), Some(copy)) = (work, o.copy) {
                let err = rel_l2(
                    to_cpu(tensor(copy.clone())),
                    to_cpu(cast_to(updated[0].clone(), dtype)),
                );
                copy_err = worse(copy_err, err);
                last_copies.push(Some(copy));
            } else {
                last_copies.push(None);
            }
            updated
        })
        .collect();
    (got, last_copies, copy_err)
}
