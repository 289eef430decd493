//! The experiment configuration: one TOML file, deserialised into these structs, whose defaults
//! equal the reference's training scripts.

use std::path::Path;

use medddpm_diffusion::{LossType, Prediction, SamplerConfig, ScheduleConfig};
use medddpm_unet::{ActivationCheckpointing, UNetConfig};
use serde::{Deserialize, Serialize};

use crate::data::{DataConfig, DataSource};
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
    /// The reverse process of the periodic samples and the default of `medddpm sample` for
    /// this run's checkpoints (default: the reference's ancestral DDPM over every timestep).
    pub sampler: SamplerConfig,
}

fn is_default_compute(c: &ComputeConfig) -> bool {
    *c == ComputeConfig::default()
}

/// Largest `diffusion.timesteps` accepted (the reference uses 250; DDPM papers 1000-4000).
pub const MAX_TIMESTEPS: usize = 100_000;

/// Schedule, loss and prediction target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DiffusionConfig {
    /// Number of diffusion steps T (250 in every reference script).
    pub timesteps: usize,
    /// Noise-prediction loss (`l1` in every reference script).
    pub loss: LossType,
    /// What the network predicts: `epsilon` (the noise, the reference's and its weights') or
    /// `v` (the velocity; short runs learn a volume's overall level better with it).
    pub prediction: Prediction,
}

impl Default for DiffusionConfig {
    fn default() -> Self {
        Self {
            timesteps: ScheduleConfig::default().timesteps,
            loss: LossType::L1,
            prediction: Prediction::Epsilon,
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
    /// Adam learning rate (the peak, with a schedule other than `constant`).
    pub lr: f64,
    /// How the learning rate moves over the run: `constant` (the reference's) or `cosine`
    /// (linear warm-up over `warmup_steps`, then half a cosine down to zero at `steps`), which
    /// lets a short run use a high rate early and still settle.
    pub lr_schedule: LrSchedule,
    /// Steps of linear warm-up from lr / warmup_steps to lr (0: none).
    pub warmup_steps: usize,
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
    /// What a NaN or infinite loss does: `stop` the run (the default; the error names the
    /// step, the batch's files and the last checkpoint) or `skip` the batch (no update; the
    /// run stops after 10 skipped batches in a row). With `skip` each step's loss is read
    /// before its update, which costs the GPU its overlap of one step with the next.
    pub on_non_finite_loss: NonFiniteLoss,
    /// Activations the backward pass recomputes instead of keeping: `none` (the default; the
    /// fastest step), `norms` (the ResBlocks' GroupNorm + SiLU outputs: about a third of the
    /// activation memory for one more normalisation pass each; results bit-identical) or
    /// `blocks` (keep only each U-Net block's output and run every block once more in the
    /// backward pass: most of the activation memory for about one more forward pass of time;
    /// results equal `none`'s up to the order of a few gradient sums).
    pub activation_checkpointing: ActivationCheckpointing,
    /// f16 training only (`--precision f16`): the loss scale a run starts with (PyTorch's
    /// `GradScaler`: 65536). The loss is multiplied by it before the backward pass, so that
    /// gradients stay above f16's smallest numbers, and the gradients are divided by it in
    /// f32 before Adam; a step whose gradients overflow is skipped and the scale halved.
    pub loss_scale: f64,
    /// Optimizer steps without an overflow after which the loss scale doubles (`GradScaler`:
    /// 2000).
    pub loss_scale_growth_interval: usize,
    /// Write TensorBoard event files into the run folder beside `metrics.jsonl` (each step's
    /// scalars, the periodic samples' slices, the settings), so `tensorboard --logdir runs/`
    /// shows the run. Only the process that writes `metrics.jsonl` writes them.
    pub tensorboard: bool,
    /// Log each step's gradient norm (the global L2 norm of what Adam takes) in
    /// `metrics.jsonl` and TensorBoard. It costs a reduction per weight tensor each step on
    /// the lead device, read with the loss.
    pub grad_norm: bool,
}

/// See [`TrainSettings::on_non_finite_loss`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NonFiniteLoss {
    /// Stop the run.
    #[default]
    Stop,
    /// Skip the batch without updating the weights.
    Skip,
}

impl Default for TrainSettings {
    fn default() -> Self {
        Self {
            steps: 100_000,
            lr: 1e-5,
            lr_schedule: LrSchedule::Constant,
            warmup_steps: 0,
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
            on_non_finite_loss: NonFiniteLoss::Stop,
            activation_checkpointing: ActivationCheckpointing::None,
            loss_scale: 65536.0,
            loss_scale_growth_interval: 2000,
            tensorboard: true,
            grad_norm: true,
        }
    }
}

/// See [`TrainSettings::lr_schedule`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LrSchedule {
    /// The same rate at every step.
    #[default]
    Constant,
    /// Warm-up, then cosine decay to zero at the run's last step.
    Cosine,
}

