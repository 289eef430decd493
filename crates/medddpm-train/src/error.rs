use std::path::{Path, PathBuf};

use medddpm_mask::MaskError;
use medddpm_nifti::NiftiError;

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
    Data(Box<DataError>),
    /// The network could not be built or loaded.
    #[error(transparent)]
    UNet(#[from] medddpm_unet::UNetError),
    /// Writing a NIfTI output failed.
    #[error(transparent)]
    Nifti(#[from] medddpm_nifti::NiftiError),
    /// A picture (sample montage, loss curve, trajectory) could not be drawn or written.
    #[error(transparent)]
    Render(Box<medddpm_render::RenderError>),
    /// The run's TensorBoard event file could not be written.
    #[error(transparent)]
    TensorBoard(#[from] medddpm_tensorboard::TensorBoardError),
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
    /// f16 gradients overflowed at every loss scale down to 1.
    #[error("training step {step}: the gradients overflow f16 even with the loss scale brought below 1 ({scale}); train in bf16, which has f32's range")]
    GradientOverflow {
        /// Optimizer step.
        step: usize,
        /// The scale reached.
        scale: f64,
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
    /// A segmentation cannot get the brain label its model is conditioned on.
    #[error("{}: {problem}", path.display())]
    BrainLabel {
        /// The segmentation.
        path: PathBuf,
        /// Why.
        problem: BrainLabelProblem,
    },
    /// A GPU operation handed to the device thread failed, so what it belonged to is invalid.
    #[error("{during}: {message}")]
    Device {
        /// The work that stopped (a training step, a sample).
        during: String,
        /// What failed.
        message: String,
    },
    /// A data-parallel run lost a replica or its gradient average failed.
    #[error("data-parallel training, device {device} (replica {rank}): {message}")]
    Replica {
        /// The replica's rank (0 writes the checkpoints).
        rank: usize,
        /// Its device, as the backend names it.
        device: String,
        /// What happened.
        message: String,
    },
}

impl From<medddpm_render::RenderError> for TrainError {
    fn from(e: medddpm_render::RenderError) -> Self {
        Self::Render(Box::new(e))
    }
}

// Boxed: `DataError`'s variants carry several paths, and every `Result<_, TrainError>` would
// otherwise be as large as the largest of them.
impl From<DataError> for TrainError {
    fn from(e: DataError) -> Self {
        Self::Data(Box::new(e))
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

/// What can go wrong finding, pairing or decoding training data. Every variant names the file
/// or folder involved, because the usual fix is to look at that path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataError {
    /// A folder the layout needs does not exist (or is not a folder).
    #[error("{role} folder {path} does not exist")]
    MissingFolder {
        /// The folder looked for.
        path: PathBuf,
        /// What it should hold ("mask", "image", "t1", ...).
        role: String,
    },
    /// A folder holds no `.nii`/`.nii.gz` files.
    #[error("{role} folder {path} holds no .nii or .nii.gz files")]
    EmptyFolder {
        /// The folder.
        path: PathBuf,
        /// What it should hold.
        role: String,
    },
    /// A path given for masks is neither a NIfTI file nor a folder.
    #[error("{path} does not exist or is not a .nii/.nii.gz file or a folder")]
    NotFound {
        /// The path given.
        path: PathBuf,
    },
    /// Listing a folder or touching a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A file in one folder has no partner in the other.
    #[error(
        "{file} ({role}) has no matching {other_role} file named {expected_name} in {other_dir}"
    )]
    Unpaired {
        /// The file without a partner.
        file: PathBuf,
        /// Its role ("mask", "image", "t1", ...).
        role: String,
        /// The role of the missing partner.
        other_role: String,
        /// The file name that was looked for.
        expected_name: String,
        /// The folder it was looked for in.
        other_dir: PathBuf,
    },
    /// Two files in one folder stand for the same id (e.g. `a.nii` and `a.nii.gz`).
    #[error("{first} and {second} both stand for id '{id}'; keep only one")]
    DuplicateId {
        /// The id.
        id: String,
        /// One file.
        first: PathBuf,
        /// The other file.
        second: PathBuf,
    },
    /// A BraTS case has a segmentation but lacks one of the four modalities.
    #[error("BraTS case {case}: modality {modality} is missing (expected {expected})")]
    MissingModality {
        /// Case id, e.g. `BraTS2021_00529`.
        case: String,
        /// The missing modality.
        modality: String,
        /// The file looked for.
        expected: PathBuf,
    },
    /// A file in a BraTS folder does not follow `<case>_<modality>.nii[.gz]`.
    #[error("{path}: BraTS file names must end in _{modality}.nii.gz (or .nii)")]
    BadBratsName {
        /// The file.
        path: PathBuf,
        /// The folder's modality.
        modality: String,
    },
    /// A volume is not on the model grid under [`crate::data::GridPolicy::Exact`].
    #[error(
        "{path}: volume is {found:?} voxels (i, j, k) but the model grid is {expected:?}; \
         set grid_policy = \"resize\" or \"crop-or-pad\", or preprocess the file"
    )]
    WrongGrid {
        /// The file.
        path: PathBuf,
        /// Its dimensions.
        found: [usize; 3],
        /// The configured grid.
        expected: [usize; 3],
    },
    /// An image holds NaN or infinite voxels, which would make the loss NaN.
    #[error(
        "{path}: {count} voxels are not finite numbers (the first, {value}, at voxel index \
         {index} in file order); the network cannot train on them: fix or mask them first"
    )]
    NonFinite {
        /// The file.
        path: PathBuf,
        /// How many voxels are NaN or infinite.
        count: usize,
        /// The first of them.
        value: f32,
        /// Its index in the file's voxel order.
        index: usize,
    },
    /// An example index past the end.
    #[error("example index {index} is out of range (data set has {len} examples)")]
    IndexOutOfRange {
        /// Index asked for.
        index: usize,
        /// Number of examples.
        len: usize,
    },
    /// A configuration value that cannot work.
    #[error("invalid data configuration: {0}")]
    InvalidConfig(String),
    /// Reading, writing or regridding a NIfTI file failed.
    #[error(transparent)]
    Nifti(#[from] NiftiError),
    /// Encoding a mask failed (unknown label, invalid scheme, grid mismatch).
    #[error(transparent)]
    Mask(#[from] MaskError),
}

/// Why a segmentation cannot get its brain label (see [`crate::sample::brain`]).
#[derive(Debug, thiserror::Error)]
pub enum BrainLabelProblem {
    /// Neither the segmentation nor a brain mask gives the brain.
    #[error(
        "no brain label ({label}) in this segmentation, which the model is conditioned on; \
         give the case's brain mask (`medddpm sample --brain-mask FILE|DIR`), or prepare raw \
         BraTS cases with `medddpm prepare brats`, which adds it"
    )]
    Missing {
        /// The brain label.
        label: i64,
    },
    /// A brain mask was given for a segmentation that already has the brain label.
    #[error(
        "a brain mask was given but the segmentation already has {voxels} voxels of label \
         {label}: drop the brain mask, or, if this is a raw BraTS segmentation (where 4 is the \
         enhancing tumour), prepare it with `medddpm prepare brats`"
    )]
    AlreadyPresent {
        /// The brain label.
        label: i64,
        /// Voxels carrying it.
        voxels: usize,
    },
    /// The brain-mask folder holds no file for this case.
    #[error("no brain mask for it in {} (looked for {})", dir.display(), tried.join(", "))]
    NoMaskFor {
        /// The folder searched.
        dir: PathBuf,
        /// The file names tried.
        tried: Vec<String>,
    },
    /// The brain mask adds no voxel (all zero, or all inside the tumour).
    #[error("its brain mask {} has no voxel above 0 outside the tumour", mask.display())]
    EmptyMask {
        /// The brain mask.
        mask: PathBuf,
    },
    /// The model's label scheme has no brain channel to fill.
    #[error("a brain mask was given but the model's label scheme '{scheme}' has no channel named \"brain\"")]
    NoBrainChannel {
        /// The scheme's name.
        scheme: String,
    },
}
