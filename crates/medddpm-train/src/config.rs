//! The experiment configuration: one TOML file, deserialised into these structs, whose defaults
//! equal the reference's training scripts.

use std::path::Path;

use medddpm_diffusion::{LossType, ScheduleConfig};
use medddpm_unet::UNetConfig;
use serde::{Deserialize, Serialize};

use crate::data::DataConfig;
use crate::TrainError;
use medddpm_unet::ComputeConfig;

/// A whole experiment: network, diffusion, data, optimisation and sampling settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct ExperimentConfig {
    /// The U-Net (defaults: the released whole-head model).
    pub model: UNetConfig,
    /// Noise schedule and loss.
    pub diffusion: DiffusionConfig,
    /// Where the training pairs come from and how they are prepared.
    pub data: DataConfig,
    /// Optimisation, EMA and checkpoint cadence.
    pub train: TrainSettings,
    /// Precision, activation layout and convolution engine, if the experiment fixes them
    /// (`medddpm train`'s switches win over these).
    #[serde(skip_serializing_if = "is_default_compute")]
    pub compute: ComputeConfig,
}

fn is_default_compute(c: &ComputeConfig) -> bool {
    *c == ComputeConfig::default()
}

/// Schedule and loss.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DiffusionConfig {
    /// Number of diffusion steps T (250 in every reference script).
    pub timesteps: usize,
    /// Noise-prediction loss (`l1` in every reference script).
    pub loss: LossType,
}

impl Default for DiffusionConfig {
    fn default() -> Self {
        Self {
            timesteps: ScheduleConfig::default().timesteps,
            loss: LossType::L1,
        }
    }
}

/// Optimisation settings. Defaults are the reference's (`train.py`, `trainer.py`,
/// `scripts/train.sh`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainSettings {
    /// Optimizer steps (the reference's `--epochs`, which counts optimizer steps).
    pub steps: usize,
    /// Adam learning rate, constant.
    pub lr: f64,
    /// Adam epsilon; PyTorch's 1e-8 (burn's own default is 1e-5).
    pub adam_epsilon: f32,
    /// Adam beta1.
    pub adam_beta1: f32,
    /// Adam beta2.
    pub adam_beta2: f32,
    /// Volumes per micro-batch.
    pub batch_size: usize,
    /// Micro-batches per optimizer step.
    pub grad_accum: usize,
    /// The reference divides the (already averaged) loss by the batch size once more, which
    /// shrinks the effective learning rate by 1/B for B > 1. Kept by default for fidelity.
    pub reference_batch_scaling: bool,
    /// EMA decay.
    pub ema_decay: f64,
    /// Update the EMA every this many optimizer steps.
    pub ema_every: usize,
    /// Before this step the EMA is overwritten with the live weights instead of averaged.
    pub ema_start: usize,
    /// Write a checkpoint every this many optimizer steps (and at the end).
    pub save_every: usize,
    /// With each checkpoint, sample this many volumes with the EMA weights (the reference
    /// samples one); 0 turns periodic samples off.
    pub samples_per_checkpoint: usize,
    /// Keep only the newest this many checkpoints (0 keeps all).
    pub keep_checkpoints: usize,
    /// Seed of every random choice of the run (data order, timesteps, noise).
    pub seed: u64,
}

impl Default for TrainSettings {
    fn default() -> Self {
        Self {
            steps: 100_000,
            lr: 1e-5,
            adam_epsilon: 1e-8,
            adam_beta1: 0.9,
            adam_beta2: 0.999,
            batch_size: 1,
            grad_accum: 2,
            reference_batch_scaling: true,
            ema_decay: 0.995,
            ema_every: 10,
            ema_start: 2000,
            save_every: 1000,
            samples_per_checkpoint: 1,
            keep_checkpoints: 5,
            seed: 0,
        }
    }
}

impl ExperimentConfig {
    /// Reads an experiment file.
    pub fn from_file(path: &Path) -> Result<Self, TrainError> {
        let text = std::fs::read_to_string(path).map_err(|e| TrainError::io(path, e))?;
        Self::from_toml(&text).map_err(|message| TrainError::Config {
            path: Some(path.to_path_buf()),
            message,
        })
    }

    /// Parses TOML text.
    pub fn from_toml(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    /// The resolved configuration as TOML (what a run folder keeps as `config.toml`).
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("every field serialises")
    }

    /// Checks what would fail later, so a run fails before it starts.
    pub fn validate(&self) -> Result<(), TrainError> {
        let bad = |message: String| {
            Err(TrainError::Config {
                path: None,
                message,
            })
        };
        self.model.validate().map_err(|e| TrainError::Config {
            path: None,
            message: e.to_string(),
        })?;
        let t = &self.train;
        if t.batch_size == 0 || t.grad_accum == 0 {
            return bad("train.batch_size and train.grad_accum must be at least 1".into());
        }
        if t.ema_every == 0 || t.save_every == 0 {
            return bad("train.ema_every and train.save_every must be at least 1".into());
        }
        if !(0.0..=1.0).contains(&t.ema_decay) {
            return bad(format!(
                "train.ema_decay must be in [0, 1], got {}",
                t.ema_decay
            ));
        }
        if !(t.lr > 0.0) {
            return bad(format!("train.lr must be positive, got {}", t.lr));
        }
        if self.diffusion.timesteps == 0 {
            return bad("diffusion.timesteps must be at least 1".into());
        }
        let grid = self.data.grid;
        let d = self.model.size_divisor();
        if grid.iter().any(|&s| s == 0 || s % d != 0) {
            return bad(format!(
                "data.grid {grid:?} does not fit the U-Net: every size must be a multiple of {d} ({} levels)",
                self.model.channel_mult.len()
            ));
        }
        Ok(())
    }
}
