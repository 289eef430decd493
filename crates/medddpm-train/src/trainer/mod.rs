//! The training loop, reading top to bottom like the reference's `Trainer.train`: draw a
//! micro-batch, noise it at random steps, predict the noise, accumulate gradients, step Adam,
//! update the EMA, log, checkpoint and sample.
//!
//! Modules: `session` (opening a run: data, network, fresh or resumed state), `step` (the data
//! order and the micro-step the bench times too), `log` (`metrics.jsonl` and loss windows),
//! `events` (TensorBoard event files), `progress` (a step logged to both), `periodic`
//! (checkpoints, the loss curve and samples on the cadence).

mod accumulate;
mod events;
mod exchange;
pub(crate) mod graphed;
mod link;
mod loader;
mod log;
mod parallel;
mod periodic;
pub mod processes;
mod progress;
mod scaler;
mod session;
mod shard;
mod step;
mod team;
mod update;

use std::path::{Path, PathBuf};

use burn::module::AutodiffModule;
use burn::tensor::DType;
use medddpm_kernels::marks::mark;
use medddpm_kernels::{Collective, Precision};
use medddpm_unet::{Compute, KernelAutodiffBackend, UNet};

pub use graphed::MicroStepGraphs;
pub use log::{StepMetrics, LOSS_WINDOW};
pub use step::{micro_step, micro_step_forward, micro_step_loss, MicroBatch, MicroStepForward};

use crate::checkpoint::{LossScale, RunDir};
use crate::data::NiftiDataset;
use crate::ema::{update_ema, EmaAction, EmaSchedule};
use crate::{ExperimentConfig, FusedAdamOptimizer, TrainError};
use accumulate::{accumulate, Replica};
use events::RunEvents;
use loader::Loader;
use progress::{Logged, Progress};
use session::Session;
use shard::Shard;
#[cfg(test)]
pub(crate) use step::random_micro_batch;
use team::Team;
use update::{update, Update};

/// Hooks for progress reporting; the CLI draws progress bars with them.
pub trait TrainObserver {
    /// Training starts at `start_step` (non-zero on resume) and runs to `end_step`.
    fn started(&mut self, _start_step: usize, _end_step: usize) {}
    /// An optimizer step finished.
    fn step(&mut self, _metrics: &StepMetrics) {}
    /// A periodic sample is being drawn: `done` of `total` reverse steps.
    fn sampling(&mut self, _done: usize, _total: usize) {}
    /// A checkpoint was written.
    fn checkpoint(&mut self, _path: &Path) {}
    /// Something worth telling the user.
    fn message(&mut self, _text: &str) {}
    /// Whether the session should stop now (a scheduler's SIGTERM, a Ctrl-C): asked after each
    /// optimizer step (by the lead of a several-device run, whose replicas stop at the same
    /// step), which then writes a checkpoint and ends.
    fn stop_requested(&mut self) -> bool {
        false
    }
}

/// An observer that reports nothing.
pub struct Quiet;
impl TrainObserver for Quiet {}

/// What a training session did.
#[derive(Debug, Clone)]
pub struct TrainSummary {
    /// Step the session started from.
    pub start_step: usize,
    /// Step the session ended at.
    pub end_step: usize,
    /// Mean loss of the first and the last optimizer step of the session.
    pub first_loss: f32,
    /// See `first_loss`.
    pub last_loss: f32,
    /// Mean loss over the session's first and last `loss_window` optimizer steps: single
    /// steps are noisy (each draws one timestep), so these say whether the model learned.
    pub first_mean_loss: f32,
    /// See `first_mean_loss`.
    pub last_mean_loss: f32,
    /// Steps averaged in `first_mean_loss` and `last_mean_loss` (fewer if the session was
    /// shorter than [`LOSS_WINDOW`] steps).
    pub loss_window: usize,
    /// The last checkpoint written.
    pub checkpoint: PathBuf,
    /// NIfTI files sampled during the session.
    pub samples: Vec<PathBuf>,
}

