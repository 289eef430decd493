//! Ancestral DDPM sampling (Ho et al. 2020, Algorithm 2, with the x0 prediction clamped).

use burn::tensor::{backend::Backend, Tensor};

use crate::schedule::CosineSchedule;
use crate::scheduler::{Chain, Scheduler, StepInput, StepOutput};

/// The reference's sampler: epsilon prediction, x0 clamped to [-1, 1], "fixed small" variance.
#[derive(Debug, Clone)]
pub struct DdpmSampler {
    /// Schedule, timesteps, clamping and what the network predicts.
    pub chain: Chain,
}

impl DdpmSampler {
    /// A sampler over every timestep of `schedule`, T - 1 down to 0, with the reference's
    /// clamping.
    pub fn new(schedule: CosineSchedule) -> Self {
        let timesteps = (0..schedule.num_timesteps()).rev().collect();
        Self {
            chain: Chain::new(schedule, timesteps),
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
        let s = self.schedule();
        // 1-2. x0 from the noise estimate, clamped to [-1, 1].
        let x0 = self.chain.x0(eps, t, x_t.clone());
        // 3. Posterior mean (DDPM eq. 7): coef1 x0 + coef2 x_t.
        let mean = x0.clone().mul_scalar(s.posterior_mean_coef1[t])
            + x_t.mul_scalar(s.posterior_mean_coef2[t]);
        // 4. Posterior log-variance, floored at ln(1e-20) so step 0 stays finite.
        let log_variance = s.posterior_log_variance_clipped[t];
        // 5. Add noise except at the last step.
        let std = (t > 0).then(|| (0.5 * log_variance).exp());
        StepOutput::noised(mean, x0, log_variance, noise, std)
    }
}

impl Scheduler for DdpmSampler {
    type State<B: Backend> = ();

    fn chain(&self) -> &Chain {
        &self.chain
    }

    fn adds_noise(&self, t: usize, _: Option<usize>) -> bool {
        t > 0
    }

    fn step<B: Backend>(&self, i: StepInput<B>, _: &mut ()) -> StepOutput<B, 5> {
        DdpmSampler::step(self, i.eps, i.t, i.x_t, i.noise)
    }
}
