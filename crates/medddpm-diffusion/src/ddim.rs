//! DDIM sampling (Song et al. 2021) of a model trained with the DDPM objective: fewer network
//! calls on a subsequence of the training timesteps, deterministic at `eta = 0`.
//!
//! [`DdimSampler::set_timesteps`] picks the subsequence and [`Scheduler::step`] moves along it;
//! [`DdimSampler::step_to`] takes the target timestep explicitly, so that one jump can be checked
//! alone.

use burn::tensor::{backend::Backend, Tensor};

use crate::schedule::CosineSchedule;
use crate::scheduler::{Chain, Scheduler, StepInput, StepOutput};
use crate::steps::{trailing_timesteps, SamplerError};

/// DDIM over the training schedule, with the x0 clamping of the reference's sampler.
#[derive(Debug, Clone)]
pub struct DdimSampler {
    /// Schedule, timesteps, clamping and what the network predicts.
    pub chain: Chain,
    /// Noise scale: 0 is deterministic DDIM, 1 gives each step DDPM's posterior variance.
    pub eta: f64,
}

impl DdimSampler {
    /// A sampler over `schedule` taking `steps` steps with noise scale `eta`.
    pub fn new(schedule: CosineSchedule, steps: usize, eta: f64) -> Result<Self, SamplerError> {
        if !(0.0..=1.0).contains(&eta) {
            return Err(SamplerError::Eta(eta));
        }
        let timesteps = trailing_timesteps(schedule.num_timesteps(), steps)?;
        Ok(Self {
            chain: Chain::new(schedule, timesteps),
            eta,
        })
    }

    /// Chooses `steps` timesteps, evenly spaced from the last training timestep down
    /// ("trailing" spacing: the first step always starts from pure noise at T - 1; with
    /// `steps = T` they are all of them).
    pub fn set_timesteps(&mut self, steps: usize) -> Result<(), SamplerError> {
        self.chain.timesteps = trailing_timesteps(self.schedule().num_timesteps(), steps)?;
        Ok(())
    }

    /// One step from `x_t` at timestep `t` to `prev_t` (any earlier timestep; `None` for the end
    /// of the chain, where x0 is returned) given the predicted noise `eps`.
    ///
    /// x0 = (x_t - sqrt(1 - abar_t) eps) / sqrt(abar_t), clamped; the noise is then re-derived
    /// from the clamped x0 (so that x_t, x0 and the noise stay consistent, which makes `eta = 1`
    /// exactly DDPM's step); then
    /// `x_prev = sqrt(abar_prev) x0 + sqrt(1 - abar_prev - sigma^2) eps + sigma z`, with
    /// `sigma^2 = eta^2 (1 - abar_prev) / (1 - abar_t) (1 - abar_t / abar_prev)`. `noise` is z,
    /// passed in so that tests can supply it.
    pub fn step_to<B: Backend, const D: usize>(
        &self,
        eps: Tensor<B, D>,
        t: usize,
        prev_t: Option<usize>,
        x_t: Tensor<B, D>,
        noise: Tensor<B, D>,
    ) -> StepOutput<B, D> {
        let abar = &self.schedule().alphas_cumprod;
        let abar_t = abar[t];
        let abar_prev = prev_t.map_or(1.0, |p| abar[p]);
        let x0 = self.chain.x0(eps, t, x_t.clone());
        let Some(_) = prev_t else {
            return StepOutput {
                prev_sample: x0.clone(),
                pred_original_sample: x0.clone(),
                mean: x0,
                log_variance: f64::NEG_INFINITY,
            };
        };
        // The noise consistent with x_t and the (clamped) x0.
        let eps = (x_t - x0.clone().mul_scalar(abar_t.sqrt())).div_scalar((1.0 - abar_t).sqrt());
        let variance =
            self.eta.powi(2) * (1.0 - abar_prev) / (1.0 - abar_t) * (1.0 - abar_t / abar_prev);
        let direction = (1.0 - abar_prev - variance).max(0.0).sqrt();
        let mean = x0.clone().mul_scalar(abar_prev.sqrt()) + eps.mul_scalar(direction);
        let std = (variance > 0.0).then(|| variance.sqrt());
        StepOutput::noised(mean, x0, variance.ln(), noise, std)
    }
}

impl Scheduler for DdimSampler {
    type State<B: Backend> = ();

    fn chain(&self) -> &Chain {
        &self.chain
    }

    fn adds_noise(&self, _: usize, next: Option<usize>) -> bool {
        self.eta > 0.0 && next.is_some()
    }

    fn step<B: Backend>(&self, i: StepInput<B>, _: &mut ()) -> StepOutput<B, 5> {
        self.step_to(i.eps, i.t, i.next, i.x_t, i.noise)
    }
}
