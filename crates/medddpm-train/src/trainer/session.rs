//! Opening a training session: the data set checked against the network, then the model, its
//! EMA and Adam either fresh (initialised from the run's seed) or from the run's latest
//! checkpoint.

use std::path::{Path, PathBuf};

use burn::module::{AutodiffModule, Module};
use burn::optim::Optimizer;
use medddpm_diffusion::CosineSchedule;
use medddpm_unet::{KernelAutodiffBackend, UNet};

use super::{Job, TrainObserver};
use crate::checkpoint::OPTIMIZER_FILE;
use crate::checkpoint::{self, read_state, TrainState, EMA_FILE, MODEL_FILE};
use crate::data::NiftiDataset;
use crate::integrity::{decode_record, load_record_bytes, read_checked};
use crate::lock::RunLock;
use crate::{ExperimentConfig, FusedAdam, FusedAdamOptimizer, TrainError};

/// Everything a running session holds.
pub(super) struct Session<B: KernelAutodiffBackend> {
    pub dataset: std::sync::Arc<NiftiDataset>,
    pub schedule: CosineSchedule,
    /// The resolved configuration as written into every checkpoint.
    pub config_toml: String,
    pub model: UNet<B>,
    pub ema: UNet<B::InnerBackend>,
    pub optim: FusedAdamOptimizer<UNet<B>, B>,
    pub state: TrainState,
    /// Held to the end of the session: a second process on this run stops at opening.
    _lock: RunLock,
}

impl<B: KernelAutodiffBackend> Session<B> {
    /// Validates the experiment, opens its data, builds (or resumes) the training state and
    /// writes the run's `config.toml`.
    pub fn open(
        job: Job<'_>,
        device: &B::Device,
        observer: &mut dyn TrainObserver,
    ) -> Result<Self, TrainError> {
        let (config, run, options) = (job.config, job.run, job.options);
        config.validate()?;
        let dataset = NiftiDataset::open(&config.data)?;
        check_channels(config, &dataset)?;
        let settings = &config.train;
        let serial = medddpm_diffusion::backend_rng();
        B::seed(device, settings.seed);
        let model: UNet<B> = config.model.init(device)?.with_compute(options.compute);
        // burn draws a parameter's initial values when it is first read: read them all now,
        // while the generator holds this seed.
        model.visit(&mut Touch);
        drop(serial);
        let ema: UNet<B::InnerBackend> = model.valid();
        let optim = FusedAdam::from_settings(settings).init::<B, UNet<B>>();
        let mut session = Self {
            dataset: std::sync::Arc::new(dataset),
            schedule: CosineSchedule::new(config.diffusion.timesteps),
            config_toml: config.to_toml(),
            model,
            ema,
            optim,
            state: TrainState {
                step: 0,
                micro_batches: 0,
                seed: settings.seed,
                last_loss: f32::NAN,
                elapsed_s: 0.0,
                loss_scale: None,
            },
            _lock: RunLock::acquire(&run.root)?,
        };
        match (run.latest_checkpoint()?, options.resume) {
            (Some(ckpt), true) => {
                session.resume(config, &ckpt, device)?;
                observer.message(&format!(
                    "resuming from {} (step {})",
                    ckpt.display(),
                    session.state.step
                ));
            }
            (None, true) => {
                return Err(TrainError::checkpoint(
                    &run.checkpoints(),
                    "no checkpoint to resume from",
                ))
            }
            (Some(ckpt), false) => {
                return Err(TrainError::checkpoint(
                    &ckpt,
                    "the run folder already holds checkpoints: resume it (--resume) or choose another run folder",
                ))
            }
            (None, false) => {}
        }
        std::fs::create_dir_all(&run.root).map_err(|e| TrainError::io(&run.root, e))?;
        checkpoint::atomic_write(&run.config_path(), session.config_toml.as_bytes())?;
        Ok(session)
    }

    /// Loads the state, the weights, the EMA and Adam's moments of `ckpt` (each file read is
    /// checked against the checkpoint's checksums).
    fn resume(
        &mut self,
        config: &ExperimentConfig,
        ckpt: &Path,
        device: &B::Device,
    ) -> Result<(), TrainError> {
        self.state = read_state(ckpt)?;
        check_same_network(config, ckpt)?;
        // Checked before anything is written: the run folder's config.toml keeps its steps.
        if config.train.steps < self.state.step {
            return Err(TrainError::Config {
                path: None,
                message: format!(
                    "train.steps = {} is below the step the run is at ({}, {}): training would run no step; give --steps {} or more",
                    config.train.steps,
                    self.state.step,
                    ckpt.display(),
                    self.state.step
                ),
            });
        }
        if self.state.seed != config.train.seed {
            return Err(TrainError::checkpoint(
                ckpt,
                format!(
                    "written with seed {}, the config says {}",
                    self.state.seed, config.train.seed
                ),
            ));
        }
        let load = |name: &str| -> Result<(PathBuf, Vec<u8>), TrainError> {
            let name = format!("{name}.mpk");
            Ok((ckpt.join(&name), read_checked(ckpt, &name)?))
        };
        let (file, bytes) = load(MODEL_FILE)?;
        self.model = load_record_bytes(&self.model, bytes, &file, device)?;
        let (file, bytes) = load(EMA_FILE)?;
        self.ema = load_record_bytes(&self.ema, bytes, &file, device)?;
        let (file, bytes) = load(OPTIMIZER_FILE)?;
        self.optim = self
            .optim
            .clone()
            .load_record(decode_record(bytes, &file, device)?);
        crate::optimizer_record::check_matches(&self.model, self.optim.records(), self.state.step)
            .map_err(|problem| {
                TrainError::checkpoint(ckpt, format!("{OPTIMIZER_FILE}.mpk {problem}"))
            })?;
        Ok(())
    }
}

/// Reads every parameter (initialising the lazy ones).
struct Touch;

impl<B: burn::tensor::backend::Backend> burn::module::ModuleVisitor<B> for Touch {
    fn visit_float<const D: usize>(
        &mut self,
        param: &burn::module::Param<burn::tensor::Tensor<B, D>>,
    ) {
        let _ = param.val();
    }
}

/// The network must take the data's image and condition channels and give back the image's.
fn check_channels(config: &ExperimentConfig, dataset: &NiftiDataset) -> Result<(), TrainError> {
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
    Ok(())
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
