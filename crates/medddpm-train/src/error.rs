use std::path::{Path, PathBuf};

/// Everything that can stop training or sampling.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrainError {
    /// The experiment configuration is invalid.
    #[error("invalid configuration{}: {message}", path.as_ref().map(|p| format!(" in {}", p.display())).unwrap_or_default())]
    Config {
        /// The file, when it came from one.
        path: Option<PathBuf>,
        /// What is wrong.
        message: String,
    },
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A checkpoint is missing, incomplete or does not match the run.
    #[error("checkpoint {}: {message}", path.display())]
    Checkpoint {
        /// The checkpoint folder or file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The data could not be loaded.
    #[error(transparent)]
    Data(#[from] crate::data::DataError),
    /// The network could not be built or loaded.
    #[error(transparent)]
    UNet(#[from] medddpm_unet::UNetError),
    /// Writing a NIfTI output failed.
    #[error(transparent)]
    Nifti(#[from] medddpm_nifti::NiftiError),
    /// A picture (sample montage, loss curve, trajectory) could not be drawn or written.
    #[error(transparent)]
    Render(Box<medddpm_render::RenderError>),
    /// The loss stopped being a finite number.
    #[error("training diverged at step {step}: the loss is {loss} (batch: {}); {}", files.join(", "), match last_checkpoint {
        Some(p) => format!("the last checkpoint is {} (resume continues from it; a lower learning rate or [train] on_non_finite_loss = \"skip\" may get past this step)", p.display()),
        None => "no checkpoint was written yet".to_string(),
    })]
    Diverged {
        /// Optimizer step.
        step: usize,
        /// The loss value.
        loss: f32,
        /// The image files of the step's batch.
        files: Vec<String>,
        /// The newest checkpoint of the run.
        last_checkpoint: Option<PathBuf>,
    },
    /// Another process is training in this run folder.
    #[error("{}: {owner} is training in this run folder (it holds {}/.lock); wait for it, or stop it first", run.display(), run.display())]
    Locked {
        /// The run folder.
        run: PathBuf,
        /// Who holds the lock ("process 1234").
        owner: String,
    },
    /// Files to be written already exist and replacing them was not asked for.
    #[error("{}: {count} of the files to write already exist (first: {first}); nothing was written", dir.display())]
    WouldOverwrite {
        /// The output folder.
        dir: PathBuf,
        /// How many of the planned files exist.
        count: usize,
        /// The first of them.
        first: String,
    },
    /// A GPU operation handed to the device thread failed, so what it belonged to is invalid.
    #[error("{during}: {message}")]
    Device {
        /// The work that stopped (a training step, a sample).
        during: String,
        /// What failed.
        message: String,
    },
}

impl From<medddpm_render::RenderError> for TrainError {
    fn from(e: medddpm_render::RenderError) -> Self {
        Self::Render(Box::new(e))
    }
}

impl TrainError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    pub(crate) fn checkpoint(path: &Path, message: impl Into<String>) -> Self {
        Self::Checkpoint {
            path: path.to_path_buf(),
            message: message.into(),
        }
    }
}
