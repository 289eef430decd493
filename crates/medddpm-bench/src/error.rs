//! The crate's error type. Every variant reads as the message the benchmark printed before it
//! had one (a failed configuration's message lands in the reports, so it must not change), and
//! carries the values behind it.

use std::path::{Path, PathBuf};

use crate::cell::Cell;

/// What went wrong in a benchmark or a report.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The backend could not be set up (a refusal when [`Error::is_unsupported`]).
    #[error(transparent)]
    Backend(#[from] medddpm_backend::Error),
    /// The network configuration or its input is invalid.
    #[error(transparent)]
    UNet(#[from] medddpm_unet::UNetError),
    /// A file or folder could not be read, written or created, or a program not started.
    #[error("{}", action.describe(path))]
    Io {
        /// What was being done.
        action: FileAction,
        /// The file, folder or program.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// Waiting for a configuration's child process failed.
    #[error(transparent)]
    Wait(std::io::Error),
    /// A JSON file (a configuration, a record, cached statistics) could not be parsed.
    #[error("parsing {}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What was wrong with it.
        source: serde_json::Error,
    },
    /// A line of a results file is not a benchmark record.
    #[error("{}, line {line}: not a valid benchmark record", path.display())]
    BadRecord {
        /// The results file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What was wrong with it.
        source: serde_json::Error,
    },
    /// A value could not be written as JSON.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// A record could not be written as JSON.
    #[error("cannot serialise the record")]
    SerialiseRecord(#[source] serde_json::Error),
    /// A breakdown time is not finite: JSON has no NaN, so the line could not be read back.
    #[error("breakdown time of `{class}` is {value}: not representable in JSON")]
    NonFiniteBreakdown {
        /// The operation class.
        class: String,
        /// Its time.
        value: f64,
    },
    /// A size, step count or batch the benchmark cannot run.
    #[error(transparent)]
    Invalid(#[from] InvalidOptions),
    /// A `--single-config` run was started wrongly (an internal protocol between processes).
    #[error("{0}")]
    SingleRun(&'static str),
    /// No PyTorch figures are known for this GPU.
    #[error("no PyTorch reference figures for '{name}' (known: h100)")]
    UnknownReference {
        /// The GPU asked for.
        name: String,
    },
    /// The embedded PyTorch figures could not be read (a build error, caught by a test).
    #[error("the PyTorch reference figures ({file}) could not be parsed")]
    ReferenceData {
        /// The data file.
        file: &'static str,
        /// What was wrong with it.
        source: serde_json::Error,
    },
    /// Waiting for the device failed.
    #[error("device synchronisation failed: {cause}")]
    Sync {
        /// The backend's error.
        cause: String,
    },
    /// The device reported an error of its own (cuDNN's, on CUDA).
    #[error("{message}")]
    Device {
        /// What it said.
        message: String,
    },
    /// The device-scaling measurement (`bench --devices`) failed: the training run or its
    /// results file.
    #[error("device scaling: {0}")]
    Scaling(String),
    /// Waiting for the device failed inside a profiled forward pass.
    #[error("device synchronisation failed while profiling")]
    ProfileSync,
    /// The sampling steps gave NaN or infinity.
    #[error("the sampling steps produced non-finite values")]
    NonFiniteSamples,
    /// The training loss is NaN or infinite.
    #[error("the training loss is not finite ({loss})")]
    NonFiniteLoss {
        /// The loss.
        loss: f32,
    },
    /// A tensor's values could not be read back from the device.
    #[error("reading the {what}: {cause}")]
    ReadTensor {
        /// Which output.
        what: &'static str,
        /// burn's error.
        cause: String,
    },
    /// The probe's profiled pass and its float64 reference ran different operations.
    #[error("the profiled pass ran {ran} operations, the reference {reference}")]
    OperationCount {
        /// Operations of the pass under test.
        ran: usize,
        /// Operations of the reference pass.
        reference: usize,
    },
    /// The host profiler could not run or its profile not be written.
    #[error(transparent)]
    HostProfile(#[from] HostProfileError),
    /// The chart could not be drawn.
    #[error(transparent)]
    Chart(#[from] ChartError),
    /// Some configurations failed or disagreed with the float64 reference (the reports are
    /// written first).
    #[error("{}", outcome(failed, disagreeing))]
    Configurations {
        /// Configurations that failed.
        failed: Vec<Cell>,
        /// Configurations whose output disagreed.
        disagreeing: Vec<Cell>,
    },
}

/// The benchmark's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether the backend refused the configuration (it is unsupported, not failed).
    pub fn is_unsupported(&self) -> bool {
        matches!(self, Error::Backend(e) if e.is_unsupported())
    }

    /// An I/O error while doing `action` on `path`.
    pub(crate) fn io(action: FileAction, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.to_path_buf();
        move |source| Error::Io {
            action,
            path,
            source,
        }
    }

    /// The message and its causes, `: `-separated (as the reports and logs show errors).
    pub fn chain(&self) -> String {
        let mut text = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(e) = source {
            text.push_str(": ");
            text.push_str(&e.to_string());
            source = e.source();
        }
        text
    }
}

/// What was being done to a file when it failed (the message names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileAction {
    /// Reading a file.
    Read,
    /// Writing a file.
    Write,
    /// Creating a folder.
    CreateDir,
    /// Creating the results folder.
    CreateOut,
    /// Opening a results file.
    Open,
    /// Opening a results file to append to it.
    OpenToAppend,
    /// Reading a results file's length.
    Stat,
    /// Reading the last byte of a results file.
    ReadEnd,
    /// Appending to a results file.
    Append,
    /// Reading one line of a results file (1-based).
    ReadLine(usize),
    /// Starting a child process.
    Start,
}

impl FileAction {
    fn describe(self, path: &Path) -> String {
        let p = path.display();
        match self {
            FileAction::Read => format!("reading {p}"),
            FileAction::Write => format!("writing {p}"),
            FileAction::CreateDir => format!("creating {p}"),
            FileAction::CreateOut => format!("cannot create {p}"),
            FileAction::Open => format!("cannot open {p}"),
            FileAction::OpenToAppend => format!("cannot open {p} for appending"),
            FileAction::Stat => format!("cannot stat {p}"),
            FileAction::ReadEnd => format!("cannot read the end of {p}"),
            FileAction::Append => format!("cannot append to {p}"),
            FileAction::ReadLine(line) => format!("cannot read {p}, line {line}"),
            FileAction::Start => format!("starting {p}"),
        }
    }
}

/// Options the benchmark cannot run with; each message names the command-line switch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidOptions {
    /// A volume side is zero or not a multiple of the network's size divisor.
    #[error(
        "--size {size:?}: every size must be a positive multiple of {divisor} for the {model} model"
    )]
    Size {
        /// The volume (d, h, w).
        size: [usize; 3],
        /// The network's size divisor.
        divisor: usize,
        /// The network's name.
        model: String,
    },
    /// A count that must be positive is zero.
    #[error("--{option} must be at least 1")]
    Zero {
        /// `steps` or `batch`.
        option: &'static str,
    },
    /// The sampling steps would walk past the first timestep.
    #[error(
        "--warmup {warmup} and --steps {steps} need {} sampling steps, more than the {timesteps} timesteps of the schedule",
        1 + warmup + steps
    )]
    TooManySteps {
        /// Untimed steps after the first.
        warmup: usize,
        /// Timed steps.
        steps: usize,
        /// Timesteps of the schedule.
        timesteps: usize,
    },
}

