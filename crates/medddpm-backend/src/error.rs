//! The crate's error type: what stops a backend from being set up, as values a caller can test
//! ([`Error::is_unsupported`] tells a refusal from a failure).

use std::path::PathBuf;

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
        matches!(
            self,
            Error::NotCompiledIn { .. }
                | Error::PrecisionUnsupported { .. }
                | Error::CudnnNeedsCuda { .. }
                | Error::NoDevice { .. }
        )
    }
}

/// What computes the convolutions instead of cuDNN on `backend`.
fn cudnn_alternative(backend: BackendKind) -> String {
    match backend {
        BackendKind::Cpu => "the cpu backend computes convolutions with burn's kernels (use --conv-engine auto or cubecl)".to_string(),
        other => format!("{other} computes convolutions with burn's CubeCL kernels (use --conv-engine auto or cubecl)"),
    }
}

/// What to do when `backend` finds no device.
fn no_device_hint(backend: BackendKind) -> &'static str {
    match backend {
        BackendKind::Cuda => "check that the NVIDIA driver is installed and loaded (nvidia-smi), or use --backend cpu",
        _ => "for wgpu on Linux install a Vulkan driver and loader (e.g. libvulkan1 and the NVIDIA or Mesa ICD) or point VK_DRIVER_FILES at the driver's ICD file, or use --backend cpu",
    }
}
