//! The training loop, reading top to bottom like the reference's `Trainer.train`: draw a
//! micro-batch, noise it at random steps, predict the noise, accumulate gradients, step Adam,
//! update the EMA, log, checkpoint and sample.

use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::module::{AutodiffModule, Module};
use burn::optim::{GradientsAccumulator, GradientsParams, Optimizer};
use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Recorder};
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, ElementConversion, Tensor, TensorData};
use medddpm_diffusion::{training_loss, CosineSchedule, Sampler};
use medddpm_unet::{cast_compute_params, Compute, KernelAutodiffBackend, KernelBackend, UNet};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::checkpoint::{
    self, read_state, RunDir, TrainState, EMA_FILE, MODEL_FILE, OPTIMIZER_FILE,
};
use crate::data::{Example, NiftiDataset};
use crate::ema::{update_ema, EmaAction, EmaSchedule};
use crate::sample::write_sample;
use crate::{DiffusionConfig, ExperimentConfig, NonFiniteLoss, TrainError};

/// Writes a record as `NamedMpkFileRecorder` would (the same bytes, full precision: resumed
/// runs continue bit for bit), but through our own file
/// write, so a failure is the file's I/O error ("No space left on device") rather than the
/// encoder's ("MessagePack value").
pub(crate) fn save_record<B: Backend, R: burn::record::Record<B>>(
    record: R,
    path: &Path,
) -> Result<(), TrainError> {
    let bytes = NamedMpkBytesRecorder::<FullPrecisionSettings>::new()
        .record(record, ())
        .map_err(|e| TrainError::checkpoint(path, format!("cannot encode: {e}")))?;
    std::fs::write(path, bytes).map_err(|e| TrainError::io(path, e))
}

/// One optimizer step's numbers, as written to `metrics.jsonl`.
#[derive(Debug, Clone, Serialize)]
pub struct StepMetrics {
    /// Optimizer steps completed.
    pub step: usize,
    /// Mean loss over the step's micro-batches (the reference's `training_loss` scalar).
    pub loss: f32,
    /// Learning rate.
    pub lr: f64,
    /// Optimizer steps per second over this session so far.
    pub steps_per_s: f64,
    /// Seconds of training in the whole run.
    pub elapsed_s: f64,
}

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

/// Steps averaged in [`TrainSummary::first_mean_loss`] and [`TrainSummary::last_mean_loss`].
pub const LOSS_WINDOW: usize = 20;

/// How a session runs.
#[derive(Debug, Clone)]
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
}

impl Default for SessionOptions {
    fn default() -> Self {
        Self {
            resume: false,
            max_steps: None,
            compute: Compute::default(),
        }
    }
}

/// The data order: epoch e visits the examples in a permutation drawn from (seed, e), like the
/// reference's reshuffling `DataLoader`, but reproducible from the micro-batch counter alone.
struct DataOrder {
    seed: u64,
    len: usize,
    epoch: Option<(usize, Vec<usize>)>,
}

impl DataOrder {
    fn index(&mut self, draw: usize) -> usize {
        let (epoch, pos) = (draw / self.len, draw % self.len);
        if self.epoch.as_ref().map(|(e, _)| *e) != Some(epoch) {
            let mut rng = ChaCha8Rng::seed_from_u64(self.seed ^ 0x5eed_da7a);
            rng.set_stream(epoch as u64);
            let mut perm: Vec<usize> = (0..self.len).collect();
            for i in (1..perm.len()).rev() {
                perm.swap(i, rng.random_range(0..=i));
            }
            self.epoch = Some((epoch, perm));
        }
        self.epoch.as_ref().unwrap().1[pos]
    }
}

fn batch_tensor<B: Backend>(examples: &[Example], image: bool, device: &B::Device) -> Tensor<B, 5> {
    let [d, h, w] = examples[0].shape;
    let mut data = Vec::new();
    for e in examples {
        data.extend_from_slice(if image { &e.image } else { &e.cond });
    }
    let channels = data.len() / (examples.len() * d * h * w);
    Tensor::from_data(
        TensorData::new(data, [examples.len(), channels, d, h, w]),
        device,
    )
}

