//! One optimizer step's worth of micro-batches on one replica: each drawn from the micro-batch
//! counter (its examples, timesteps and noise), stepped as it comes or replayed from a CUDA
//! graph, the gradients summed.

use std::cell::RefCell;
use std::collections::VecDeque;

use burn::tensor::{Distribution, Tensor, TensorPrimitive};
use medddpm_diffusion::CosineSchedule;
use medddpm_kernels::marks::mark;
use medddpm_unet::{KernelAutodiffBackend, UNet};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::graphed::MicroStepGraphs;
use super::loader::{HostBatch, Loader, READ_AHEAD};
use super::shard::Shard;
use super::step::{micro_step, MicroBatch};
use crate::gradient_sum::GradientSum;
use crate::{ExperimentConfig, TrainError};

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
    let mut step = AccumulatedStep {
        accumulator: GradientSum::new(),
        losses: Vec::new(),
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
    // This step's micro-batches, then the next steps' first ones: the loader reads the
    // READ_AHEAD after the one running.
    let following = (1..=READ_AHEAD)
        .flat_map(|k| shard.micro_batches(first + k * shard.step_micro_batches()))
        .take(READ_AHEAD);
    let mut stream = shard.micro_batches(first).chain(following);
    let mut window: VecDeque<_> = stream.by_ref().take(READ_AHEAD + 1).collect();
    for _ in 0..shard.micro_batch_count() {
        let micro = window.pop_front().expect("one micro-batch per count");
        window.extend(stream.next());
        let positions = positions_of(&micro);
        let indices = loader.indices(&positions);
        let host = loader.take(&positions)?;
        mark("micro-batch read");
        let upcoming: Vec<Vec<usize>> = window.iter().take(READ_AHEAD).map(positions_of).collect();
        loader.read_ahead(&upcoming);
        step.batch_indices.extend_from_slice(&indices);
        let batch = draw_micro_batch(replica, host, &positions, config);
        let how = (
            &config.diffusion,
            divisor,
            settings.activation_checkpointing,
        );
        let (grads, loss) = {
            let _turn = medddpm_diffusion::autodiff_turn();
            match replica.graphs {
                Some(graphs) => graphs
                    .borrow_mut()
                    .micro_step(work, replica.schedule, batch, how),
                None => micro_step(work, replica.schedule, batch, how.0, how.1, how.2),
            }
        };
        // Several micro-batches are summed in f32; one replica's single micro-batch keeps the
        // compute dtype, and the team's average works in f32 (`Team::average`).
        step.accumulator.add(model, grads);
        step.losses.push(loss);
        mark("micro-step enqueued");
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
        let _serial = medddpm_diffusion::backend_rng();
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
