//! The forward process and the training objective.

use burn::tensor::{backend::Backend, DType, FloatDType, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use crate::schedule::CosineSchedule;

/// Anything that predicts the noise in a network input (noisy image and condition channels
/// concatenated) at the given per-batch-element timesteps. The U-Net implements it; tests use
/// closed-form stand-ins. Keeping this trait here means the diffusion code never sees the model.
pub trait Denoiser<B: Backend> {
    /// Predicted noise, with as many channels as the noisy image.
    fn predict_noise(&self, input: Tensor<B, 5>, timesteps: &[usize]) -> Tensor<B, 5>;
}

/// Which distance between the true and the predicted noise is minimised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LossType {
    /// Mean absolute error, what every reference training script selects.
    #[default]
    L1,
    /// Mean squared error, the reference's unused alternative.
    L2,
}

/// What the network is trained to predict (diffusers' `prediction_type`). The samplers work
/// on the noise, converted from the network's output by [`Prediction::to_noise`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Prediction {
    /// The noise (epsilon), as the reference and its released weights do.
    #[default]
    Epsilon,
    /// The velocity `v = sqrt(abar_t) noise - sqrt(1 - abar_t) x0` (Salimans & Ho 2022). Where
    /// the noise dominates, v is nearly -x0, so the loss sees errors in the volume's overall
    /// level that an epsilon target hides (a constant offset of 0.01 in the predicted noise
    /// becomes 0.1 in x0 at abar = 0.01 and barely moves the loss); short runs learn that level.
    V,
}

impl std::fmt::Display for Prediction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Prediction::Epsilon => "epsilon",
            Prediction::V => "v",
        })
    }
}

impl Prediction {
    /// The training target for `x0` diffused with `noise` to `timesteps` (one per batch element).
    pub fn target<B: Backend, const D: usize>(
        self,
        schedule: &CosineSchedule,
        x0: Tensor<B, D>,
        timesteps: &[usize],
        noise: Tensor<B, D>,
    ) -> Tensor<B, D> {
        match self {
            Prediction::Epsilon => noise,
            Prediction::V => {
                let c = schedule.coefficients::<B, D>(timesteps, &x0.device());
                self.target_at(x0, noise, &c)
            }
        }
    }

    /// [`Prediction::target`] with the timesteps' coefficients given as tensors.
    pub fn target_at<B: Backend, const D: usize>(
        self,
        x0: Tensor<B, D>,
        noise: Tensor<B, D>,
        c: &Coefficients<B, D>,
    ) -> Tensor<B, D> {
        match self {
            Prediction::Epsilon => noise,
            Prediction::V => noise * c.signal.clone() - x0 * c.noise.clone(),
        }
    }

    /// The noise implied by the network's `output` for `x_t` at timestep `t` (the whole batch at
    /// one step, as in sampling). For v: `noise = sqrt(abar_t) v + sqrt(1 - abar_t) x_t`.
    pub fn to_noise<B: Backend, const D: usize>(
        self,
        schedule: &CosineSchedule,
        output: Tensor<B, D>,
        t: usize,
        x_t: Tensor<B, D>,
    ) -> Tensor<B, D> {
        match self {
            Prediction::Epsilon => output,
            Prediction::V => {
                output.mul_scalar(schedule.sqrt_alphas_cumprod[t])
                    + x_t.mul_scalar(schedule.sqrt_one_minus_alphas_cumprod[t])
            }
        }
    }
}

impl CosineSchedule {
    /// Gathers `buffer[t_b]` for every batch element into a tensor of shape [B, 1, ..., 1] that
    /// broadcasts over a D-dimensional batch. The values are rounded to f32 only here.
    pub fn extract<B: Backend, const D: usize>(
        buffer: &[f64],
        timesteps: &[usize],
        device: &B::Device,
    ) -> Tensor<B, D> {
        let values: Vec<f32> = timesteps.iter().map(|&t| buffer[t] as f32).collect();
        let mut shape = [1usize; D];
        shape[0] = timesteps.len();
        Tensor::from_data(TensorData::new(values, shape), device)
    }

    /// Diffuses `x0` to step t in one jump: x_t = sqrt(abar_t) x0 + sqrt(1 - abar_t) noise
    /// (DDPM eq. 4). `timesteps` holds one t per batch element.
    pub fn q_sample<B: Backend, const D: usize>(
        &self,
        x0: Tensor<B, D>,
        timesteps: &[usize],
        noise: Tensor<B, D>,
    ) -> Tensor<B, D> {
        let c = self.coefficients::<B, D>(timesteps, &x0.device());
        q_sample_at(x0, noise, &c)
    }

    /// The coefficients of `timesteps` (one per batch element) on `device`.
    pub fn coefficients<B: Backend, const D: usize>(
        &self,
        timesteps: &[usize],
        device: &B::Device,
    ) -> Coefficients<B, D> {
        Coefficients {
            signal: Self::extract::<B, D>(&self.sqrt_alphas_cumprod, timesteps, device),
            noise: Self::extract::<B, D>(&self.sqrt_one_minus_alphas_cumprod, timesteps, device),
        }
    }
}