/// What one micro-step trains on: clean images, their condition, one timestep per example and
/// the noise to add.
pub struct MicroBatch<B: Backend> {
    /// Clean images `[batch, image_channels, d, h, w]`.
    pub x0: Tensor<B, 5>,
    /// Condition channels `[batch, cond_channels, d, h, w]`, if the model is conditioned.
    pub cond: Option<Tensor<B, 5>>,
    /// One raw timestep per example.
    pub timesteps: Vec<usize>,
    /// Noise like `x0`.
    pub noise: Tensor<B, 5>,
}

/// The training micro-step: [`micro_step_loss`], its backward pass scaled by `1 / divisor`
/// (gradient accumulation), and the gradients under the master weights' ids (in the compute
/// dtype for the parameters `work` holds in it). `work` is the working model
/// ([`crate::FusedAdamOptimizer::working_model`]; in f32 the model itself). Returns the
/// gradients and the unscaled loss, still on the device (reading it waits for the device). The
/// trainer and `medddpm bench` both run this function.
pub fn micro_step<B: KernelAutodiffBackend>(
    work: &UNet<B>,
    schedule: &CosineSchedule,
    batch: MicroBatch<B>,
    objective: &DiffusionConfig,
    divisor: f64,
) -> (GradientsParams, Tensor<B, 1>) {
    let loss = micro_step_loss(work, schedule, batch, objective);
    let grads = loss.clone().div_scalar(divisor).backward();
    (GradientsParams::from_grads(grads, work), loss)
}

/// The forward half of [`micro_step`]: the loss on the predicted noise, computed with the
/// working model `work`'s weights in its own compute settings.
pub fn micro_step_loss<B: KernelAutodiffBackend>(
    work: &UNet<B>,
    schedule: &CosineSchedule,
    batch: MicroBatch<B>,
    objective: &DiffusionConfig,
) -> Tensor<B, 1> {
    training_loss(
        work,
        schedule,
        batch.x0,
        batch.cond,
        &batch.timesteps,
        batch.noise,
        objective.loss,
        objective.prediction,
    )
    .loss
}

