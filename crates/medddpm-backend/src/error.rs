//! The crate's error type: what stops a backend from being set up, as values a caller can test
//! ([`Error::is_unsupported`] tells a refusal from a failure).

use std::path::PathBuf;

use medddpm_kernels::CollectiveUnavailable;

use crate::{BackendKind, Precision};

/// Why a backend could not be set up for a task.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The backend was left out of this binary at build time.
    #[error(
        "the {backend} backend is not compiled into this binary: rebuild with `cargo build --release -p medddpm --features {backend}`"
    )]
    NotCompiledIn {
        /// The backend asked for.
        backend: BackendKind,
    },
    /// The backend (or its device) cannot compute in this precision.
    #[error(
        "--precision {precision} is not supported on the {backend} backend{}: {reason}",
        if *on_device { " with this device" } else { "" }
    )]
    PrecisionUnsupported {
        /// The backend.
        backend: BackendKind,
        /// The precision asked for.
        precision: Precision,
        /// Whether it is this device that lacks it (rather than the backend as a whole).
        on_device: bool,
        /// Why, and what to use instead.
        reason: &'static str,
    },
    /// cuDNN convolutions were asked for on a backend other than CUDA.
    #[error(
        "--conv-engine cudnn needs the cuda backend (cuDNN is NVIDIA's library); {}",
        cudnn_alternative(*backend)
    )]
    CudnnNeedsCuda {
        /// The backend asked for.
        backend: BackendKind,
    },
    /// No GPU device could be opened (no driver, no adapter). [`crate::run_on`] falls back to
    /// the CPU on it when the backend was `auto`; asked for by name, it is a refusal.
    #[error(
        "the {backend} backend found no usable GPU device ({cause}); {}",
        no_device_hint(*backend)
    )]
    NoDevice {
        /// The GPU backend that found no device.
        backend: BackendKind,
        /// What the backend said (its panic message).
        cause: String,
    },
    /// The kernel-tuning cache folder could not be created.
    #[error("cannot create the tuning cache folder {}", path.display())]
    TuneCache {
        /// The folder.
        path: PathBuf,
        /// The file system's error.
        source: std::io::Error,
    },
    /// The tuning results shipped in the binary did not unpack (a damaged build).
    #[error("the tuning results shipped in this binary do not unpack")]
    ShippedTuning {
        /// The archive reader's error.
        source: std::io::Error,
    },
    /// cubecl was already set up with another tuning cache in this process.
    #[error(
        "cubecl is already configured with the tuning cache {} in this process; one backend and precision per process (wanted {})",
        current.display(),
        wanted.display()
    )]
    TuneCacheInUse {
        /// The cache cubecl uses.
        current: PathBuf,
        /// The cache this task wanted.
        wanted: PathBuf,
    },
    /// `--devices` lists no device.
    #[error("--devices lists no device: give at least one CUDA device index, e.g. --devices 0")]
    NoDevicesListed,
    /// `--devices` names one device twice.
    #[error(
        "--devices {} names device {device} twice: each device runs one replica",
        device_list(devices)
    )]
    DuplicateDevice {
        /// The device named twice.
        device: usize,
        /// The list given.
        devices: Vec<usize>,
    },
    /// Devices other than the default one were asked for on a backend other than CUDA.
    #[error(
        "--devices {} needs the cuda backend: multi-device training runs on CUDA; {}",
        device_list(devices),
        one_device_hint(*backend)
    )]
    DevicesNeedCuda {
        /// The backend in use.
        backend: BackendKind,
        /// The list given.
        devices: Vec<usize>,
    },
    /// A listed device does not exist.
    #[error(
        "there is no {backend} device {device}: this machine has {count} (numbered from 0; nvidia-smi lists them)"
    )]
    NoSuchDevice {
        /// The backend.
        backend: BackendKind,
        /// The index asked for.
        device: usize,
        /// How many devices the backend sees.
        count: usize,
    },
    /// What went wrong setting up one device of a multi-device run.
    #[error("{backend} device {device}: {source}")]
    OnDevice {
        /// The backend.
        backend: BackendKind,
        /// The device's index.
        device: usize,
        /// What went wrong there.
        source: Box<Error>,
    },
    /// `--collective nccl` was asked for and NCCL cannot run.
    #[error(
        "--collective nccl cannot run: {cause} (use --collective host, or auto to fall back to it)"
    )]
    Nccl {
        /// Why NCCL is unavailable.
        cause: CollectiveUnavailable,
    },
    /// A command that runs on one device was given several.
    #[error(
        "medddpm {command} runs on one device, not --devices {}: only training runs one replica per device (give one index, e.g. --devices {})",
        device_list(devices),
        devices.first().copied().unwrap_or(0)
    )]
    OneDevice {
        /// The command.
        command: String,
        /// The list given.
        devices: Vec<usize>,
    },
    /// `--conv-engine cudnn` was asked for and cuDNN could not start.
    #[cfg(feature = "cuda")]
    #[error("--conv-engine cudnn cannot run: {cause}")]
    Cudnn {
        /// Why cuDNN is unavailable.
        cause: medddpm_kernels::cudnn::CudnnUnavailable,
    },
}

impl Error {
    /// Whether this is a refusal (the binary or device cannot run what was asked for) rather
    /// than a failure: the benchmark records such a configuration as unsupported.
    pub fn is_unsupported(&self) -> bool {
        match self {
            Error::OnDevice { source, .. } => source.is_unsupported(),
            _ => matches!(
                self,
                Error::NotCompiledIn { .. }
                    | Error::PrecisionUnsupported { .. }
                    | Error::CudnnNeedsCuda { .. }
                    | Error::NoDevice { .. }
                    | Error::DevicesNeedCuda { .. }
                    | Error::NoSuchDevice { .. }
                    | Error::Nccl { .. }
            ),
        }
    }
}

/// A device list as `--devices` takes it: `0,1`.
pub(crate) fn device_list(devices: &[usize]) -> String {
    let names: Vec<String> = devices.iter().map(usize::to_string).collect();
    names.join(",")
}

/// Why `backend` takes no device list.
fn one_device_hint(backend: BackendKind) -> &'static str {
    match backend {
        BackendKind::Cpu => {
            "the cpu backend is one device (it uses every core); leave --devices out"
        }
        _ => "this run is on the wgpu backend (no CUDA GPU was found, or this build has no cuda feature), which runs on one device; leave --devices out, or on a machine with NVIDIA GPUs use a build with --features cuda",
    }
}

/// What computes the convolutions instead of cuDNN on `backend`.
fn cudnn_alternative(backend: BackendKind) -> String {
    match backend {
        BackendKind::Cpu => "the cpu backend computes convolutions with burn's kernels (use --conv-engine auto or burn)".to_string(),
        other => format!("{other} computes convolutions with CubeCL kernels, burn's or ours (use --conv-engine auto, burn or cubecl)"),
    }
}

/// What to do when `backend` finds no device.
fn no_device_hint(backend: BackendKind) -> &'static str {
    match backend {
        BackendKind::Cuda => "check that the NVIDIA driver is installed and loaded (nvidia-smi), or use --backend cpu",
        _ => "for wgpu on Linux install a Vulkan driver and loader (e.g. libvulkan1 and the NVIDIA or Mesa ICD) or point VK_DRIVER_FILES at the driver's ICD file, or use --backend cpu",
    }
}