/// The host profiler (`--host-profile`) could not run or write its profile.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostProfileError {
    /// This binary was built without the profiler.
    #[error(
        "cannot write the host profile {}: this build lacks the `host-profile` feature",
        path.display()
    )]
    NotBuilt {
        /// Where the profile would have gone.
        path: PathBuf,
    },
    /// The sampler could not start.
    #[error("cannot start the host profiler: {cause}")]
    Start {
        /// The profiler's error.
        cause: String,
    },
    /// The samples could not be turned into a profile.
    #[error("cannot build the host profile: {cause}")]
    Build {
        /// The profiler's error.
        cause: String,
    },
    /// The profile could not be written.
    #[error("cannot write the host profile {}", path.display())]
    Write {
        /// The profile's file.
        path: PathBuf,
        /// The file system's error.
        source: std::io::Error,
    },
}

/// The PNG chart could not be drawn or encoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChartError {
    /// plotters could not draw.
    #[error("{0}")]
    Draw(String),
    /// The embedded font or the PNG encoding (both `medddpm-render`'s) failed.
    #[error(transparent)]
    Render(medddpm_render::RenderError),
}

impl<E: std::error::Error + Send + Sync> From<plotters::drawing::DrawingAreaErrorKind<E>>
    for ChartError
{
    fn from(e: plotters::drawing::DrawingAreaErrorKind<E>) -> Self {
        ChartError::Draw(e.to_string())
    }
}

/// The exit message of a run with failed or disagreeing configurations.
fn outcome(failed: &[Cell], disagreeing: &[Cell]) -> String {
    let list = |cells: &[Cell]| {
        cells
            .iter()
            .map(Cell::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    match (failed.is_empty(), disagreeing.is_empty()) {
        (false, true) => format!("failed: {} (see the log above)", list(failed)),
        (true, false) => format!(
            "outputs disagree with the float64 reference: {}",
            list(disagreeing)
        ),
        _ => format!(
            "failed: {}; outputs disagree with the float64 reference: {}",
            list(failed),
            list(disagreeing)
        ),
    }
}