/// Trains (or resumes) the experiment in `run`, on backend `B`.
pub fn train<B: KernelAutodiffBackend>(
    config: &ExperimentConfig,
    run: &RunDir,
    options: &SessionOptions,
    device: &B::Device,
    observer: &mut dyn TrainObserver,
) -> Result<TrainSummary, TrainError> {
    config.validate()?;
    let settings = &config.train;
    let dataset = NiftiDataset::open(&config.data)?;
    if dataset.is_empty() {
        return Err(TrainError::Config {
            path: None,
            message: "the data set is empty".into(),
        });
    }
    let expected_in = dataset.image_channels() + dataset.cond_channels();
    if config.model.in_channels != expected_in
        || config.model.out_channels != dataset.image_channels()
    {
        return Err(TrainError::Config {
            path: None,
            message: format!(
                "the data has {} image and {} condition channels, so the model needs in_channels = {} and out_channels = {} (it has {} and {})",
                dataset.image_channels(),
                dataset.cond_channels(),
                expected_in,
                dataset.image_channels(),
                config.model.in_channels,
                config.model.out_channels
            ),
        });
    }
    let schedule = CosineSchedule::new(config.diffusion.timesteps);
    let config_toml = config.to_toml();

    // Model, EMA and optimizer: fresh (initialised from the run's seed) or from the latest
    // checkpoint.
    B::seed(device, settings.seed);
    let mut model: UNet<B> = config.model.init(device)?.with_compute(options.compute);
    let mut ema: UNet<B::InnerBackend> = model.valid();
    let mut optim = crate::FusedAdam {
        beta_1: settings.adam_beta1,
        beta_2: settings.adam_beta2,
        epsilon: settings.adam_epsilon,
    }
    .init::<B, UNet<B>>();
    let mut state = TrainState {
        step: 0,
        micro_batches: 0,
        seed: settings.seed,
        last_loss: f32::NAN,
        elapsed_s: 0.0,
    };
    // Held to the end of the session: a second process on this run stops here.
    let _lock = crate::lock::RunLock::acquire(&run.root)?;
    let existing = run.latest_checkpoint()?;
    if options.resume {
        let Some(ckpt) = existing else {
            return Err(TrainError::checkpoint(
                &run.checkpoints(),
                "no checkpoint to resume from",
            ));
        };
        // Each file read below is checked against the checkpoint's checksums.
        state = read_state(&ckpt)?;
        check_same_network(config, &ckpt)?;
        if state.seed != settings.seed {
            return Err(TrainError::checkpoint(
                &ckpt,
                format!(
                    "written with seed {}, the config says {}",
                    state.seed, settings.seed
                ),
            ));
        }
        let load = |name: &str| -> Result<(PathBuf, Vec<u8>), TrainError> {
            let name = format!("{name}.mpk");
            Ok((
                ckpt.join(&name),
                crate::integrity::read_checked(&ckpt, &name)?,
            ))
        };
        let (file, bytes) = load(MODEL_FILE)?;
        model = crate::integrity::load_record_bytes(&model, bytes, &file, device)?;
        let (file, bytes) = load(EMA_FILE)?;
        ema = crate::integrity::load_record_bytes(&ema, bytes, &file, device)?;
        let (file, bytes) = load(OPTIMIZER_FILE)?;
        optim = optim.load_record(crate::integrity::decode_record(bytes, &file, device)?);
        observer.message(&format!(
            "resuming from {} (step {})",
            ckpt.display(),
            state.step
        ));
    } else if let Some(ckpt) = existing {
        return Err(TrainError::checkpoint(
            &ckpt,
            "the run folder already holds checkpoints: resume it (--resume) or choose another run folder",
        ));
    }
    std::fs::create_dir_all(&run.root).map_err(|e| TrainError::io(&run.root, e))?;
    checkpoint::atomic_write(&run.config_path(), config_toml.as_bytes())?;

    let start_step = state.step;
    let end_step = match options.max_steps {
        Some(n) => (start_step + n).min(settings.steps),
        None => settings.steps,
    };
    let ema_schedule = EmaSchedule {
        decay: settings.ema_decay,
        every: settings.ema_every,
        start: settings.ema_start,
    };
    let mut order = DataOrder {
        seed: settings.seed,
        len: dataset.len(),
        epoch: None,
    };
    let mut metrics = MetricsLog::open(&run.metrics_path(), state.step)?;
    let session_start = Instant::now();
    let elapsed_before = state.elapsed_s;
    let mut first_loss = f32::NAN;
    let mut first_losses = Vec::with_capacity(LOSS_WINDOW);
    let mut last_losses = std::collections::VecDeque::with_capacity(LOSS_WINDOW);
    let mut samples = Vec::new();
    let mut last_checkpoint = None;
    observer.started(start_step, end_step);

    // The weights the forward pass reads: in bf16 the optimizer's working copies, in f32 the
    // model itself.
    let compute_dtype = options.compute.precision.compute_dtype();
    // Batches skipped in a row for a non-finite loss (`on_non_finite_loss = "skip"`).
    let mut skipped_in_a_row = 0usize;
    while state.step < end_step {
        let work = optim.working_model(&model, compute_dtype);
        let mut accumulator = GradientsAccumulator::<UNet<B>>::new();
        let mut losses = Vec::with_capacity(settings.grad_accum);
        // The examples of this step's batch, named only if its loss is not finite.
        let mut batch_indices = Vec::with_capacity(settings.grad_accum * settings.batch_size);
        for _ in 0..settings.grad_accum {
            // 1. Draw the micro-batch and its randomness, both from the micro-batch counter.
            let draw = state.micro_batches;
            let first = batch_indices.len();
            batch_indices.extend(
                (0..settings.batch_size).map(|i| order.index(draw * settings.batch_size + i)),
            );
            let examples: Vec<Example> = batch_indices[first..]
                .iter()
                .map(|&i| dataset.get(i))
                .collect::<Result<_, _>>()?;
            let mut rng = ChaCha8Rng::seed_from_u64(settings.seed);
            rng.set_stream(draw as u64 + 1);
            let timesteps: Vec<usize> = (0..settings.batch_size)
                .map(|_| rng.random_range(0..config.diffusion.timesteps))
                .collect();
            B::seed(device, rng.next_u64());
            let x0 = batch_tensor::<B>(&examples, true, device);
            let cond = batch_tensor::<B>(&examples, false, device);
            let noise = Tensor::<B, 5>::random(x0.shape(), Distribution::Normal(0.0, 1.0), device);

            // 2. The loss on the predicted noise, scaled as the reference scales it.
            let mut divisor = settings.grad_accum as f64;
            if settings.reference_batch_scaling {
                divisor *= settings.batch_size as f64;
            }
            let batch = MicroBatch {
                x0,
                cond: Some(cond),
                timesteps,
                noise,
            };
            let (mut grads, loss) = micro_step(&work, &schedule, batch, &config.diffusion, divisor);
            if settings.grad_accum > 1 {
                // Summed over micro-batches in f32, not in the compute dtype.
                grads = crate::optim::gradients_to_f32(&model, grads);
            }
            accumulator.accumulate(&model, grads);
            losses.push(loss);
            state.micro_batches += 1;
        }

        // 3. Adam step, then the losses, then the EMA (tested on the 0-based index of this
        // optimizer step). Reading a loss waits for the device: only now, with the whole step
        // (backward passes and update) queued ahead of it, so that the GPU never waits for the
        // host to issue the optimizer's launches. A diverged step returns before anything is
        // saved.
        // The working model goes first, so that the update consumes its copies (see
        // `FusedAdamOptimizer::working_model`).
        drop(work);
        let read_mean = |losses: Vec<Tensor<B, 1>>| {
            let sum: f32 = losses
                .into_iter()
                .map(|l| l.inner().into_scalar().elem::<f32>())
                .sum();
            sum / settings.grad_accum as f32
        };
        let skip = settings.on_non_finite_loss == NonFiniteLoss::Skip;
        let lr = settings.lr_at(state.step);
        let loss = if skip {
            // The loss decides whether the update happens, so it is read first.
            let loss = read_mean(losses);
            if loss.is_finite() {
                skipped_in_a_row = 0;
                model = optim.step(lr, model, accumulator.grads());
            } else {
                skipped_in_a_row += 1;
                if skipped_in_a_row < MAX_SKIPPED_IN_A_ROW {
                    observer.message(&format!(
                        "step {}: the loss is {loss}; batch skipped without an update ({})",
                        state.step + 1,
                        image_files(&dataset, &batch_indices).join(", ")
                    ));
                    continue;
                }
                // Too many in a row: no update, and the run stops below as without `skip`.
            }
            loss
        } else {
            model = optim.step(lr, model, accumulator.grads());
            read_mean(losses)
        };
        if let Some(message) = medddpm_kernels::device_error() {
            return Err(TrainError::Device {
                during: format!("training stopped at step {}", state.step + 1),
                message,
            });
        }
        if !loss.is_finite() {
            return Err(diverged(
                state.step + 1,
                loss,
                image_files(&dataset, &batch_indices),
                &last_checkpoint,
                run,
            )?);
        }
        let action = ema_schedule.action(state.step);
        if action != EmaAction::Skip {
            ema = update_ema(ema, &model.valid(), action);
        }
        state.step += 1;
        state.last_loss = loss;
        if first_loss.is_nan() {
            first_loss = loss;
        }
        if first_losses.len() < LOSS_WINDOW {
            first_losses.push(loss);
        }
        if last_losses.len() == LOSS_WINDOW {
            last_losses.pop_front();
        }
        last_losses.push_back(loss);

        // 4. Log.
        let session_s = session_start.elapsed().as_secs_f64();
        state.elapsed_s = elapsed_before + session_s;
        let m = StepMetrics {
            step: state.step,
            loss,
            lr,
            steps_per_s: (state.step - start_step) as f64 / session_s.max(1e-9),
            elapsed_s: state.elapsed_s,
        };
        metrics.write(&m)?;
        observer.step(&m);

        // 5. Checkpoint (and sample with the EMA weights) on the cadence and at the end.
        if state.step % settings.save_every == 0 || state.step == end_step {
            let path =
                run.write_checkpoint(&state, &config_toml, settings.keep_checkpoints, |dir| {
                    let mpk = |name: &str| dir.join(format!("{name}.mpk"));
                    save_record::<B, _>(model.clone().into_record(), &mpk(MODEL_FILE))?;
                    save_record::<B::InnerBackend, _>(ema.clone().into_record(), &mpk(EMA_FILE))?;
                    save_record::<B, _>(optim.to_record(), &mpk(OPTIMIZER_FILE))?;
                    Ok(())
                })?;
            observer.checkpoint(&path);
            last_checkpoint = Some(path);
            // A picture that cannot be drawn is not worth stopping a run for.
            let curve = run.root.join(crate::pictures::LOSS_CURVE_FILE);
            if let Err(e) = crate::pictures::loss_curve(&run.metrics_path(), &curve) {
                observer.message(&format!("loss curve not written: {e}"));
            }
            if settings.samples_per_checkpoint > 0 && state.step % settings.save_every == 0 {
                let ema_compute =
                    cast_compute_params(ema.clone(), options.compute.precision.compute_dtype());
                samples.extend(periodic_samples::<B::InnerBackend>(
                    config,
                    &dataset,
                    &ema_compute,
                    &schedule,
                    &state,
                    run,
                    device,
                    observer,
                )?);
            }
        }
    }

    let checkpoint = match last_checkpoint {
        Some(p) => p,
        None => run.latest_checkpoint()?.ok_or_else(|| {
            TrainError::checkpoint(&run.checkpoints(), "no checkpoint was written")
        })?,
    };
    Ok(TrainSummary {
        start_step,
        end_step: state.step,
        first_loss,
        last_loss: state.last_loss,
        first_mean_loss: mean(first_losses.iter()),
        last_mean_loss: mean(last_losses.iter()),
        loss_window: first_losses.len(),
        checkpoint,
        samples,
    })
}

