//! The training micro-step the trainer runs and the bench times: the loss of one micro-batch,
//! its backward pass, the gradients under the master weights' ids.

use burn::optim::GradientsParams;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;
use std::cell::RefCell;

use medddpm_diffusion::{training_loss, CosineSchedule, Denoiser, TrainingBatch};
use medddpm_unet::{ActivationCheckpointing, CheckpointedForward, KernelAutodiffBackend, UNet};

use super::loader::stacked;
use crate::data::Example;
use crate::DiffusionConfig;

/// What one micro-step trains on: clean images, their condition, one timestep per example and
/// the noise to add.
pub type MicroBatch<B> = TrainingBatch<B>;

/// The training micro-step: [`micro_step_loss`], its backward pass scaled by `1 / divisor`
/// (gradient accumulation), and the gradients under the master weights' ids (in the compute
/// dtype for the parameters `work` holds in it). `work` is the working model
/// ([`crate::FusedAdamOptimizer::working_model`]; in f32 the model itself). With
/// `checkpointing` other than `none`, the forward pass keeps only the blocks' outputs and the
/// backward pass recomputes the rest ([`medddpm_unet::CheckpointedForward`]). Returns the
/// gradients and the unscaled loss, still on the device (reading it waits for the device). The
/// trainer and `medddpm bench` both run this function.
pub fn micro_step<B: KernelAutodiffBackend>(
    work: &UNet<B>,
    schedule: &CosineSchedule,
    batch: MicroBatch<B>,
    objective: &DiffusionConfig,
    divisor: f64,
    checkpointing: ActivationCheckpointing,
) -> (GradientsParams, Tensor<B, 1>) {
    let forward = micro_step_forward(work, schedule, batch, objective, checkpointing);
    let loss = forward.loss.clone();
    (forward.backward(work, divisor), loss)
}

/// The forward half of [`micro_step`]: the loss on the predicted noise, computed with the
/// working model `work`'s weights in its own compute settings.
pub fn micro_step_loss<B: KernelAutodiffBackend>(
    work: &UNet<B>,
    schedule: &CosineSchedule,
    batch: MicroBatch<B>,
    objective: &DiffusionConfig,
) -> Tensor<B, 1> {
    objective_loss(work, schedule, batch, objective)
}

/// The loss `objective` asks for, with the network run as `denoiser` (plain, or one of the
/// checkpointing wrappers).
fn objective_loss<B: Backend, M: Denoiser<B>>(
    denoiser: &M,
    schedule: &CosineSchedule,
    batch: MicroBatch<B>,
    objective: &DiffusionConfig,
) -> Tensor<B, 1> {
    training_loss(
        denoiser,
        schedule,
        batch,
        objective.loss,
        objective.prediction,
    )
    .loss
}

/// The forward half of [`micro_step`] with its choice of activation checkpointing, for callers
/// that time the halves apart (`medddpm bench`'s breakdown).
pub struct MicroStepForward<B: KernelAutodiffBackend> {
    /// The unscaled loss.
    pub loss: Tensor<B, 1>,
    /// With checkpointing: the network's output (a leaf of the loss's graph) and what the
    /// backward pass recomputes from.
    kept: Option<(Tensor<B, 5>, CheckpointedForward<B>)>,
}

/// [`micro_step_loss`], keeping what [`MicroStepForward::backward`] needs.
pub fn micro_step_forward<B: KernelAutodiffBackend>(
    work: &UNet<B>,
    schedule: &CosineSchedule,
    batch: MicroBatch<B>,
    objective: &DiffusionConfig,
    checkpointing: ActivationCheckpointing,
) -> MicroStepForward<B> {
    if checkpointing == ActivationCheckpointing::None {
        return MicroStepForward {
            loss: micro_step_loss(work, schedule, batch, objective),
            kept: None,
        };
    }
    if checkpointing == ActivationCheckpointing::Norms {
        return MicroStepForward {
            loss: objective_loss(&RecomputingNorms(work), schedule, batch, objective),
            kept: None,
        };
    }
    let denoiser = Checkpointing {
        unet: work,
        kept: RefCell::new(None),
    };
    let loss = objective_loss(&denoiser, schedule, batch, objective);
    MicroStepForward {
        loss,
        kept: denoiser.kept.into_inner(),
    }
}

