//! Data-parallel throughput: the trainer's optimizer steps on 1, 2, .., N devices, in samples
//! per second, and the scaling efficiency against one device (`medddpm bench --devices`).
//!
//! Each device count runs in a process of its own (so that it starts with every GPU's memory
//! free and a crash or running out of memory ends only that count), which trains the chosen
//! network on phantom heads of the benchmark's size with the real trainer
//! ([`medddpm_train::train_on`]): `batch` volumes per device and micro-batch,
//! one micro-batch per device and step (the effective batch grows with the devices, as it does
//! when a user adds GPUs to fill them), the EMA every 10 steps, no checkpoints until the last
//! step. A step's time runs from one logged step to the next, so it holds the backward passes,
//! the gradient average, Adam and the EMA.

mod child;
mod data;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use medddpm_backend::{BackendTask, RunEnv};
use medddpm_kernels::Launch;
use medddpm_train::{ReplicaLauncher, RunDir, SessionOptions, StepMetrics, TrainObserver};
use medddpm_unet::KernelAutodiffBackend;
use serde::{Deserialize, Serialize};

use crate::error::{Error, HostProfileError};
use crate::host_profile::HostProfile;
use crate::median;
use crate::options::Workload;

/// What `medddpm bench --devices` measures.
#[derive(Debug, Clone)]
pub struct ScalingOptions {
    /// Network, volume size, volumes per device and micro-batch (`batch`), and the training
    /// step's activation checkpointing.
    pub workload: Workload,
    /// Untimed optimizer steps after the first (which compiles and tunes).
    pub warmup: usize,
    /// Timed optimizer steps (the median is reported).
    pub steps: usize,
    /// Folder for `scaling.jsonl` (appended to) and the training runs (removed afterwards).
    pub out: PathBuf,
    /// Seed of weights, data order and noise.
    pub seed: u64,
    /// Sample the host's call stacks over each device count's timed steps
    /// (`host-profile-devices-N.folded` in `out`; needs the `host-profile` feature).
    pub host_profile: bool,
    /// Kill a device count's process after this many seconds.
    pub timeout_s: u64,
}

/// One device count's measurement.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScalingRecord {
    /// Devices trained on (the first `devices` of the list).
    pub devices: usize,
    /// Their indices.
    pub device_ids: Vec<usize>,
    /// How the gradients were averaged (`nccl`, `host`; `none` for one device, unless NCCL was
    /// asked for by name: a group of one).
    pub collective: String,
    /// Where the replicas ran: `processes` (one per device) or `threads` (of one process; also
    /// what a record without this field means: it predates launching processes).
    #[serde(default = "threads")]
    pub launch: String,
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
    /// How busy the host's threads were per timed step, summed over the devices' threads
    /// (divide by `devices` for one device's), where the backend counts them. With a process
    /// per device, the lead process's threads only.
    pub threads_ms: BTreeMap<String, f64>,
}

fn threads() -> String {
    "threads".into()
}

/// Makes the replica launcher for a run that [`RunEnv`] describes (the binary's).
pub type LauncherFor = Box<dyn Fn(&RunEnv) -> Box<dyn ReplicaLauncher>>;

/// Times every step the trainer logs. Over the timed steps it also counts how busy the host's
/// threads are and, if asked, samples their call stacks.
struct StepClock {
    start: Instant,
    marks: Vec<(f64, f32)>,
    /// Marks up to the first timed step's start (the first step and the warm-up steps').
    untimed: usize,
    /// Timed steps.
    timed: usize,
    profile_path: Option<PathBuf>,
    profile: Option<HostProfile>,
    /// What the timed steps left: the threads' counters, and how writing the profile went.
    threads_ms: BTreeMap<String, f64>,
    profile_result: Result<(), HostProfileError>,
}

impl TrainObserver for StepClock {
    fn step(&mut self, metrics: &StepMetrics) {
        self.marks
            .push((self.start.elapsed().as_secs_f64(), metrics.loss));
        if self.marks.len() == self.untimed {
            crate::threads::reset();
            if let Some(path) = &self.profile_path {
                match HostProfile::start(path) {
                    Ok(p) => self.profile = Some(p),
                    Err(e) => self.profile_result = Err(e),
                }
            }
        } else if self.marks.len() == self.untimed + self.timed {
            self.threads_ms = crate::threads::per_step(self.timed);
            if let Some(profile) = self.profile.take() {
                self.profile_result = profile.finish();
            }
        }
    }
}

/// One device count's measurement, in this process, as a task for
/// [`medddpm_backend::run_on`]: training on every device of the compute settings (with one
/// device, alone unless NCCL was asked for by name: then a group of one). The record is
/// written to [`record_path`].
pub struct ScalingTask(pub ScalingOptions, pub LauncherFor);

impl BackendTask for ScalingTask {
    type Output = ScalingRecord;
    type Error = Error;

    fn run<B: KernelAutodiffBackend>(
        self,
        device: B::Device,
        env: &RunEnv,
    ) -> Result<ScalingRecord, Error> {
        let o = &self.0;
        let devices = env.devices_like(&device);
        let record = measure::<B>(o, env, &devices, &*self.1)?;
        let path = record_path(&o.out, devices.len());
        let bytes = serde_json::to_vec(&record).map_err(|e| Error::Scaling(e.to_string()))?;
        medddpm_atomic::write(&path, &bytes)
            .map_err(|e| Error::Scaling(format!("{}: {e}", path.display())))?;
        Ok(record)
    }
}

/// Where the process measuring `devices` devices leaves its record.
pub fn record_path(out: &Path, devices: usize) -> PathBuf {
    out.join(format!("scaling-devices-{devices}.json"))
}

