//! Data-parallel throughput: the trainer's optimizer steps on 1, 2, .., N devices, in samples
//! per second, and the scaling efficiency against one device (`medddpm bench --devices`).
//!
//! Each device count trains the chosen network on phantom heads of the benchmark's size with
//! the real trainer ([`medddpm_train::train_on`]): `batch` volumes per device and micro-batch,
//! one micro-batch per device and step (the effective batch grows with the devices, as it does
//! when a user adds GPUs to fill them), the EMA every 10 steps, no checkpoints until the last
//! step. A step's time runs from one logged step to the next, so it holds the backward passes,
//! the gradient average, Adam and the EMA.

use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::prelude::DeviceOps;
use burn::tensor::backend::DeviceId;
use medddpm_backend::{BackendTask, RunEnv};
use medddpm_train::data::{DataConfig, DataSource};
use medddpm_train::{ExperimentConfig, RunDir, SessionOptions, StepMetrics, TrainObserver};
use medddpm_unet::{ActivationCheckpointing, KernelAutodiffBackend};
use serde::Serialize;

use crate::error::Error;
use crate::{median, Model};

/// What `medddpm bench --devices` measures.
#[derive(Debug, Clone)]
pub struct ScalingOptions {
    /// Network.
    pub model: Model,
    /// Volume size (d, h, w).
    pub size: [usize; 3],
    /// Volumes per device and micro-batch.
    pub batch: usize,
    /// Activation checkpointing of the training step.
    pub activation_checkpointing: ActivationCheckpointing,
    /// Untimed optimizer steps after the first (which compiles and tunes).
    pub warmup: usize,
    /// Timed optimizer steps (the median is reported).
    pub steps: usize,
    /// Folder for `scaling.jsonl` (appended to) and the training runs (removed afterwards).
    pub out: PathBuf,
    /// Seed of weights, data order and noise.
    pub seed: u64,
}

/// One device count's measurement.
#[derive(Debug, Clone, Serialize)]
pub struct ScalingRecord {
    /// Devices trained on (the first `devices` of the list).
    pub devices: usize,
    /// Their indices.
    pub device_ids: Vec<usize>,
    /// How the gradients were averaged (`nccl`, `host`; `none` for one device, unless NCCL was
    /// asked for by name: a group of one).
    pub collective: String,
    /// Backend, precision, layout and convolution engine.
    pub backend: String,
    /// See `backend`.
    pub precision: String,
    /// See `backend`.
    pub layout: String,
    /// See `backend`.
    pub conv_engine: String,
    /// Network, volume size and volumes per device.
    pub model: String,
    /// See `model`.
    pub size: [usize; 3],
    /// See `model`.
    pub batch_per_device: usize,
    /// Timed steps.
    pub steps: usize,
    /// Median optimizer-step time.
    pub step_ms_median: f64,
    /// Every timed step.
    pub step_ms: Vec<f64>,
    /// Training volumes per second at the median step time.
    pub samples_per_s: f64,
    /// `samples_per_s` over `devices` times the one-device figure of this run (1 for one
    /// device).
    pub efficiency: f64,
    /// Seconds from the start of the session to its first logged step (compilation, tuning).
    pub first_step_s: f64,
    /// The loss of the last step (all device counts see the same examples per device).
    pub last_loss: f32,
}

/// Times every step the trainer logs.
struct StepClock {
    start: Instant,
    marks: Vec<(f64, f32)>,
}

impl TrainObserver for StepClock {
    fn step(&mut self, metrics: &StepMetrics) {
        self.marks
            .push((self.start.elapsed().as_secs_f64(), metrics.loss));
    }
}

/// The device-scaling measurement as a task for [`medddpm_backend::run_on`] (the devices and
/// the collective come from the compute settings).
pub struct ScalingTask(pub ScalingOptions);

impl BackendTask for ScalingTask {
    type Output = Vec<ScalingRecord>;
    type Error = Error;

