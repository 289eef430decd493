//! One optimizer step's worth of micro-batches: drawing a micro-batch and its randomness from
//! the micro-batch counter, and the micro-step the bench times as well.

use burn::optim::GradientsParams;
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Tensor, TensorPrimitive};
use std::cell::RefCell;

use medddpm_diffusion::{training_loss, CosineSchedule, Denoiser, TrainingBatch};
use medddpm_unet::{ActivationCheckpointing, CheckpointedForward, KernelAutodiffBackend, UNet};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::graphed::MicroStepGraphs;
use super::loader::{stacked, HostBatch, Loader, READ_AHEAD};
use super::shard::Shard;
use crate::data::Example;
use crate::gradient_sum::GradientSum;
use crate::{DiffusionConfig, ExperimentConfig, TrainError};

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
    training_loss(work, schedule, batch, objective.loss, objective.prediction).loss
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
    let denoiser = Checkpointing {
        unet: work,
        kept: RefCell::new(None),
    };
    let loss = training_loss(
        &denoiser,
        schedule,
        batch,
        objective.loss,
        objective.prediction,
    )
    .loss;
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

/// Stacks the images (`image`) or the conditions of `examples` into one batch tensor.
pub(super) fn batch_tensor<B: Backend>(
    examples: &[Example],
    image: bool,
    device: &B::Device,
) -> Tensor<B, 5> {
    Tensor::from_data(stacked(examples, image), device)
}

/// The micro-batches of one optimizer step, queued on the device.
pub(super) struct AccumulatedStep<B: KernelAutodiffBackend> {
    /// Their gradients, summed (in f32 from the second micro-batch on).
    pub accumulator: GradientSum,
    /// Each micro-batch's loss, not yet read back (reading waits for the device).
    pub losses: Vec<Tensor<B, 1>>,
    /// The examples trained on, named only if the loss is not finite.
    pub batch_indices: Vec<usize>,
}

/// What one replica draws its batches with: the schedule and its device.
pub(super) struct Replica<'a, B: KernelAutodiffBackend> {
    pub schedule: &'a CosineSchedule,
    pub device: &'a B::Device,
    /// The micro-step's CUDA graphs (one-device runs), else every step as it comes.
    pub graphs: Option<&'a RefCell<MicroStepGraphs<B>>>,
}

/// Runs this replica's micro-batches of the step whose first micro-batch is `first` with the
/// working model `work` of the master weights `model`: each example's data index, timestep and
/// noise follow from its position (see [`Shard`]). While the device runs a micro-batch, the
/// loader reads the next one (this step's, or the next step's first).
pub(super) fn accumulate<B: KernelAutodiffBackend>(
    replica: &Replica<'_, B>,
    (model, work): (&UNet<B>, &UNet<B>),
    loader: &mut Loader,
    config: &ExperimentConfig,
    (shard, first, loss_scale): (&Shard, usize, f64),
) -> Result<AccumulatedStep<B>, TrainError> {
    let settings = &config.train;
    let micro_batches = shard.micro_batches(first);
    let mut step = AccumulatedStep {
        accumulator: GradientSum::new(),
        losses: Vec::with_capacity(micro_batches.len()),
        batch_indices: Vec::new(),
    };
    // f16's loss scale multiplies the loss the backward pass starts from (1 otherwise, which
    // leaves the divisor exact).
    let divisor = shard.divisor(settings.reference_batch_scaling) / loss_scale;
    let positions_of = |(draw, range): &(usize, std::ops::Range<usize>)| -> Vec<usize> {
        range
            .clone()
            .map(|i| draw * settings.batch_size + i)
            .collect()
    };
    let following: Vec<(usize, std::ops::Range<usize>)> = (1..=READ_AHEAD)
        .flat_map(|k| shard.micro_batches(first + k * shard.step_micro_batches()))
        .collect();
    for (j, micro) in micro_batches.iter().enumerate() {
        let positions = positions_of(micro);
        let indices = loader.indices(&positions);
        let host = loader.take(&positions)?;
        let upcoming: Vec<Vec<usize>> = micro_batches[j + 1..]
            .iter()
            .chain(&following)
            .take(READ_AHEAD)
            .map(positions_of)
            .collect();
        loader.read_ahead(&upcoming);
        step.batch_indices.extend_from_slice(&indices);
        let batch = draw_micro_batch(replica, host, &positions, config);
        let how = (
            &config.diffusion,
            divisor,
            settings.activation_checkpointing,
        );
        let (grads, loss) = match replica.graphs {
            Some(graphs) => graphs
                .borrow_mut()
                .micro_step(work, replica.schedule, batch, how),
            None => micro_step(work, replica.schedule, batch, how.0, how.1, how.2),
        };
        // Several micro-batches are summed in f32; one replica's single micro-batch keeps the
        // compute dtype, and the team's average works in f32 (`Team::average`).
        step.accumulator.add(model, grads);
        step.losses.push(loss);
    }
    Ok(step)
}

/// The micro-batch of the examples read into `host` (global `positions`) on the device: each
/// example's timestep and the backend seed of its noise come from the stream (seed, position
/// + 1).
fn draw_micro_batch<B: KernelAutodiffBackend>(
    replica: &Replica<'_, B>,
    host: HostBatch,
    positions: &[usize],
    config: &ExperimentConfig,
) -> MicroBatch<B> {
    let device = replica.device;
    let x0 = Tensor::<B, 5>::from_primitive(TensorPrimitive::Float(B::float_from_host(
        host.image, device,
    )));
    let cond = Tensor::<B, 5>::from_primitive(TensorPrimitive::Float(B::float_from_host(
        host.cond, device,
    )));
    let [_, c, d, h, w] = x0.dims();
    let mut timesteps = Vec::with_capacity(positions.len());
    let mut noise = Vec::with_capacity(positions.len());
    for &p in positions {
        let mut rng = ChaCha8Rng::seed_from_u64(config.train.seed);
        rng.set_stream(p as u64 + 1);
        timesteps.push(rng.random_range(0..config.diffusion.timesteps));
        let _serial = crate::seeding::backend_rng();
        B::seed(device, rng.next_u64());
        noise.push(Tensor::<B, 5>::random(
            [1, c, d, h, w],
            Distribution::Normal(0.0, 1.0),
            device,
        ));
    }
    let noise = if noise.len() == 1 {
        noise.pop().unwrap()
    } else {
        Tensor::cat(noise, 0)
    };
    MicroBatch {
        x0,
        cond: Some(cond),
        timesteps,
        noise,
    }
}

/// A micro-batch of one random 8^3 image with a two-channel random condition, drawn after
/// seeding the backend with `seed`, at `timestep`: the tests' small training batch.
#[cfg(test)]
pub(crate) fn random_micro_batch<B: Backend>(
    device: &B::Device,
    seed: u64,
    timestep: usize,
) -> MicroBatch<B> {
    B::seed(device, seed);
    let x0 = Tensor::<B, 5>::random([1, 1, 8, 8, 8], Distribution::Normal(0.0, 1.0), device);
    MicroBatch {
        noise: x0.random_like(Distribution::Normal(0.0, 1.0)),
        cond: Some(Tensor::random(
            [1, 2, 8, 8, 8],
            Distribution::Normal(0.0, 1.0),
            device,
        )),
        x0,
        timesteps: vec![timestep],
    }
}