/// The image files of the examples at `indices`.
fn image_files(dataset: &NiftiDataset, indices: &[usize]) -> Vec<String> {
    indices
        .iter()
        .filter_map(|&i| dataset.files(i))
        .flat_map(|(_, images)| images.into_iter().map(|p| p.display().to_string()))
        .collect()
}

/// Batches skipped in a row after which `on_non_finite_loss = "skip"` gives up.
const MAX_SKIPPED_IN_A_ROW: usize = 10;

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

/// A resumed run must build the network and the process its checkpoint was trained with (the
/// run's `config.toml` may change steps, learning rate and the like, not these).
fn check_same_network(config: &ExperimentConfig, ckpt: &Path) -> Result<(), TrainError> {
    let written = crate::checkpoint::read_config(ckpt)?;
    let differs = |section: &str, a: String, b: String| {
        TrainError::checkpoint(
            ckpt,
            format!(
                "was trained with another [{section}] than the run's config.toml says:\n  checkpoint: {a}\n  config:     {b}"
            ),
        )
    };
    if written.model != config.model {
        return Err(differs(
            "model",
            format!("{:?}", written.model),
            format!("{:?}", config.model),
        ));
    }
    if written.diffusion != config.diffusion {
        return Err(differs(
            "diffusion",
            format!("{:?}", written.diffusion),
            format!("{:?}", config.diffusion),
        ));
    }
    Ok(())
}

