//! Ancestral DDPM sampling (Ho et al. 2020, Algorithm 2, with the x0 prediction clamped).

use burn::tensor::{backend::Backend, Tensor};

use crate::process::Prediction;
use crate::schedule::CosineSchedule;
use crate::scheduler::{Scheduler, StepOutput};

/// The reference's sampler: epsilon prediction, x0 clamped to [-1, 1], "fixed small" variance.
#[derive(Debug, Clone)]
pub struct DdpmSampler {
    schedule: CosineSchedule,
    timesteps: Vec<usize>,
    /// Clamp x0 to [-1, 1] at every step (`clip_denoised=True` in the reference).
    pub clip_denoised: bool,
    /// What the network predicts (the reference's: the noise).
    pub prediction: Prediction,
}

impl DdpmSampler {
    /// A sampler over every timestep of `schedule`, T - 1 down to 0, with the reference's
    /// clamping.
    pub fn new(schedule: CosineSchedule) -> Self {
        Self {
            timesteps: (0..schedule.num_timesteps()).rev().collect(),
            schedule,
            clip_denoised: true,
            prediction: Prediction::Epsilon,
        }
    }

    /// One reverse step from `x_t` at step `t` given the predicted noise `eps`: the
    /// [`Scheduler::step`] of this sampler, without the per-run state DDPM has no use for.
    ///
    /// `noise` is the z of the step, passed in so that tests can supply it; it is ignored at
    /// t = 0, where the reference adds no noise.
    pub fn step<B: Backend, const D: usize>(
        &self,
        eps: Tensor<B, D>,
        t: usize,
        x_t: Tensor<B, D>,
        noise: Tensor<B, D>,
    ) -> StepOutput<B, D> {
        let s = &self.schedule;
        // 1. x0 from the noise estimate: x0 = sqrt(1/abar_t) x_t - sqrt(1/abar_t - 1) eps.
        let mut x0 = x_t.clone().mul_scalar(s.sqrt_recip_alphas_cumprod[t])
            - eps.mul_scalar(s.sqrt_recipm1_alphas_cumprod[t]);
        // 2. The data lives in [-1, 1]; clamping keeps early, poor estimates in range.
        if self.clip_denoised {
            x0 = x0.clamp(-1.0, 1.0);
        }
        // 3. Posterior mean (DDPM eq. 7): coef1 x0 + coef2 x_t.
        let mean = x0.clone().mul_scalar(s.posterior_mean_coef1[t])
            + x_t.mul_scalar(s.posterior_mean_coef2[t]);
        // 4. Posterior log-variance, floored at ln(1e-20) so step 0 stays finite.
        let log_variance = s.posterior_log_variance_clipped[t];
        // 5. Add noise except at the last step.
        let prev_sample = if t > 0 {
            mean.clone() + noise.mul_scalar((0.5 * log_variance).exp())
        } else {
            mean.clone()
        };
        StepOutput {
            prev_sample,
            pred_original_sample: x0,
            mean,
            log_variance,
        }
    }
}

impl Scheduler for DdpmSampler {
    type State<B: Backend> = ();

    fn schedule(&self) -> &CosineSchedule {
        &self.schedule
    }

    fn prediction(&self) -> Prediction {
        self.prediction
    }

    fn timesteps(&self) -> &[usize] {
        &self.timesteps
    }

    fn adds_noise(&self, t: usize, _: Option<usize>) -> bool {
        t > 0
    }

    fn step<B: Backend>(
        &self,
        eps: Tensor<B, 5>,
        t: usize,
        _: Option<usize>,
        x_t: Tensor<B, 5>,
        noise: Tensor<B, 5>,
        _: &mut (),
    ) -> StepOutput<B, 5> {
        DdpmSampler::step(self, eps, t, x_t, noise)
    }
}