/// What [`run_scaling`] measured, and the device counts whose process failed.
#[derive(Debug, Clone)]
pub struct ScalingRun {
    /// The counts measured, in order.
    pub records: Vec<ScalingRecord>,
    /// The counts whose process failed (each reported on stderr as it happened).
    pub failed: Vec<usize>,
}

/// The measurement on the first 1, 2, .., `devices` devices, each count by `command` (this
/// program's command line for the whole measurement) with `--scaling-count K` added, in a
/// process of its own; the records, with the efficiency against one device, are appended to
/// `out/scaling.jsonl` as they come. A count whose process fails is reported and the next one
/// still runs.
pub fn run_scaling(
    options: &ScalingOptions,
    devices: usize,
    command: &[String],
) -> Result<ScalingRun, Error> {
    std::fs::create_dir_all(&options.out)
        .map_err(|e| Error::Scaling(format!("{}: {e}", options.out.display())))?;
    let mut records: Vec<ScalingRecord> = Vec::new();
    let mut failed = Vec::new();
    for k in 1..=devices {
        match child::measure_count(options, command, k) {
            Ok(mut record) => {
                record.efficiency = match records.first() {
                    Some(one) => record.samples_per_s / (k as f64 * one.samples_per_s),
                    None if k == 1 => 1.0,
                    None => f64::NAN,
                };
                log::info!(
                    "{k} device(s): {:.1} ms per step, {:.2} samples/s, efficiency {:.3}{}",
                    record.step_ms_median,
                    record.samples_per_s,
                    record.efficiency,
                    threads_line(&record)
                );
                append(&options.out.join("scaling.jsonl"), &record)?;
                records.push(record);
            }
            Err(e) => {
                log::error!("{k} device(s): failed: {e}");
                failed.push(k);
            }
        }
    }
    Ok(ScalingRun { records, failed })
}

/// One device count: a fresh run of warm-up plus timed steps.
fn measure<B: KernelAutodiffBackend>(
    o: &ScalingOptions,
    env: &RunEnv,
    devices: &[B::Device],
    launcher: &dyn Fn(&RunEnv) -> Box<dyn ReplicaLauncher>,
) -> Result<ScalingRecord, Error> {
    let ids = &env.devices;
    let k = devices.len();
    let config = data::experiment(o, k)?;
    let run_dir = o.out.join(format!("scaling-run-{k}"));
    let _ = std::fs::remove_dir_all(&run_dir);
    let collective = env.collective;
    let options = SessionOptions {
        compute: env.compute(),
        collective,
        ..Default::default()
    };
    let mut clock = StepClock {
        start: Instant::now(),
        marks: Vec::new(),
        untimed: 1 + o.warmup,
        timed: o.steps,
        profile_path: o
            .host_profile
            .then(|| o.out.join(format!("host-profile-devices-{k}.folded"))),
        profile: None,
        threads_ms: BTreeMap::new(),
        profile_result: Ok(()),
    };
    // `launch` resolves to threads for one device.
    let processes = env.launch == Launch::Processes;
    let run = RunDir::new(&run_dir);
    match processes {
        true => medddpm_train::train_processes::<B>(
            &config,
            &run,
            &options,
            (ids, &devices[0]),
            &*launcher(env),
            &mut clock,
        ),
        false => medddpm_train::train_on::<B>(&config, &run, &options, devices, &mut clock),
    }
    .map_err(|e| Error::Scaling(format!("training on {k} device(s): {e}")))?;
    clock.profile_result?;
    let threads_ms = clock.threads_ms;
    let _ = std::fs::remove_dir_all(&run_dir);
    let marks = &clock.marks;
    let timed = &marks[marks.len() - o.steps - 1..];
    let step_ms: Vec<f64> = timed.windows(2).map(|w| (w[1].0 - w[0].0) * 1e3).collect();
    let step_ms_median = median(&step_ms);
    let samples_per_s = (k * o.workload.batch) as f64 / (step_ms_median / 1e3);
    Ok(ScalingRecord {
        devices: k,
        device_ids: ids.to_vec(),
        collective: if k == 1 && collective != medddpm_kernels::Collective::Nccl {
            "none".into()
        } else {
            format!("{collective:?}").to_lowercase()
        },
        launch: if processes { "processes" } else { "threads" }.into(),
        backend: env.backend.to_string(),
        precision: env.precision.to_string(),
        layout: env.layout.to_string(),
        conv_engine: env.conv_engine.to_string(),
        model: o.workload.model.name().into(),
        size: o.workload.size,
        batch_per_device: o.workload.batch,
        steps: o.steps,
        step_ms_median,
        step_ms,
        samples_per_s,
        // Against itself; the parent process sets it against its one-device record.
        efficiency: 1.0,
        first_step_s: marks.first().map(|m| m.0).unwrap_or(f64::NAN),
        last_loss: marks.last().map(|m| m.1).unwrap_or(f32::NAN),
        threads_ms,
    })
}

/// How busy one device's host threads were per step, where counted.
fn threads_line(r: &ScalingRecord) -> String {
    // With a process per device the counts are the lead process's: one device's already.
    let per = if r.launch == "processes" {
        1
    } else {
        r.devices
    };
    let t = |k: &str| r.threads_ms.get(k).map(|v| v / per as f64);
    match (t("fusion thread running"), t("device thread running")) {
        (Some(f), Some(d)) => format!(
            "; per device and step: fusion thread running {f:.1} ms, device thread running {d:.1} ms"
        ),
        _ => String::new(),
    }
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
