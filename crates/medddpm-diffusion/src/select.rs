//! Choosing the reverse process: `[sampler]` settings (`SamplerKind`, `SamplerConfig`) and the
//! `Sampler` they build, a [`Scheduler`] that is DDPM, DDIM or DPM-Solver++ as configured.

use burn::tensor::backend::Backend;

use crate::ddim::DdimSampler;
use crate::ddpm::DdpmSampler;
use crate::dpm_solver::DpmSolverSampler;
use crate::process::Prediction;
use crate::schedule::CosineSchedule;
use crate::scheduler::{Chain, Scheduler, StepInput, StepOutput};
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
        let chain = match &mut self {
            Sampler::Ddpm(s) => &mut s.chain,
            Sampler::Ddim(s) => &mut s.chain,
            Sampler::DpmSolver(s) => &mut s.chain,
        };
        chain.prediction = prediction;
        self
    }
}

impl Scheduler for Sampler {
    /// Only DPM-Solver++ carries anything from one step to the next.
    type State<B: Backend> = <DpmSolverSampler as Scheduler>::State<B>;

    fn chain(&self) -> &Chain {
        match self {
            Sampler::Ddpm(s) => &s.chain,
            Sampler::Ddim(s) => &s.chain,
            Sampler::DpmSolver(s) => &s.chain,
        }
    }

    fn adds_noise(&self, t: usize, next: Option<usize>) -> bool {
        match self {
            Sampler::Ddpm(s) => s.adds_noise(t, next),
            Sampler::Ddim(s) => s.adds_noise(t, next),
            Sampler::DpmSolver(s) => s.adds_noise(t, next),
        }
    }

    fn step<B: Backend>(
        &self,
        input: StepInput<B>,
        state: &mut Self::State<B>,
    ) -> StepOutput<B, 5> {
        match self {
            Sampler::Ddpm(s) => Scheduler::step(s, input, &mut ()),
            Sampler::Ddim(s) => Scheduler::step(s, input, &mut ()),
            Sampler::DpmSolver(s) => Scheduler::step(s, input, state),
        }
    }
}
