//! DDIM sampling (Song et al. 2021) of a model trained with the DDPM objective: fewer network
//! calls on a subsequence of the training timesteps, deterministic at `eta = 0`.
//!
//! The scheduler is apart from the model, as in diffusers: [`DdimSampler::set_timesteps`] picks
//! the subsequence and [`DdimSampler::step`] moves one step along it given the predicted noise.

use burn::tensor::{backend::Backend, Tensor};

use crate::process::Prediction;
use crate::sampler::{reverse_process, DdpmSampler, Denoiser, StepOutput};
use crate::schedule::CosineSchedule;

/// Why a sampler cannot be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SamplerError {
    /// Zero steps, or more than the schedule has.
    #[error(
        "DDIM and DPM-Solver++ need between 1 and {max} steps (the training timesteps), got {got}"
    )]
    Steps {
        /// Steps asked for.
        got: usize,
        /// The schedule's timesteps.
        max: usize,
    },
    /// `eta` outside [0, 1] or not finite.
    #[error("DDIM eta must be in [0, 1] (0: deterministic, 1: DDPM's variance), got {0}")]
    Eta(f64),
    /// A step count for the DDPM sampler other than the schedule's.
    #[error("the DDPM sampler walks all {timesteps} timesteps (asked for {got}); use the DDIM sampler for fewer")]
    DdpmSteps {
        /// Steps asked for.
        got: usize,
        /// The schedule's timesteps.
        timesteps: usize,
    },
}

/// Which reverse process to run, and how many network calls it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SamplerKind {
    /// Ancestral DDPM over every training timestep (the reference's sampler).
    #[default]
    Ddpm,
    /// DDIM over a subsequence of the timesteps.
    Ddim,
    /// DPM-Solver++(2M) over a subsequence of the timesteps.
    #[serde(rename = "dpm-solver++")]
    DpmSolver,
}

impl std::fmt::Display for SamplerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SamplerKind::Ddpm => "ddpm",
            SamplerKind::Ddim => "ddim",
            SamplerKind::DpmSolver => "dpm-solver++",
        })
    }
}

impl std::str::FromStr for SamplerKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "ddpm" => Ok(SamplerKind::Ddpm),
            "ddim" => Ok(SamplerKind::Ddim),
            "dpm-solver++" | "dpmpp" => Ok(SamplerKind::DpmSolver),
            other => Err(format!(
                "unknown sampler '{other}' (ddpm, ddim or dpm-solver++)"
            )),
        }
    }
}

/// The sampler settings: kind, number of steps (default: every timestep) and DDIM's eta.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SamplerConfig {
    /// Which sampler.
    pub kind: SamplerKind,
    /// Network calls per sample (`None`: every timestep of the schedule). DDIM and
    /// DPM-Solver++ take fewer; DDPM takes exactly that many.
    pub steps: Option<usize>,
    /// DDIM's noise scale (0: deterministic; the other samplers ignore it).
    pub eta: f64,
}

/// A sampler built from a [`SamplerConfig`].
#[derive(Debug, Clone)]
pub enum Sampler {
    /// Ancestral DDPM.
    Ddpm(DdpmSampler),
    /// DDIM.
    Ddim(DdimSampler),
    /// DPM-Solver++(2M).
    DpmSolver(crate::dpm_solver::DpmSolverSampler),
}

impl Sampler {
    /// The sampler `config` asks for over `schedule`.
    pub fn new(schedule: CosineSchedule, config: &SamplerConfig) -> Result<Self, SamplerError> {
        let t = schedule.num_timesteps();
        match config.kind {
            SamplerKind::Ddpm => match config.steps {
                Some(got) if got != t => Err(SamplerError::DdpmSteps { got, timesteps: t }),
                _ => Ok(Sampler::Ddpm(DdpmSampler::new(schedule))),
            },
            SamplerKind::Ddim => Ok(Sampler::Ddim(DdimSampler::new(
                schedule,
                config.steps.unwrap_or(t),
                config.eta,
            )?)),
            SamplerKind::DpmSolver => Ok(Sampler::DpmSolver(
                crate::dpm_solver::DpmSolverSampler::new(schedule, config.steps.unwrap_or(t))?,
            )),
        }
    }

    /// The same sampler for a network that predicts `prediction` (the default: the noise).
    pub fn with_prediction(mut self, prediction: Prediction) -> Self {
        match &mut self {
            Sampler::Ddpm(s) => s.prediction = prediction,
            Sampler::Ddim(s) => s.prediction = prediction,
            Sampler::DpmSolver(s) => s.prediction = prediction,
        }
        self
    }

    /// Network calls per sample.
    pub fn num_steps(&self) -> usize {
        match self {
            Sampler::Ddpm(s) => s.schedule().num_timesteps(),
            Sampler::Ddim(s) => s.timesteps().len(),
            Sampler::DpmSolver(s) => s.timesteps().len(),
        }
    }

    /// Runs the reverse process (see [`DdpmSampler::sample`]).
    pub fn sample<B: Backend, M: Denoiser<B>>(
        &self,
        denoiser: &M,
        cond: Tensor<B, 5>,
        image_channels: usize,
        mut on_step: impl FnMut(usize),
    ) -> Tensor<B, 5> {
        self.sample_observed(denoiser, cond, image_channels, |i, _| on_step(i))
    }