/// How a session runs.
#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    /// Continue from the run folder's latest checkpoint.
    pub resume: bool,
    /// Stop (and checkpoint) after this many optimizer steps of this session, before
    /// `train.steps` is reached.
    pub max_steps: Option<usize>,
    /// How the network computes: precision (bf16 is mixed precision: weights, Adam state and
    /// EMA stay f32; gradients arrive in f32 through the recorded casts), activation layout and
    /// convolution engine. Checkpoints do not depend on it.
    pub compute: Compute,
    /// How the replicas of a multi-device run ([`train_on`]) average their gradients: `nccl`
    /// on CUDA; `host` (and `auto`, which the backend layer resolves) anywhere.
    pub collective: Collective,
    /// Replay the micro-step from a CUDA graph after two warm-up steps
    /// ([`MicroStepGraphs`]; one-device runs without activation checkpointing; elsewhere, and
    /// where graphs cannot run, every step runs as it comes). Off by default: on an H200 a
    /// replayed micro-step is about as fast as one run as it comes, and the graph's buffers
    /// cost memory.
    pub cuda_graphs: bool,
}

/// What a session trains, handed down together: the experiment, its run folder and the
/// session's options.
#[derive(Clone, Copy)]
pub(super) struct Job<'a> {
    config: &'a ExperimentConfig,
    run: &'a RunDir,
    options: &'a SessionOptions,
}

/// Trains (or resumes) the experiment in `run`, on backend `B`.
pub fn train<B: KernelAutodiffBackend>(
    config: &ExperimentConfig,
    run: &RunDir,
    options: &SessionOptions,
    device: &B::Device,
    observer: &mut dyn TrainObserver,
) -> Result<TrainSummary, TrainError> {
    train_on::<B>(config, run, options, std::slice::from_ref(device), observer)
}

/// [`train`] with one replica of the model per device (data-parallel): each optimizer step's
/// `batch_size x grad_accum` examples are shared among the devices (whole micro-batches when
/// `grad_accum` divides evenly, else parts of each micro-batch), the replicas' gradients are
/// averaged before every Adam step, and the first device keeps the EMA, the log and the
/// checkpoints. The examples, timesteps and noise of a step do not depend on the device count,
/// so a run equals its one-device run up to the order of float sums, and may be resumed on
/// another number of devices.
pub fn train_on<B: KernelAutodiffBackend>(
    config: &ExperimentConfig,
    run: &RunDir,
    options: &SessionOptions,
    devices: &[B::Device],
    observer: &mut dyn TrainObserver,
) -> Result<TrainSummary, TrainError> {
    let Some(first) = devices.first() else {
        return Err(TrainError::Config {
            path: None,
            message: "no device to train on".into(),
        });
    };
    let shard = Shard::new(&config.train, 0, devices.len())?;
    let job = Job {
        config,
        run,
        options,
    };
    let s = open_session::<B>(job, first, observer)?;
    // One device alone, unless NCCL was asked for: a group of one runs the multi-device path.
    if devices.len() == 1 && options.collective != Collective::Nccl {
        return lead(s, job, first, Team::alone(shard), observer);
    }
    parallel::train(s, job, devices, observer)
}

/// The session on the first device, with f16's loss scale where the run starts one.
fn open_session<B: KernelAutodiffBackend>(
    job: Job<'_>,
    device: &B::Device,
    observer: &mut dyn TrainObserver,
) -> Result<Session<B>, TrainError> {
    let mut s = Session::<B>::open(job, device, observer)?;
    if job.options.compute.precision == Precision::F16 && s.state.loss_scale.is_none() {
        s.state.loss_scale = Some(LossScale::new(job.config.train.loss_scale));
    }
    Ok(s)
}