/// A batch's timesteps as the forward process uses them: `sqrt(abar_t)` and `sqrt(1 - abar_t)`
/// per example, shaped `[B, 1, ..., 1]`. A training step recorded as a CUDA graph takes its
/// timesteps as these tensors (and the network's sinusoid), never as host numbers, which a
/// graph would replay frozen.
#[derive(Debug, Clone)]
pub struct Coefficients<B: Backend, const D: usize> {
    /// `sqrt(abar_t)`.
    pub signal: Tensor<B, D>,
    /// `sqrt(1 - abar_t)`.
    pub noise: Tensor<B, D>,
}

/// [`CosineSchedule::q_sample`] with the coefficients given.
pub fn q_sample_at<B: Backend, const D: usize>(
    x0: Tensor<B, D>,
    noise: Tensor<B, D>,
    c: &Coefficients<B, D>,
) -> Tensor<B, D> {
    x0 * c.signal.clone() + noise * c.noise.clone()
}

/// The network input: the noisy image first, then the (never noised) condition channels.
pub fn network_input<B: Backend>(x_t: Tensor<B, 5>, cond: Option<Tensor<B, 5>>) -> Tensor<B, 5> {
    match cond {
        Some(cond) => Tensor::cat(vec![x_t, cond], 1),
        None => x_t,
    }
}

/// Distance between the true and the predicted noise, averaged over every element, in f32 (f64
/// for f64 input) with two-level sums.
pub fn noise_loss<B: Backend>(
    noise: Tensor<B, 5>,
    predicted: Tensor<B, 5>,
    loss: LossType,
) -> Tensor<B, 1> {
    let diff = predicted - noise;
    let diff = match diff.dtype() {
        DType::F64 | DType::F32 => diff,
        _ => diff.cast(FloatDType::F32),
    };
    match loss {
        LossType::L1 => blocked_mean(diff.abs().flatten(0, 4)),
        LossType::L2 => blocked_mean(diff.square().flatten(0, 4)),
    }
}

/// The mean of `t` as a sum of about sqrt(n) partial sums of about sqrt(n) values each: one
/// running f32 sum over a volume (as burn's CPU backend reduces) was 1.8e-4 off float64 for an
/// L1 loss over 1.6 million values (the test): the partial sums keep it within about 1e-6.
pub fn blocked_mean<B: Backend>(t: Tensor<B, 1>) -> Tensor<B, 1> {
    let n = t.dims()[0];
    let k = ((n as f64).sqrt().ceil() as usize).max(1);
    let rows = n / k;
    let main = rows * k;
    let mut sum = t
        .clone()
        .narrow(0, 0, main)
        .reshape([rows, k])
        .sum_dim(1)
        .sum();
    if main < n {
        sum = sum + t.narrow(0, main, n - main).sum();
    }
    sum.div_scalar(n as f64)
}

/// Output of [`training_loss`]: the scalar loss and the tensors a caller may want to log or test.
#[derive(Debug, Clone)]
pub struct TrainingLoss<B: Backend> {
    /// Scalar loss (shape [1]).
    pub loss: Tensor<B, 1>,
    /// The network's output (the noise, or v; see [`Prediction`]).
    pub predicted_noise: Tensor<B, 5>,
}

/// One training batch: clean images, their condition, one timestep per example and the noise
/// to add. Noise and timesteps are drawn by the caller, not here, so tests can pin them and the
/// trainer owns the random state.
pub struct TrainingBatch<B: Backend> {
    /// Clean images `[batch, image_channels, d, h, w]`.
    pub x0: Tensor<B, 5>,
    /// Condition channels `[batch, cond_channels, d, h, w]`, if the model is conditioned.
    pub cond: Option<Tensor<B, 5>>,
    /// One raw timestep per example.
    pub timesteps: Vec<usize>,
    /// Noise like `x0`.
    pub noise: Tensor<B, 5>,
}

/// The Med-DDPM training objective for one batch (reference `p_losses`): diffuse `x0` to the
/// given steps with `noise`, ask the denoiser for the noise (or v) from cat(x_t, cond), and
/// compare with the target `prediction` names.
pub fn training_loss<B: Backend, M: Denoiser<B>>(
    denoiser: &M,
    schedule: &CosineSchedule,
    batch: TrainingBatch<B>,
    loss: LossType,
    prediction: Prediction,
) -> TrainingLoss<B> {
    let TrainingBatch {
        x0,
        cond,
        timesteps,
        noise,
    } = batch;
    let c = schedule.coefficients(&timesteps, &x0.device());
    training_loss_at(
        |input| denoiser.predict_noise(input, &timesteps),
        (x0, cond, noise),
        &c,
        (loss, prediction),
    )
}

/// [`training_loss`] with the timesteps given as their coefficients, and the network as
/// `predict` (the noisy image and condition channels concatenated, to its output).
pub fn training_loss_at<B: Backend>(
    predict: impl FnOnce(Tensor<B, 5>) -> Tensor<B, 5>,
    (x0, cond, noise): (Tensor<B, 5>, Option<Tensor<B, 5>>, Tensor<B, 5>),
    c: &Coefficients<B, 5>,
    (loss, prediction): (LossType, Prediction),
) -> TrainingLoss<B> {
    let x_t = q_sample_at(x0.clone(), noise.clone(), c);
    let predicted_noise = predict(network_input(x_t, cond));
    let target = prediction.target_at(x0, noise, c);
    TrainingLoss {
        loss: noise_loss(target, predicted_noise.clone(), loss),
        predicted_noise,
    }
}
