//! Errors: [`PrepareError`] stops a whole run (bad folders, outputs in the way); a
//! [`CaseProblem`] skips one case, is reported with its reason, and the others go on.

use std::path::PathBuf;

use medddpm_nifti::NiftiError;
use serde::Serialize;

/// What stops a whole `prepare` run before (or instead of) preparing cases.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PrepareError {
    /// An input folder does not exist (or is not a folder).
    #[error("{path}: {role} folder not found")]
    MissingFolder {
        /// The folder given.
        path: PathBuf,
        /// What it should hold ("raw BraTS", "image", ...).
        role: String,
    },
    /// An input file the run needs does not exist.
    #[error("{path}: {role} file not found")]
    MissingFile {
        /// The file expected.
        path: PathBuf,
        /// What it should be.
        role: String,
    },
    /// The run would hold more than the memory the system has available.
    #[error("the output grid {grid:?} needs at least {needed_gib:.1} GiB of memory ({volumes} float volumes a case, {cases} case(s) at once), more than the {available_gib:.1} GiB available: choose a smaller grid (or fewer jobs)")]
    TooLarge {
        /// The output grid.
        grid: [usize; 3],
        /// Volumes a case holds on that grid.
        volumes: u64,
        /// Cases prepared at once.
        cases: usize,
        /// The least memory that needs, GiB.
        needed_gib: f64,
        /// Memory available, GiB.
        available_gib: f64,
    },
    /// The output folder is the input folder or inside it.
    #[error("{out} is inside the {role} folder {input}: the next run would read its outputs as input; choose an output folder outside it")]
    OutputInsideInput {
        /// The output folder given.
        out: PathBuf,
        /// The input folder it lies in.
        input: PathBuf,
        /// What the input folder holds ("raw BraTS", ...).
        role: String,
    },
    /// An input folder holds nothing to prepare.
    #[error("{path}: no {what} found")]
    NothingFound {
        /// The folder searched.
        path: PathBuf,
        /// What was looked for.
        what: String,
    },
    /// Listing a folder, reading the case list or writing the report failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// Underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Outputs of this run already exist and overwriting was not asked for; nothing was
    /// written.
    #[error(
        "{first} already exists ({count} output file(s) of this run exist); nothing was written \
         (choose another output folder, or overwrite them with --overwrite)"
    )]
    OutputsExist {
        /// The first existing output, in the order the run would write them.
        first: PathBuf,
        /// How many of the run's outputs exist.
        count: usize,
    },
    /// A line of the case list is not a case id.
    #[error("{path}, line {line}: {problem}")]
    BadCaseList {
        /// The case list file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        problem: String,
    },
    /// A setting cannot work (an empty grid, a negative distance, ...).
    #[error("invalid setting {name} = {value}: {problem}")]
    InvalidSetting {
        /// The setting's name, as in the config and on the command line.
        name: String,
        /// Its value.
        value: String,
        /// Why it cannot work.
        problem: String,
    },
    /// An input every case needs (e.g. the real-demo template) cannot be read.
    #[error(transparent)]
    Nifti(#[from] NiftiError),
}

impl PrepareError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { path, source }
    }

    pub(crate) fn setting(name: &str, value: impl std::fmt::Debug, problem: &str) -> Self {
        Self::InvalidSetting {
            name: name.into(),
            value: format!("{value:?}"),
            problem: problem.into(),
        }
    }
}

/// Why one case was skipped. Serialised into `prepare-report.json` with a `kind` tag and the
/// values a user needs to fix it; its message names the file and the problem.
#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum CaseProblem {
    /// The case list names a case the input folder does not hold.
    #[error("listed but not found: no folder {expected}")]
    NotFound {
        /// Where the case was looked for.
        expected: PathBuf,
    },
    /// Files the case needs are missing.
    #[error("missing {}: expected {}", names.join(", "), display_paths(expected))]
    MissingFiles {
        /// What is missing (modalities, "mask", ...).
        names: Vec<String>,
        /// The paths looked for (`.nii.gz`; a `.nii` of the same name is accepted too).
        expected: Vec<PathBuf>,
    },
    /// An image has no partner (a mask without an image, or the reverse).
    #[error("{path}: no {partner} named {expected_name} in {partner_dir}")]
    Unpaired {
        /// The file without a partner.
        path: PathBuf,
        /// The partner's role ("mask", "image").
        partner: String,
        /// The name the partner would have.
        expected_name: String,
        /// Where it was looked for.
        partner_dir: PathBuf,
    },
    /// A file cannot be read as NIfTI.
    #[error("unreadable: {message}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// The reader's message (it names the file and the problem).
        message: String,
    },
    /// Files that must share one voxel grid do not.
    #[error("{a} {a_dims:?} and {b} {b_dims:?} are not on one voxel grid ({detail})")]
    GridMismatch {
        /// First file.
        a: PathBuf,
        /// Its dims.
        a_dims: [usize; 3],
        /// Second file.
        b: PathBuf,
        /// Its dims.
        b_dims: [usize; 3],
        /// What differs.
        detail: String,
    },
    /// A label map holds values that are not allowed labels.
    #[error("{path}: unexpected labels {found:?} (allowed: {allowed:?})")]
    UnexpectedLabels {
        /// The label map.
        path: PathBuf,
        /// The values found that are not allowed (up to 16, sorted).
        found: Vec<f64>,
        /// The labels allowed.
        allowed: Vec<i64>,
    },
    /// An image is constant, so a min-max scaling (or a threshold) is meaningless.
    #[error("{path}: every voxel is {value}, so it cannot be min-max scaled")]
    ConstantImage {
        /// The image.
        path: PathBuf,
        /// Its only value.
        value: f32,
    },
    /// An image holds NaN or infinite values.
    #[error("{path}: {count} voxel(s) are NaN or infinite")]
    NonFinite {
        /// The image.
        path: PathBuf,
        /// How many.
        count: usize,
    },
    /// Thresholding found nothing to label (no head, no brain inside the head).
    #[error("{path}: {what} is empty after thresholding at {threshold}")]
    EmptyLabel {
        /// The image.
        path: PathBuf,
        /// Which label ("head", "brain").
        what: String,
        /// The threshold used, in the image's units.
        threshold: f64,
    },
    /// Writing an output failed.
    #[error("writing failed: {message}")]
    WriteFailed {
        /// The output file.
        path: PathBuf,
        /// The writer's message.
        message: String,
    },
}

impl CaseProblem {
    /// A reading error as a case problem (the message names the file).
    pub(crate) fn unreadable(path: &std::path::Path, e: NiftiError) -> Self {
        Self::Unreadable {
            path: path.to_path_buf(),
            message: e.to_string(),
        }
    }

    /// A writing error as a case problem.
    pub(crate) fn write_failed(path: &std::path::Path, e: NiftiError) -> Self {
        Self::WriteFailed {
            path: path.to_path_buf(),
            message: e.to_string(),
        }
    }
}

fn display_paths(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
