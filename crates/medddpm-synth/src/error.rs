//! `SynthError`: what stops a synthesis run, with the file or setting involved.

use std::path::PathBuf;

use medddpm_train::TrainError;

/// Everything that can stop `medddpm synthesize`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SynthError {
    /// The options cannot make a data set (a count of zero, too few variants, a layout the
    /// model's channels do not fit, ...).
    #[error("{0}")]
    Options(String),
    /// Two masks would name their pairs alike.
    #[error("{first} and {second} both stand for case '{case}'; keep only one")]
    DuplicateCase {
        /// The case id.
        case: String,
        /// One file.
        first: PathBuf,
        /// The other.
        second: PathBuf,
    },
    /// The output folder was made with other settings, so resuming would mix two data sets.
    #[error("{}: cannot resume: this folder was made with {setting} {made}, this run asks for {asked} (settings in {} beside it); use another --out, or the settings it was made with", manifest.display(), crate::files::SETTINGS_FILE)]
    OtherSettings {
        /// The manifest of the folder.
        manifest: PathBuf,
        /// Which setting differs.
        setting: String,
        /// Its value in the folder.
        made: String,
        /// Its value in this run.
        asked: String,
    },
    /// A manifest line that is complete but not a record (a torn last line is ignored).
    #[error("{}, line {line}: {problem}", path.display())]
    DamagedManifest {
        /// The manifest (or one process's part of it).
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        problem: String,
    },
    /// Another process is synthesizing into the same folder.
    #[error("{}: {owner} is synthesizing into this folder (it holds {}/.lock); wait for it, or stop it first", out.display(), out.display())]
    Locked {
        /// The output folder.
        out: PathBuf,
        /// Who holds the lock.
        owner: String,
    },
    /// The augmentation hook refused a mask.
    #[error("{}: the mask augmentation failed for pair {pair}: {message}", mask.display())]
    Augmentation {
        /// The source mask.
        mask: PathBuf,
        /// The pair.
        pair: usize,
        /// Why.
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
    /// Loading, preparing or sampling failed.
    #[error(transparent)]
    Train(Box<TrainError>),
    /// A NIfTI file could not be read or written.
    #[error(transparent)]
    Nifti(#[from] medddpm_nifti::NiftiError),
}

impl From<TrainError> for SynthError {
    fn from(e: TrainError) -> Self {
        match e {
            TrainError::Locked { run, owner } => Self::Locked { out: run, owner },
            e => Self::Train(Box::new(e)),
        }
    }
}

impl SynthError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
}
