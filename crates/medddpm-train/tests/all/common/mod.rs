//! Shared helpers of the training tests: a tiny experiment on phantoms and weight comparison.
#![allow(dead_code, unused_imports)]

use std::path::Path;

use burn::backend::Flex;
use burn::module::{Module, ModuleVisitor, Param};
use burn::record::Recorder;
use burn::tensor::{backend::Backend, Tensor};
use medddpm_train::data::{DataConfig, DataSource};
use medddpm_train::{ExperimentConfig, TrainSettings};
use medddpm_unet::{UNet, UNetConfig};

pub use medddpm_testdata::shared_dir;

/// One test at a time in this binary: every test takes it first. The CPU backend has one
/// random generator for the process, which a test drawing from it (a model's initial weights,
/// sampling noise) would take from another test's seeded session, and burn 0.21's autodiff can
/// lose a gradient when another thread's backward pass runs at the same moment
/// (tracel-ai/burn#5573). Two runs of the workspace's tests failed comparisons of sessions that
/// way (channels-last against channels-first, f16, checkpointing).
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// [`one_at_a_time`] and a fresh temporary folder: how every test here that writes starts.
pub fn serial_tempdir() -> (std::sync::MutexGuard<'static, ()>, tempfile::TempDir) {
    let serial = one_at_a_time();
    (serial, tempfile::tempdir().unwrap())
}

/// [`serial_tempdir`] with a [`tiny_experiment`] on `count` phantoms in it.
pub fn tiny_setup(
    count: usize,
) -> (
    std::sync::MutexGuard<'static, ()>,
    tempfile::TempDir,
    ExperimentConfig,
) {
    let (serial, tmp) = serial_tempdir();
    let config = tiny_experiment(&tmp.path().join("phantoms"), count);
    (serial, tmp, config)
}

/// Records every step's loss.
pub struct Losses(pub Vec<f32>);

impl medddpm_train::TrainObserver for Losses {
    fn step(&mut self, metrics: &medddpm_train::StepMetrics) {
        self.0.push(metrics.loss);
    }
}

/// A two-level U-Net on 16^3 phantoms: a training step takes well under a second on a CPU.
pub fn tiny_experiment(phantom_dir: &Path, count: usize) -> ExperimentConfig {
    let mut config = ExperimentConfig {
        model: UNetConfig {
            model_channels: 8,
            num_groups: 8,
            channel_mult: vec![1, 2],
            attention_resolutions: vec![],
            image_size: 16,
            ..UNetConfig::whole_head()
        },
        data: DataConfig::new(DataSource::Phantom {
            dir: phantom_dir.to_path_buf(),
            count,
            size: [16, 16, 16],
            seed: 3,
        }),
        train: TrainSettings {
            steps: 4,
            lr: 1e-3,
            batch_size: 1,
            grad_accum: 2,
            ema_every: 1,
            ema_start: 2,
            save_every: 2,
            samples_per_checkpoint: 0,
            keep_checkpoints: 0,
            seed: 11,
            ..Default::default()
        },
        ..Default::default()
    };
    config.diffusion.timesteps = 50;
    config
}

struct Flatten {
    values: Vec<Vec<f32>>,
}

impl<B: Backend> ModuleVisitor<B> for Flatten {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.values.push(
            param
                .val()
                .into_data()
                .convert::<f32>()
                .to_vec::<f32>()
                .unwrap(),
        );
    }
}

/// ||a - b|| / ||b|| over all weights. (Not the largest difference: Adam turns a rounding
/// difference in a near-zero gradient into a full learning-rate step, so single weights can
/// move by ~lr while the network as a whole stays put.)
pub fn rel_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f64 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (x, y) in a.iter().flatten().zip(b.iter().flatten()) {
        num += ((x - y) as f64).powi(2);
        den += (*y as f64).powi(2);
    }
    (num / den).sqrt()
}

/// Every parameter of a saved module file (model.mpk or ema.mpk), in module order.
pub fn saved_weights(config: &ExperimentConfig, file: &Path) -> Vec<Vec<f32>> {
    let device = Default::default();
    let record = burn::record::NamedMpkFileRecorder::<burn::record::FullPrecisionSettings>::new()
        .load(file.to_path_buf(), &device)
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let unet: UNet<Flex> = config
        .model
        .init::<Flex>(&device)
        .unwrap()
        .load_record(record);
    let mut f = Flatten { values: Vec::new() };
    unet.visit(&mut f);
    f.values
}

/// The value of `key` in every line of the run's metrics.jsonl.
pub fn logged<T: serde::de::DeserializeOwned>(run: &medddpm_train::RunDir, key: &str) -> Vec<T> {
    std::fs::read_to_string(run.metrics_path())
        .unwrap()
        .lines()
        .map(|l| {
            let line: serde_json::Value = serde_json::from_str(l).unwrap();
            serde_json::from_value(line[key].clone()).unwrap()
        })
        .collect()
}

/// One training session of `config` in `run` on the CPU backend.
pub fn session(
    config: &ExperimentConfig,
    run: &medddpm_train::RunDir,
    resume: bool,
    max_steps: Option<usize>,
) -> Result<medddpm_train::TrainSummary, medddpm_train::TrainError> {
    let options = medddpm_train::SessionOptions {
        resume,
        max_steps,
        ..Default::default()
    };
    session_with(config, run, &options)
}

/// One training session with explicit options, on the CPU backend.
pub fn session_with(
    config: &ExperimentConfig,
    run: &medddpm_train::RunDir,
    options: &medddpm_train::SessionOptions,
) -> Result<medddpm_train::TrainSummary, medddpm_train::TrainError> {
    medddpm_train::train::<burn::backend::Autodiff<Flex>>(
        config,
        run,
        options,
        &Default::default(),
        &mut medddpm_train::Quiet,
    )
}