impl TrainSettings {
    /// The learning rate of optimizer step `step` (0-based), a function of the step alone so
    /// a resumed run continues on the same curve.
    pub fn lr_at(&self, step: usize) -> f64 {
        if step < self.warmup_steps {
            return self.lr * (step + 1) as f64 / self.warmup_steps as f64;
        }
        match self.lr_schedule {
            LrSchedule::Constant => self.lr,
            LrSchedule::Cosine => {
                let span = self.steps.saturating_sub(self.warmup_steps).max(1) as f64;
                let progress = ((step - self.warmup_steps) as f64 / span).min(1.0);
                self.lr * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos())
            }
        }
    }
}

/// Why an experiment's TOML text does not read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigTextError {
    /// Not TOML, or a field of the wrong kind or name.
    #[error("{0}")]
    Toml(#[from] toml::de::Error),
    /// It sets nothing.
    #[error("the experiment sets nothing (an empty file?): start from one of experiments/*.toml, or name a built-in experiment")]
    Empty,
}

impl ExperimentConfig {
    /// The experiment of the reference's released whole-head model (`model_128.pt`): its
    /// network, T = 250, and the whole-head layout's data defaults (128^3, whole-head labels).
    pub fn reference_whole_head() -> Self {
        Self {
            model: UNetConfig::whole_head(),
            data: DataConfig::new(DataSource::WholeHead {
                mask_dir: "dataset/whole_head/mask".into(),
                image_dir: "dataset/whole_head/image".into(),
            }),
            ..Default::default()
        }
    }

    /// The experiment of the reference's released BraTS model (`model_brats.pt`): its network
    /// (8 -> 4 channels), T = 250, and the BraTS layout's data defaults (192x192x144, BraTS
    /// labels).
    pub fn reference_brats() -> Self {
        Self {
            model: UNetConfig::brats(),
            data: DataConfig::new(DataSource::Brats {
                root: "dataset/brats2021".into(),
            }),
            ..Default::default()
        }
    }

    /// Reads an experiment file.
    pub fn from_file(path: &Path) -> Result<Self, TrainError> {
        let text = std::fs::read_to_string(path).map_err(|e| TrainError::io(path, e))?;
        Self::from_toml(&text).map_err(|e| TrainError::Config {
            path: Some(path.to_path_buf()),
            message: e.to_string(),
        })
    }