impl<B: KernelAutodiffBackend> MicroStepForward<B> {
    /// The backward pass of the loss scaled by `1 / divisor`: the gradients under the ids of
    /// `work`'s parameters (the module the forward pass ran).
    pub fn backward(self, work: &UNet<B>, divisor: f64) -> GradientsParams {
        let grads = self.loss.div_scalar(divisor).backward();
        match self.kept {
            None => GradientsParams::from_grads(grads, work),
            Some((output, kept)) => {
                let grad = output
                    .grad(&grads)
                    .unwrap_or_else(|| output.clone().inner().zeros_like());
                drop(grads);
                kept.backward(work, grad)
            }
        }
    }
}

/// The network as `training_loss` calls it, run with activation checkpointing: the output
/// is a leaf, and what the backward pass recomputes from is kept here.
struct Checkpointing<'a, B: KernelAutodiffBackend> {
    unet: &'a UNet<B>,
    kept: RefCell<Option<(Tensor<B, 5>, CheckpointedForward<B>)>>,
}

impl<B: KernelAutodiffBackend> Denoiser<B> for Checkpointing<'_, B> {
    fn predict_noise(&self, input: Tensor<B, 5>, timesteps: &[usize]) -> Tensor<B, 5> {
        // The trainer's batches fit the network (checked when the run opened); a wrong shape
        // is a bug, reported as the plain forward pass reports it.
        let (output, kept) = self
            .unet
            .forward_checkpointed(input, timesteps)
            .unwrap_or_else(|e| panic!("{e}"));
        *self.kept.borrow_mut() = Some((output.clone(), kept));
        output
    }
}

/// The network as activation checkpointing `norms` runs it.
struct RecomputingNorms<'a, B: KernelAutodiffBackend>(&'a UNet<B>);

impl<B: KernelAutodiffBackend> Denoiser<B> for RecomputingNorms<'_, B> {
    fn predict_noise(&self, input: Tensor<B, 5>, timesteps: &[usize]) -> Tensor<B, 5> {
        // As `Checkpointing`: the trainer's batches fit the network.
        self.0
            .forward_recomputing_norms(input, timesteps)
            .unwrap_or_else(|e| panic!("{e}"))
    }
}

/// Stacks the images (`image`) or the conditions of `examples` into one batch tensor.
pub(super) fn batch_tensor<B: Backend>(
    examples: &[Example],
    image: bool,
    device: &B::Device,
) -> Tensor<B, 5> {
    Tensor::from_data(stacked(examples, image), device)
}

/// A micro-batch of one random 8^3 image with a two-channel random condition, drawn from its
/// own generator seeded with `seed` (not the backend's, which tests running beside it reseed),
/// at `timestep`: the tests' small training batch.
#[cfg(test)]
pub(crate) fn random_micro_batch<B: Backend>(
    device: &B::Device,
    seed: u64,
    timestep: usize,
) -> MicroBatch<B> {
    use burn::tensor::TensorData;
    let mut z = medddpm_testdata::xorshift_normal(seed);
    let mut normal = |shape: [usize; 5]| {
        let values: Vec<f32> = (0..shape.iter().product::<usize>())
            .map(|_| z() as f32)
            .collect();
        Tensor::<B, 5>::from_data(TensorData::new(values, shape), device)
    };
    MicroBatch {
        x0: normal([1, 1, 8, 8, 8]),
        noise: normal([1, 1, 8, 8, 8]),
        cond: Some(normal([1, 2, 8, 8, 8])),
        timesteps: vec![timestep],
    }
}
