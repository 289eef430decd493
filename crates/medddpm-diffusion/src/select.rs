//! Choosing the reverse process: `[sampler]` settings (`SamplerKind`, `SamplerConfig`) and the
//! `Sampler` they build, which runs DDPM, DDIM or DPM-Solver++ behind one interface.

use burn::tensor::{backend::Backend, Tensor};

use crate::ddim::DdimSampler;
use crate::dpm_solver::DpmSolverSampler;
use crate::process::Prediction;
use crate::sampler::{DdpmSampler, Denoiser};
use crate::schedule::CosineSchedule;
use crate::steps::SamplerError;

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
    DpmSolver(DpmSolverSampler),
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
            SamplerKind::DpmSolver => Ok(Sampler::DpmSolver(DpmSolverSampler::new(
                schedule,
                config.steps.unwrap_or(t),
            )?)),
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
