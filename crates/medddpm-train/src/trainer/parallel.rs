//! A data-parallel session: the first device runs the lead loop (EMA, log, checkpoints) in the
//! calling thread, every other device a worker replica in a thread of its own, and they meet
//! each step through the [`Exchange`] (and NCCL for the gradients, on CUDA).

use burn::module::Module;
use burn::optim::Optimizer;
use burn::prelude::DeviceOps;
use medddpm_diffusion::CosineSchedule;
use medddpm_kernels::Collective;
use medddpm_unet::{KernelAutodiffBackend, UNet};

use super::accumulate::Replica;
use super::exchange::{AbortOnDrop, Exchange};
use super::loader::Loader;
use super::session::Session;
use super::shard::{Shard, Split};
use super::team::{Link, Team, STOPPED_BY_ANOTHER};
use super::{
    end_step, lead, optimizer_step, scaled, Job, SessionOptions, TrainObserver, TrainSummary,
    Update,
};
use serde::{Deserialize, Serialize};

use crate::checkpoint::{LossScale, TrainState};
use crate::data::NiftiDataset;
use crate::{ExperimentConfig, FusedAdam, FusedAdamOptimizer, TrainError};

/// A replica on a device other than the first: its own data reader, weights and Adam state.
pub(super) struct Worker<B: KernelAutodiffBackend> {
    pub rank: usize,
    pub device: B::Device,
    pub dataset: std::sync::Arc<NiftiDataset>,
    pub schedule: CosineSchedule,
    pub model: UNet<B>,
    pub optim: FusedAdamOptimizer<UNet<B>, B>,
    /// The step and micro-batch counter the session starts from.
    pub step: usize,
    pub micro_batches: usize,
    /// f16's loss scale, kept in step with the lead's (every replica checks the same averaged
    /// gradients).
    pub loss_scale: Option<LossScale>,
}

/// Adam's state as its record (what a replica receives).
pub(super) type AdamRecord<B> = <FusedAdamOptimizer<UNet<B>, B> as Optimizer<UNet<B>, B>>::Record;

/// Where a session starts: the step, the micro-batch counter and f16's loss scale.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(super) struct StartPoint {
    pub step: usize,
    pub micro_batches: usize,
    pub loss_scale: Option<LossScale>,
}

impl StartPoint {
    pub fn of(state: &TrainState) -> Self {
        Self {
            step: state.step,
            micro_batches: state.micro_batches,
            loss_scale: state.loss_scale,
        }
    }
}

impl<B: KernelAutodiffBackend> Worker<B> {
    /// Replica `rank` on `device` with the lead's weights (`model`, on `device`) and Adam
    /// state (`optim`), from the lead's start point: a thread's copy of the lead's session, or
    /// what a replica process received.
    pub fn new(
        (rank, device): (usize, &B::Device),
        config: &ExperimentConfig,
        model: UNet<B>,
        optim: AdamRecord<B>,
        from: StartPoint,
    ) -> Result<Self, TrainError> {
        Ok(Self {
            rank,
            device: device.clone(),
            dataset: std::sync::Arc::new(NiftiDataset::open(&config.data)?),
            schedule: CosineSchedule::new(config.diffusion.timesteps),
            model,
            optim: FusedAdam::from_settings(&config.train)
                .init::<B, UNet<B>>()
                .load_record(optim),
            step: from.step,
            micro_batches: from.micro_batches,
            loss_scale: from.loss_scale,
        })
    }

    /// The worker's optimizer steps to `end`, the same sequence as the lead's without the EMA,
    /// the log and the checkpoints.
    pub fn run(
        mut self,
        config: &ExperimentConfig,
        options: &SessionOptions,
        team: Team<'_>,
        end: usize,
    ) -> Result<(), TrainError> {
        let mut loader = Loader::new(
            config.train.seed,
            std::sync::Arc::clone(&self.dataset),
            super::loader::host_memory::<B>(&self.device),
        );
        let mut skipped_in_a_row = 0usize;
        let compute_dtype = options.compute.precision.compute_dtype();
        while self.step < end {
            let replica = Replica {
                schedule: &self.schedule,
                device: &self.device,
                graphs: None,
            };
            let lr = config.train.lr_at(self.step);
            let (model, outcome, _) = optimizer_step(
                &replica,
                self.model,
                &mut self.optim,
                (
                    &mut self.micro_batches,
                    scaled(&mut self.loss_scale, options),
                ),
                (&mut loader, &mut skipped_in_a_row),
                (config, &team, lr, compute_dtype),
            )?;
            self.model = model;
            match outcome {
                Update::Skipped(_) => continue,
                // The lead stops the run when the scale fell below 1.
                Update::Overflow { to, .. } if to < 1.0 => return Ok(()),
                Update::Overflow { .. } => continue,
                // The lead stops the run with the error that names the batch.
                Update::GaveUp(_) => return Ok(()),
                Update::Applied { loss, .. } if !loss.is_finite() => return Ok(()),
                Update::Applied { .. } => {
                    self.step += 1;
                    // The lead's stop (a signal), at the step boundary it checkpoints.
                    if team.agree_stop(false)? {
                        return Ok(());
                    }
                }
            }
        }
        Ok(())
    }
}