/// The first replica's loop (the only one of a one-device run): its optimizer steps, with the
/// EMA, the log, the checkpoints and the samples.
fn lead<B: KernelAutodiffBackend>(
    mut s: Session<B>,
    job: Job<'_>,
    device: &B::Device,
    team: Team<'_>,
    observer: &mut dyn TrainObserver,
) -> Result<TrainSummary, TrainError> {
    let (config, run, options) = (job.config, job.run, job.options);
    let settings = &config.train;
    let end_step = end_step(config, options, s.state.step);
    let ema_schedule = ema_schedule(config);
    let mut loader = Loader::new(
        settings.seed,
        std::sync::Arc::clone(&s.dataset),
        loader::host_memory::<B>(device),
    );
    let session = (s.config_toml.as_str(), &options.compute, team.shard.world);
    let events = RunEvents::open(config, run, session, s.state.step)?;
    let mut progress = Progress::start(run, &s.state, events)?;
    let mut skipped_in_a_row = 0usize;
    observer.started(progress.start_step, end_step);
    let compute_dtype = options.compute.precision.compute_dtype();
    let graphs = std::cell::RefCell::new(MicroStepGraphs::new(options.cuda_graphs));
    while s.state.step < end_step {
        // 1-3. The micro-batches, the team's average, Adam.
        let replica = Replica {
            schedule: &s.schedule,
            device,
            graphs: (team.shard.world == 1).then_some(&graphs),
        };
        let lr = settings.lr_at(s.state.step);
        let step_number = s.state.step + 1;
        let (model, outcome, batch) = optimizer_step(
            &replica,
            s.model,
            &mut s.optim,
            (
                &mut s.state.micro_batches,
                scaled(&mut s.state.loss_scale, options),
            ),
            (&mut loader, &mut skipped_in_a_row),
            (config, &team, lr, compute_dtype),
        )?;
        s.model = model;
        let Some((loss, grad_norm)) = applied(outcome, step_number, &s.dataset, &batch, observer)?
        else {
            continue;
        };
        stop_on_failure(&s, loss, &batch, &progress.last_checkpoint, run)?;
        // The EMA, tested on the 0-based index of this optimizer step.
        let action = ema_schedule.action(s.state.step);
        if action != EmaAction::Skip {
            s.ema = update_ema(s.ema, &s.model.valid(), action);
            mark("EMA enqueued");
        }
        s.state.step += 1;
        s.state.last_loss = loss;

        // 4. Log.
        let loss_scale = scaled(&mut s.state.loss_scale, options).map(|l| l.scale);
        let logged = Logged {
            loss,
            lr,
            grad_norm,
            loss_scale,
        };
        progress.record(&mut s.state, logged, observer)?;
        mark("logged");

        // 5-6. The checkpoint on the cadence, and a stop when asked.
        let place = (config, run, options, device);
        if checkpoint_or_stop(&s, place, end_step, &team, &mut progress, observer)? {
            break;
        }
    }
    if let Some(line) = graphs.borrow().status().summary() {
        observer.message(&line);
    }
    progress.summary(run, &s.state)
}

/// When the EMA of the weights is updated, and how.
fn ema_schedule(config: &ExperimentConfig) -> EmaSchedule {
    EmaSchedule {
        decay: config.train.ema_decay,
        every: config.train.ema_every,
        start: config.train.ema_start,
    }
}

/// Steps 5 and 6 of the lead's loop: the checkpoint (and samples with the EMA weights) on the
/// cadence and at the end; when asked to stop, this step's checkpoint, then the session ends
/// (every replica at this step: they agree on it). True when the session ends.
fn checkpoint_or_stop<B: KernelAutodiffBackend>(
    s: &Session<B>,
    (config, run, options, device): (&ExperimentConfig, &RunDir, &SessionOptions, &B::Device),
    end_step: usize,
    team: &Team<'_>,
    progress: &mut Progress,
    observer: &mut dyn TrainObserver,
) -> Result<bool, TrainError> {
    let step = s.state.step;
    let checkpointed = step.is_multiple_of(config.train.save_every) || step == end_step;
    if checkpointed {
        periodic::checkpoint(s, config, run, (options, device), progress, observer)?;
    }
    let asked = step < end_step && observer.stop_requested();
    if !team.agree_stop(asked)? {
        return Ok(false);
    }
    if !checkpointed {
        // Off the cadence: the checkpoint and loss curve, no samples.
        periodic::checkpoint(s, config, run, (options, device), progress, observer)?;
    }
    observer.message(&format!(
        "stopped at step {step} as asked; --resume continues from its checkpoint"
    ));
    Ok(true)
}

/// The loss (and gradient norm) of an update the lead goes on with (`None`: the step is tried
/// again with the next batch, after saying why).
fn applied(
    outcome: Update,
    step: usize,
    dataset: &NiftiDataset,
    batch: &[usize],
    observer: &mut dyn TrainObserver,
) -> Result<Option<(f32, Option<f32>)>, TrainError> {
    match outcome {
        Update::Applied { loss, grad_norm } => Ok(Some((loss, grad_norm))),
        Update::GaveUp(loss) => Ok(Some((loss, None))),
        // Scales below 1 cannot help: the gradients themselves overflow f16.
        Update::Overflow { to, .. } if to < 1.0 => {
            Err(TrainError::GradientOverflow { step, scale: to })
        }
        Update::Overflow { from, to } => {
            observer.message(&format!(
                "step {step}: the f16 gradients overflowed at loss scale {from}; no update, the scale is now {to}"
            ));
            Ok(None)
        }
        Update::Skipped(loss) => {
            observer.message(&format!(
                "step {step}: the loss is {loss}; batch skipped without an update ({})",
                image_files(dataset, batch).join(", ")
            ));
            Ok(None)
        }
    }
}