    fn run<B: KernelAutodiffBackend>(
        self,
        device: B::Device,
        env: &RunEnv,
    ) -> Result<Vec<ScalingRecord>, Error> {
        let o = &self.0;
        let type_id = device.to_id().type_id;
        let devices: Vec<B::Device> = env
            .devices
            .iter()
            .map(|&i| B::Device::from_id(DeviceId::new(type_id, i as u16)))
            .collect();
        let mut records: Vec<ScalingRecord> = Vec::new();
        for k in 1..=devices.len() {
            let record = measure::<B>(o, env, &devices[..k], &env.devices[..k], records.first())?;
            eprintln!(
                "{k} device(s): {:.1} ms per step, {:.2} samples/s, efficiency {:.3}",
                record.step_ms_median, record.samples_per_s, record.efficiency
            );
            append(&o.out.join("scaling.jsonl"), &record)?;
            records.push(record);
        }
        Ok(records)
    }
}

/// One device count: a fresh run of warm-up plus timed steps.
fn measure<B: KernelAutodiffBackend>(
    o: &ScalingOptions,
    env: &RunEnv,
    devices: &[B::Device],
    ids: &[usize],
    one: Option<&ScalingRecord>,
) -> Result<ScalingRecord, Error> {
    let k = devices.len();
    let config = experiment(o, k);
    let run_dir = o.out.join(format!("scaling-run-{k}"));
    let _ = std::fs::remove_dir_all(&run_dir);
    let options = SessionOptions {
        compute: env.compute(),
        collective: env.collective,
        ..Default::default()
    };
    let mut clock = StepClock {
        start: Instant::now(),
        marks: Vec::new(),
    };
    medddpm_train::train_on::<B>(
        &config,
        &RunDir::new(&run_dir),
        &options,
        devices,
        &mut clock,
    )
    .map_err(|e| Error::Scaling(format!("training on {k} device(s): {e}")))?;
    let _ = std::fs::remove_dir_all(&run_dir);
    let marks = &clock.marks;
    let timed = &marks[marks.len() - o.steps - 1..];
    let step_ms: Vec<f64> = timed.windows(2).map(|w| (w[1].0 - w[0].0) * 1e3).collect();
    let step_ms_median = median(&step_ms);
    let samples_per_s = (k * o.batch) as f64 / (step_ms_median / 1e3);
    let efficiency = match one {
        Some(one) => samples_per_s / (k as f64 * one.samples_per_s),
        None => 1.0,
    };
    Ok(ScalingRecord {
        devices: k,
        device_ids: ids.to_vec(),
        collective: if k == 1 && env.collective != medddpm_kernels::Collective::Nccl {
            "none".into()
        } else {
            format!("{:?}", env.collective).to_lowercase()
        },
        backend: env.backend.to_string(),
        precision: env.precision.to_string(),
        layout: env.layout.to_string(),
        conv_engine: env.conv_engine.to_string(),
        model: o.model.name().into(),
        size: o.size,
        batch_per_device: o.batch,
        steps: o.steps,
        step_ms_median,
        step_ms,
        samples_per_s,
        efficiency,
        first_step_s: marks.first().map(|m| m.0).unwrap_or(f64::NAN),
        last_loss: marks.last().map(|m| m.1).unwrap_or(f32::NAN),
    })
}

/// The network on phantoms of the benchmark's size; one micro-batch per device and step.
fn experiment(o: &ScalingOptions, devices: usize) -> ExperimentConfig {
    let mut model = o.model.config();
    model.image_size = o.size[0];
    let mut config = ExperimentConfig {
        model,
        data: DataConfig::new(DataSource::Phantom {
            dir: o.out.join(format!(
                "scaling-phantoms-{}",
                o.size.map(|n| n.to_string()).join("x")
            )),
            count: 4,
            size: o.size,
            seed: o.seed,
        }),
        ..Default::default()
    };
    let t = &mut config.train;
    t.steps = 1 + o.warmup + o.steps;
    t.save_every = t.steps;
    t.samples_per_checkpoint = 0;
    t.batch_size = o.batch;
    t.grad_accum = devices;
    t.seed = o.seed;
    t.activation_checkpointing = o.activation_checkpointing;
    config
}

fn append(path: &Path, record: &ScalingRecord) -> Result<(), Error> {
    use std::io::Write;
    let line = serde_json::to_string(record).map_err(|e| Error::Scaling(e.to_string()))?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::Scaling(format!("{}: {e}", dir.display())))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| Error::Scaling(format!("{}: {e}", path.display())))?;
    writeln!(f, "{line}").map_err(|e| Error::Scaling(format!("{}: {e}", path.display())))
}
