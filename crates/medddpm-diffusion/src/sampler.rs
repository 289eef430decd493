//! Ancestral DDPM sampling (Ho et al. 2020, Algorithm 2, with the x0 prediction clamped).

use burn::tensor::{backend::Backend, Distribution, Tensor};

use crate::process::{network_input, Prediction};
use crate::schedule::CosineSchedule;

/// Anything that predicts the noise in a network input (noisy image and condition channels
/// concatenated) at the given per-batch-element timesteps. The U-Net implements it; tests use
/// closed-form stand-ins. Keeping this trait here means the diffusion code never sees the model.
pub trait Denoiser<B: Backend> {
    /// Predicted noise, with as many channels as the noisy image.
    fn predict_noise(&self, input: Tensor<B, 5>, timesteps: &[usize]) -> Tensor<B, 5>;
}

/// Result of one reverse step.
#[derive(Debug, Clone)]
pub struct StepOutput<B: Backend, const D: usize> {
    /// x_{t-1}.
    pub prev_sample: Tensor<B, D>,
    /// The clamped x0 estimate the step was built on.
    pub pred_original_sample: Tensor<B, D>,
    /// Mean of p(x_{t-1} | x_t).
    pub mean: Tensor<B, D>,
    /// Log-variance of p(x_{t-1} | x_t) (the floored posterior log-variance of step t).
    pub log_variance: f64,
}

/// The reference's sampler: epsilon prediction, x0 clamped to [-1, 1], "fixed small" variance.
#[derive(Debug, Clone)]
pub struct DdpmSampler {
    schedule: CosineSchedule,
    /// Clamp x0 to [-1, 1] at every step (`clip_denoised=True` in the reference).
    pub clip_denoised: bool,
    /// What the network predicts (the reference's: the noise).
    pub prediction: Prediction,
}

impl DdpmSampler {
    /// A sampler over `schedule` with the reference's clamping.
    pub fn new(schedule: CosineSchedule) -> Self {
        Self {
            schedule,
            clip_denoised: true,
            prediction: Prediction::Epsilon,
        }
    }

    /// The schedule this sampler walks.
    pub fn schedule(&self) -> &CosineSchedule {
        &self.schedule
    }

    /// Timesteps in the order they are visited: T-1 down to 0.
    pub fn timesteps(&self) -> impl Iterator<Item = usize> {
        (0..self.schedule.num_timesteps()).rev()
    }

    /// One reverse step from `x_t` at step `t` given the predicted noise `eps`.
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

    /// Runs the whole reverse process from pure noise, conditioned on `cond`, and returns x_0.
    ///
    /// `image_channels` is the number of channels to generate; `on_step` is called after every
    /// step with the number of steps done (for progress bars). Randomness comes from the
    /// backend's generator: seed it with `B::seed` for reproducible samples.
    pub fn sample<B: Backend, M: Denoiser<B>>(
        &self,
        denoiser: &M,
        cond: Tensor<B, 5>,
        image_channels: usize,
        mut on_step: impl FnMut(usize),
    ) -> Tensor<B, 5> {
        self.sample_observed(denoiser, cond, image_channels, |i, _| on_step(i))
    }

    /// As `sample`, with `on_step` also shown the sample after each step (x_t on its way to
    /// x_0), for pictures of the denoising.
    pub fn sample_observed<B: Backend, M: Denoiser<B>>(
        &self,
        denoiser: &M,
        cond: Tensor<B, 5>,
        image_channels: usize,
        on_step: impl FnMut(usize, &Tensor<B, 5>),
    ) -> Tensor<B, 5> {
        let timesteps: Vec<usize> = self.timesteps().collect();
        let walk = ReverseWalk {
            schedule: &self.schedule,
            prediction: self.prediction,
            timesteps: &timesteps,
        };
        walk.run(
            denoiser,
            cond,
            image_channels,
            |i| timesteps[i] > 0,
            |eps, i, x, noise| self.step(eps, timesteps[i], x, noise).prev_sample,
            on_step,
        )
    }
}

/// The walk every sampler takes: one network call per entry of `timesteps` (visited in order),
/// its output turned into the noise by `prediction` over `schedule`.
pub(crate) struct ReverseWalk<'a> {
    pub schedule: &'a CosineSchedule,
    pub prediction: Prediction,
    pub timesteps: &'a [usize],
}

impl ReverseWalk<'_> {
    /// The reverse loop every sampler shares: from pure noise of `image_channels` channels, one
    /// network call per timestep; `step(eps, i, x, z)` gives the next x from the predicted
    /// noise, with z fresh standard normal noise where `noisy(i)` says step i adds any (zeros
    /// otherwise, drawing nothing from the generator); `on_step(i + 1, x)` sees each new x.
    pub fn run<B: Backend, M: Denoiser<B>>(
        &self,
        denoiser: &M,
        cond: Tensor<B, 5>,
        image_channels: usize,
        noisy: impl Fn(usize) -> bool,
        mut step: impl FnMut(Tensor<B, 5>, usize, Tensor<B, 5>, Tensor<B, 5>) -> Tensor<B, 5>,
        mut on_step: impl FnMut(usize, &Tensor<B, 5>),
    ) -> Tensor<B, 5> {
        let [b, _, d, h, w] = cond.dims();
        let device = cond.device();
        let shape = [b, image_channels, d, h, w];
        let mut x = Tensor::<B, 5>::random(shape, Distribution::Normal(0.0, 1.0), &device);
        for (i, &t) in self.timesteps.iter().enumerate() {
            let output =
                denoiser.predict_noise(network_input(x.clone(), Some(cond.clone())), &vec![t; b]);
            let eps = self
                .prediction
                .to_noise(self.schedule, output, t, x.clone());
            let noise = if noisy(i) {
                Tensor::random(shape, Distribution::Normal(0.0, 1.0), &device)
            } else {
                Tensor::zeros(shape, &device)
            };
            x = step(eps, i, x, noise);
            on_step(i + 1, &x);
        }
        x
    }
}