/// The loss scale this session's steps use: f16's, none in other precisions.
fn scaled<'a>(
    loss_scale: &'a mut Option<LossScale>,
    options: &SessionOptions,
) -> Option<&'a mut LossScale> {
    loss_scale
        .as_mut()
        .filter(|_| options.compute.precision == Precision::F16)
}

/// The step a session stops at.
fn end_step(config: &ExperimentConfig, options: &SessionOptions, start: usize) -> usize {
    match options.max_steps {
        Some(n) => (start + n).min(config.train.steps),
        None => config.train.steps,
    }
}

/// One replica's optimizer step: its micro-batches (drawn from the micro-batch counter
/// `micro_batches`, which advances by the whole step's count), the team's gradient average and
/// Adam. Returns the model, what became of the update and the examples this replica trained on.
fn optimizer_step<B: KernelAutodiffBackend>(
    replica: &Replica<'_, B>,
    model: UNet<B>,
    optim: &mut FusedAdamOptimizer<UNet<B>, B>,
    (micro_batches, loss_scale): (&mut usize, Option<&mut LossScale>),
    (loader, skipped_in_a_row): (&mut Loader, &mut usize),
    (config, team, lr, compute_dtype): (&ExperimentConfig, &Team<'_>, f64, DType),
) -> Result<(UNet<B>, Update, Vec<usize>), TrainError> {
    // Every replica starts the step together: the first may have been sampling with the
    // backend's one random generator, which the others would otherwise draw from meanwhile.
    team.ready(Ok(()))?;
    // The weights the forward pass reads: in bf16 the optimizer's working copies, in f32 the
    // model itself.
    let work = optim.working_model(&model, compute_dtype);
    mark("working weights");
    let first = *micro_batches;
    let scale = loss_scale
        .as_ref()
        .map_or(1.0, |l| l.per_replica(team.shard.world));
    let step = accumulate(
        replica,
        (&model, &work),
        loader,
        config,
        (&team.shard, first, scale),
    );
    *micro_batches += team.shard.step_micro_batches();
    let mut step = team.ready(step)?;
    // The working model goes first, so that the update consumes its copies (see
    // `FusedAdamOptimizer::working_model`).
    drop(work);
    let batch = std::mem::take(&mut step.batch_indices);
    let (model, outcome) = match loss_scale {
        Some(scale) => scaler::scaled_update(
            optim,
            model,
            step,
            (config, lr, skipped_in_a_row),
            (team, replica.device),
            scale,
        )?,
        None => update(
            optim,
            model,
            step,
            (config, lr, skipped_in_a_row),
            (team, compute_dtype),
            replica.device,
        )?,
    };
    Ok((model, outcome, batch))
}

/// Stops the run on a device error or a non-finite loss (after `skip` gave up), before
/// anything of this step is saved.
fn stop_on_failure<B: KernelAutodiffBackend>(
    s: &Session<B>,
    loss: f32,
    batch: &[usize],
    last_checkpoint: &Option<PathBuf>,
    run: &RunDir,
) -> Result<(), TrainError> {
    if let Some(message) = medddpm_kernels::device_error() {
        return Err(TrainError::Device {
            during: format!("training stopped at step {}", s.state.step + 1),
            message,
        });
    }
    if !loss.is_finite() {
        let files = image_files(&s.dataset, batch);
        return Err(diverged(
            s.state.step + 1,
            loss,
            files,
            last_checkpoint,
            run,
        )?);
    }
    Ok(())
}

/// The image files of the examples at `indices`.
fn image_files(dataset: &NiftiDataset, indices: &[usize]) -> Vec<String> {
    indices
        .iter()
        .filter_map(|&i| dataset.files(i))
        .flat_map(|(_, images)| images.into_iter().map(|p| p.display().to_string()))
        .collect()
}

/// The error for a non-finite loss at `step`, naming the batch and the run's newest checkpoint
/// (this session's, else the one it resumed from).
fn diverged(
    step: usize,
    loss: f32,
    files: Vec<String>,
    this_session: &Option<PathBuf>,
    run: &RunDir,
) -> Result<TrainError, TrainError> {
    let last_checkpoint = match this_session {
        Some(p) => Some(p.clone()),
        None => run.latest_checkpoint()?,
    };
    Ok(TrainError::Diverged {
        step,
        loss,
        files,
        last_checkpoint,
    })
}