/// Mean of the values (NaN for none).
fn mean<'a>(values: impl ExactSizeIterator<Item = &'a f32>) -> f32 {
    let n = values.len();
    values.map(|&v| v as f64).sum::<f64>() as f32 / n as f32
}

/// The reference samples one volume with the EMA weights at every checkpoint; we sample the
/// first `samples_per_checkpoint` training masks, with a seed fixed per step so that samples of
/// successive checkpoints are comparable.
#[allow(clippy::too_many_arguments)]
fn periodic_samples<B: KernelBackend>(
    config: &ExperimentConfig,
    dataset: &NiftiDataset,
    ema: &UNet<B>,
    schedule: &CosineSchedule,
    state: &TrainState,
    run: &RunDir,
    device: &B::Device,
    observer: &mut dyn TrainObserver,
) -> Result<Vec<PathBuf>, TrainError> {
    let sampler = Sampler::new(schedule.clone(), &config.sampler)
        .map_err(|e| TrainError::Config {
            path: None,
            message: format!("[sampler]: {e}"),
        })?
        .with_prediction(config.diffusion.prediction);
    let dir = run.samples(state.step);
    std::fs::create_dir_all(&dir).map_err(|e| TrainError::io(&dir, e))?;
    let mut written = Vec::new();
    for i in 0..config.train.samples_per_checkpoint.min(dataset.len()) {
        let example = dataset.get(i)?;
        B::seed(device, config.train.seed ^ (i as u64) << 32);
        let cond = batch_tensor::<B>(std::slice::from_ref(&example), false, device);
        let total = sampler.num_steps();
        let x = sampler.sample(ema, cond, dataset.image_channels(), |done| {
            observer.sampling(done, total)
        });
        let values = x
            .into_data()
            .convert::<f32>()
            .to_vec::<f32>()
            .expect("f32 data");
        let reference = dataset.mask_volume(i)?;
        written.extend(write_sample(
            &dir,
            &format!("{}_sample-0", example.id),
            &values,
            &reference,
            &dataset.image_channel_names(),
        )?);
        // The first image channel beside the training image, mask outlined.
        let voxels = reference.voxel_count();
        let channel = dataset.image_channel_names().into_iter().next();
        let title = |what: &str| match &channel {
            Some(c) if dataset.image_channels() > 1 => format!("{what} ({c})"),
            _ => what.to_string(),
        };
        let image = reference.with_data(example.image[..voxels].to_vec())?;
        let sample = reference.with_data(values[..voxels].to_vec())?;
        let montage = dir.join(format!("{}_{}", example.id, crate::pictures::MONTAGE_FILE));
        let sampled = format!("EMA sample, step {}", state.step);
        match crate::pictures::sample_montage(
            &montage,
            &reference,
            Some((&title(&format!("training image {}", example.id)), &image)),
            &[(title(&sampled), sample)],
        ) {
            Ok(path) => written.push(path),
            Err(e) => observer.message(&format!("sample montage not written: {e}")),
        }
    }
    Ok(written)
}

