//! The Med-DDPM diffusion process: cosine schedule, `q_sample`, training loss, and the DDPM, DDIM
//! and DPM-Solver++ samplers.
//!
//! The schedule is plain f64 data ([`CosineSchedule`]); tensors appear only where a buffer meets
//! a batch. Every sampler is a [`Scheduler`] (timesteps and one `step`), walked by the one loop
//! [`Scheduler::sample`]; that loop and the loss are generic over burn's `Backend` and over a
//! [`Denoiser`], so this crate never depends on the network.
//!
//! # Example
//! ```
//! use burn::backend::Flex;
//! use burn::tensor::Tensor;
//! use medddpm_diffusion::{CosineSchedule, DdpmSampler, Scheduler};
//!
//! let schedule = CosineSchedule::new(250);
//! let device = Default::default();
//! let x0 = Tensor::<Flex, 5>::zeros([1, 1, 2, 2, 2], &device);
//! let noise = Tensor::<Flex, 5>::ones([1, 1, 2, 2, 2], &device);
//! let x_t = schedule.q_sample(x0, &[249], noise);
//! // Near the end of the chain x_t is almost pure noise.
//! assert!((x_t.into_scalar_mean() - 1.0).abs() < 1e-3);
//! let sampler = DdpmSampler::new(schedule);
//! assert_eq!(sampler.timesteps().first(), Some(&249));
//! # trait MeanExt { fn into_scalar_mean(self) -> f32; }
//! # impl MeanExt for Tensor<Flex, 5> { fn into_scalar_mean(self) -> f32 { self.mean().into_scalar() } }
//! ```
#![warn(missing_docs)]

pub mod ddim;
pub mod ddpm;
pub mod dpm_solver;
pub mod process;
pub mod schedule;
pub mod scheduler;
mod seeding;
pub mod select;
pub mod steps;

pub use ddim::DdimSampler;
pub use ddpm::DdpmSampler;
pub use dpm_solver::DpmSolverSampler;
pub use process::{
    network_input, noise_loss, q_sample_at, training_loss, training_loss_at, Coefficients,
    Denoiser, LossType, Prediction, TrainingBatch, TrainingLoss,
};
pub use schedule::{CosineSchedule, ScheduleConfig};
pub use scheduler::{Chain, Scheduler, StepInput, StepOutput};
pub use seeding::{autodiff_turn, backend_rng};
pub use select::{Sampler, SamplerConfig, SamplerKind};
pub use steps::SamplerError;

#[cfg(test)]
mod tests;