    /// Parses TOML text.
    pub fn from_toml(text: &str) -> Result<Self, ConfigTextError> {
        let table: toml::Table = toml::from_str(text)?;
        if table.is_empty() {
            // Every field has a default, so an empty file would quietly mean the 40M-parameter
            // whole-head model for 100,000 steps on data in the default folders.
            return Err(ConfigTextError::Empty);
        }
        Ok(toml::from_str(text)?)
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
        // Written so that NaN fails too.
        if t.lr.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
            return bad(format!("train.lr must be positive, got {}", t.lr));
        }
        if !(t.loss_scale.is_finite() && t.loss_scale >= 1.0) || t.loss_scale_growth_interval == 0 {
            return bad(format!(
                "train.loss_scale must be a finite number of at least 1 and \
                 train.loss_scale_growth_interval at least 1, got {} and {}",
                t.loss_scale, t.loss_scale_growth_interval
            ));
        }
        // The schedule holds a dozen f64 buffers of this length (the reference uses 250).
        if !(1..=MAX_TIMESTEPS).contains(&self.diffusion.timesteps) {
            return bad(format!(
                "diffusion.timesteps must be between 1 and {MAX_TIMESTEPS}, got {}",
                self.diffusion.timesteps
            ));
        }
        // The sampler section fails here, not after hours of training at the first checkpoint.
        medddpm_diffusion::Sampler::new(
            medddpm_diffusion::CosineSchedule::new(self.diffusion.timesteps),
            &self.sampler,
        )
        .map_err(|e| TrainError::Config {
            path: None,
            message: format!("[sampler]: {e}"),
        })?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lr_schedules() {
        let constant = TrainSettings {
            lr: 1e-3,
            steps: 100,
            ..Default::default()
        };
        assert_eq!(constant.lr_at(0), 1e-3);
        assert_eq!(constant.lr_at(99), 1e-3);

        let cosine = TrainSettings {
            lr: 1e-3,
            steps: 110,
            warmup_steps: 10,
            lr_schedule: LrSchedule::Cosine,
            ..Default::default()
        };
        // Warm-up: 1/10, 2/10, ... of the peak; the peak at the first step after it.
        assert!((cosine.lr_at(0) - 1e-4).abs() < 1e-15);
        assert!((cosine.lr_at(9) - 1e-3).abs() < 1e-15);
        assert!((cosine.lr_at(10) - 1e-3).abs() < 1e-15);
        // Half-way through the decay: half the peak; the last step close to zero.
        assert!((cosine.lr_at(60) - 5e-4).abs() < 1e-12);
        assert!(cosine.lr_at(109) < 1e-6 && cosine.lr_at(109) > 0.0);
        assert_eq!(cosine.lr_at(500), 0.0);
    }

    #[test]
    fn sampler_section_is_read_and_checked() {
        let c = ExperimentConfig::from_toml(
            "[sampler]\nkind = \"dpm-solver++\"\nsteps = 25\n[train]\nlr_schedule = \"cosine\"\n",
        )
        .unwrap();
        assert_eq!(c.sampler.kind, medddpm_diffusion::SamplerKind::DpmSolver);
        assert_eq!(c.sampler.steps, Some(25));
        assert_eq!(c.train.lr_schedule, LrSchedule::Cosine);
        let round = ExperimentConfig::from_toml(&c.to_toml()).unwrap();
        assert_eq!(round, c);

        let mut bad = c.clone();
        bad.sampler.steps = Some(1000);
        let err = bad.validate().unwrap_err().to_string();
        assert!(err.contains("[sampler]"), "{err}");
    }

    #[test]
    fn activation_checkpointing_is_read_and_defaults_to_none() {
        let c = ExperimentConfig::from_toml("[train]\nactivation_checkpointing = \"blocks\"\n")
            .unwrap();
        assert_eq!(
            c.train.activation_checkpointing,
            ActivationCheckpointing::Blocks
        );
        assert_eq!(ExperimentConfig::from_toml(&c.to_toml()).unwrap(), c);
        let plain = ExperimentConfig::from_toml("[train]\nsteps = 3\n").unwrap();
        assert_eq!(
            plain.train.activation_checkpointing,
            ActivationCheckpointing::None
        );
        let norms =
            ExperimentConfig::from_toml("[train]\nactivation_checkpointing = \"norms\"\n").unwrap();
        assert_eq!(
            norms.train.activation_checkpointing,
            ActivationCheckpointing::Norms
        );
        let err = ExperimentConfig::from_toml("[train]\nactivation_checkpointing = \"all\"\n");
        assert!(err.is_err());
        // The commented line of the experiment files, uncommented.
        for file in ["brats-192.toml", "whole-head-128.toml"] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../experiments")
                .join(file);
            let text = std::fs::read_to_string(&path).unwrap();
            let text = text.replace(
                "# activation_checkpointing = \"blocks\"",
                "activation_checkpointing = \"blocks\"",
            );
            let c = ExperimentConfig::from_toml(&text).unwrap();
            assert_eq!(
                c.train.activation_checkpointing,
                ActivationCheckpointing::Blocks,
                "{file}"
            );
        }
    }
}