/// Runs the session `s` (opened on `devices[0]`) on all of `devices`.
pub(super) fn train<B: KernelAutodiffBackend>(
    s: Session<B>,
    job: Job<'_>,
    devices: &[B::Device],
    observer: &mut dyn TrainObserver,
) -> Result<TrainSummary, TrainError> {
    let (config, options) = (job.config, job.options);
    let world = devices.len();
    let collective = match options.collective {
        Collective::Auto => Collective::Host,
        c => c,
    };
    let group: Vec<_> = devices.iter().map(|d| d.to_id()).collect();
    let end = end_step(config, options, s.state.step);
    let workers = devices
        .iter()
        .enumerate()
        .skip(1)
        .map(|(rank, device)| {
            let model = s.model.clone().fork(device);
            let from = StartPoint::of(&s.state);
            Worker::new((rank, device), config, model, s.optim.to_record(), from)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let shard = Shard::new(&config.train, 0, world)?;
    observer.message(&describe(config, &shard, collective));
    let exchange = Exchange::new(world);
    std::thread::scope(|scope| {
        let handles: Vec<_> = workers
            .into_iter()
            .map(|w| {
                let team = Team::member(
                    Shard::new(&config.train, w.rank, world)?,
                    Link::Threads(&exchange, &group),
                    collective,
                    format!("{:?}", w.device),
                );
                let exchange = &exchange;
                Ok(scope.spawn(move || {
                    let guard = AbortOnDrop(Some(exchange));
                    let out = w.run(config, options, team, end);
                    if out.is_ok() {
                        guard.disarm();
                    }
                    out
                }))
            })
            .collect::<Result<Vec<_>, TrainError>>()?;
        let guard = AbortOnDrop(Some(&exchange));
        let team = Team::member(
            shard,
            Link::Threads(&exchange, &group),
            collective,
            format!("{:?}", devices[0]),
        );
        let lead_out = lead(s, job, &devices[0], team, observer);
        if lead_out.is_ok() {
            guard.disarm();
        } else {
            drop(guard);
        }
        let worker_outs = handles
            .into_iter()
            .enumerate()
            .map(|(i, h)| {
                h.join()
                    .unwrap_or_else(|panic| Err(panicked(i + 1, &devices[i + 1], &*panic)))
            })
            .collect();
        first_cause(lead_out, worker_outs)
    })
}

/// What a run on several devices says when it starts.
pub(super) fn describe(config: &ExperimentConfig, shard: &Shard, collective: Collective) -> String {
    let (t, world) = (&config.train, shard.world);
    let share = match shard.split {
        Split::Accumulation => format!(
            "{} of the {} micro-batches of each step per device",
            t.grad_accum / world,
            t.grad_accum
        ),
        Split::Batch => format!(
            "{} of the {} examples of each micro-batch per device",
            t.batch_size / world,
            t.batch_size
        ),
    };
    let by = match collective {
        Collective::Nccl => "NCCL",
        _ => "the host",
    };
    format!("data-parallel on {world} devices ({share}), gradients averaged by {by}")
}

/// The error of a worker thread that panicked.
fn panicked<D: std::fmt::Debug>(
    rank: usize,
    device: &D,
    panic: &(dyn std::any::Any + Send),
) -> TrainError {
    TrainError::Replica {
        rank,
        device: format!("{device:?}"),
        message: format!(
            "panicked: {}",
            medddpm_kernels::panics::panic_message(panic)
        ),
    }
}

/// The session's outcome: the lead's, unless it only stopped because a worker did, whose own
/// error then says why.
pub(super) fn first_cause(
    lead: Result<TrainSummary, TrainError>,
    workers: Vec<Result<(), TrainError>>,
) -> Result<TrainSummary, TrainError> {
    let consequence = |e: &TrainError| matches!(e, TrainError::Replica { message, .. } if message.starts_with(STOPPED_BY_ANOTHER));
    match lead {
        Err(e) if consequence(&e) => Err(workers
            .into_iter()
            .filter_map(Result::err)
            .find(|w| !consequence(w))
            .unwrap_or(e)),
        Err(e) => Err(e),
        Ok(summary) => match workers.into_iter().find_map(Result::err) {
            Some(e) => Err(e),
            None => Ok(summary),
        },
    }
}