struct MetricsLog {
    file: std::fs::File,
    path: PathBuf,
}

impl MetricsLog {
    /// Opens the log for appending, first dropping lines past `step`: after a crash the steps
    /// since the last checkpoint are trained again and must not appear twice.
    fn open(path: &Path, step: usize) -> Result<Self, TrainError> {
        if let Ok(text) = std::fs::read_to_string(path) {
            let kept: Vec<&str> = text
                .lines()
                .filter(|l| {
                    serde_json::from_str::<serde_json::Value>(l)
                        .ok()
                        .and_then(|v| v["step"].as_u64())
                        .is_some_and(|s| s as usize <= step)
                })
                .collect();
            let mut body = kept.join("\n");
            if !body.is_empty() {
                body.push('\n');
            }
            checkpoint::atomic_write(path, body.as_bytes())?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| TrainError::io(path, e))?;
        Ok(Self {
            file,
            path: path.to_path_buf(),
        })
    }

    fn write(&mut self, m: &StepMetrics) -> Result<(), TrainError> {
        use std::io::Write;
        let line = serde_json::to_string(m).expect("metrics serialise");
        writeln!(self.file, "{line}").map_err(|e| TrainError::io(&self.path, e))
    }
}

#[cfg(all(test, target_os = "linux"))]
mod full_disk {
    use burn::backend::Flex;
    use burn::module::Module;

    /// /dev/full fails every write with ENOSPC, as a full disk does.
    #[test]
    fn a_full_disk_is_named_as_such() {
        let unet = medddpm_unet::UNetConfig::tiny()
            .init::<Flex>(&Default::default())
            .unwrap();
        let path = std::path::Path::new("/dev/full");
        let err = super::save_record::<Flex, _>(unet.into_record(), path).unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("/dev/full") && message.contains("No space left on device"),
            "{message}"
        );
    }
}