    /// Runs the reverse process, showing `on_step` the sample after each step.
    pub fn sample_observed<B: Backend, M: Denoiser<B>>(
        &self,
        denoiser: &M,
        cond: Tensor<B, 5>,
        image_channels: usize,
        on_step: impl FnMut(usize, &Tensor<B, 5>),
    ) -> Tensor<B, 5> {
        match self {
            Sampler::Ddpm(s) => s.sample_observed(denoiser, cond, image_channels, on_step),
            Sampler::Ddim(s) => s.sample_observed(denoiser, cond, image_channels, on_step),
            Sampler::DpmSolver(s) => s.sample_observed(denoiser, cond, image_channels, on_step),
        }
    }
}

/// `steps` of the `t` training timesteps, evenly spaced from t - 1 down ("trailing" spacing).
pub(crate) fn trailing_timesteps(t: usize, steps: usize) -> Result<Vec<usize>, SamplerError> {
    if steps == 0 || steps > t {
        return Err(SamplerError::Steps { got: steps, max: t });
    }
    let ratio = t as f64 / steps as f64;
    Ok((0..steps)
        .map(|i| ((t as f64 - i as f64 * ratio).round() as usize).saturating_sub(1))
        .collect())
}

/// DDIM over the training schedule, with the x0 clamping of the reference's sampler.
#[derive(Debug, Clone)]
pub struct DdimSampler {
    schedule: CosineSchedule,
    timesteps: Vec<usize>,
    /// Noise scale: 0 is deterministic DDIM, 1 gives each step DDPM's posterior variance.
    pub eta: f64,
    /// Clamp x0 to [-1, 1] at every step (as the reference's DDPM sampler does).
    pub clip_denoised: bool,
    /// What the network predicts (the reference's: the noise).
    pub prediction: Prediction,
}

impl DdimSampler {
    /// A sampler over `schedule` taking `steps` steps with noise scale `eta`.
    pub fn new(schedule: CosineSchedule, steps: usize, eta: f64) -> Result<Self, SamplerError> {
        if !(0.0..=1.0).contains(&eta) {
            return Err(SamplerError::Eta(eta));
        }
        let mut sampler = Self {
            schedule,
            timesteps: Vec::new(),
            eta,
            clip_denoised: true,
            prediction: Prediction::Epsilon,
        };
        sampler.set_timesteps(steps)?;
        Ok(sampler)
    }

    /// Chooses `steps` timesteps, evenly spaced from the last training timestep down
    /// ("trailing" spacing: the first step always starts from pure noise at T - 1; with
    /// `steps = T` they are all of them).
    pub fn set_timesteps(&mut self, steps: usize) -> Result<(), SamplerError> {
        self.timesteps = trailing_timesteps(self.schedule.num_timesteps(), steps)?;
        Ok(())
    }

    /// Timesteps in the order they are visited, from T - 1 down.
    pub fn timesteps(&self) -> &[usize] {
        &self.timesteps
    }

    /// The schedule this sampler walks.
    pub fn schedule(&self) -> &CosineSchedule {
        &self.schedule
    }

    /// The timestep after `t` in the subsequence, `None` after the last.
    pub fn prev_timestep(&self, t: usize) -> Option<usize> {
        let i = self.timesteps.iter().position(|&s| s == t)?;
        self.timesteps.get(i + 1).copied()
    }

    /// One step from `x_t` at timestep `t` to the next timestep of the subsequence (`prev_t`,
    /// `None` for the end of the chain, where x0 is returned) given the predicted noise `eps`.
    ///
    /// x0 = (x_t - sqrt(1 - abar_t) eps) / sqrt(abar_t), clamped; the noise is then re-derived
    /// from the clamped x0 (so that x_t, x0 and the noise stay consistent, which makes `eta = 1`
    /// exactly DDPM's step); then
    /// `x_prev = sqrt(abar_prev) x0 + sqrt(1 - abar_prev - sigma^2) eps + sigma z`, with
    /// `sigma^2 = eta^2 (1 - abar_prev) / (1 - abar_t) (1 - abar_t / abar_prev)`. `noise` is z,
    /// passed in so that tests can supply it.
    pub fn step<B: Backend, const D: usize>(
        &self,
        eps: Tensor<B, D>,
        t: usize,
        prev_t: Option<usize>,
        x_t: Tensor<B, D>,
        noise: Tensor<B, D>,
    ) -> StepOutput<B, D> {
        let s = &self.schedule;
        let abar_t = s.alphas_cumprod[t];
        let abar_prev = prev_t.map_or(1.0, |p| s.alphas_cumprod[p]);
        let mut x0 = x_t.clone().mul_scalar(s.sqrt_recip_alphas_cumprod[t])
            - eps.clone().mul_scalar(s.sqrt_recipm1_alphas_cumprod[t]);
        if self.clip_denoised {
            x0 = x0.clamp(-1.0, 1.0);
        }
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
        let prev_sample = if variance > 0.0 {
            mean.clone() + noise.mul_scalar(variance.sqrt())
        } else {
            mean.clone()
        };
        StepOutput {
            prev_sample,
            pred_original_sample: x0,
            mean,
            log_variance: variance.ln(),
        }
    }

    /// Runs the reverse process from pure noise, conditioned on `cond`, and returns x_0 (as
    /// [`crate::DdpmSampler::sample`], with one network call per chosen timestep).
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
        let ts = &self.timesteps;
        reverse_process(
            denoiser,
            (&self.schedule, self.prediction),
            cond,
            image_channels,
            ts,
            |i| i + 1 < ts.len() && self.eta > 0.0,
            |eps, i, x, noise| {
                self.step(eps, ts[i], ts.get(i + 1).copied(), x, noise)
                    .prev_sample
            },
            on_step,
        )
    }
}
