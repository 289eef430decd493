//! Loading cuDNN at run time: the shared library and its version (once per process), a handle
//! on a device's primary context (once per device), and cuDNN's status codes as errors.

use std::path::PathBuf;

use cudarc::cudnn::sys;

pub(super) use crate::error::check;
use crate::error::{driver, EngineError};

/// Oldest cuDNN this engine accepts (the legacy convolution API of cuDNN 9).
pub const MIN_CUDNN_VERSION: usize = 90000;

/// Why cuDNN cannot be used.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CudnnUnavailable {
    /// The shared library was not found.
    #[error("libcudnn.so.9 was not found on the library path (install cuDNN 9, e.g. Debian/Ubuntu's libcudnn9-cuda-12, or pip's nvidia-cudnn-cu12 with its lib folder on LD_LIBRARY_PATH)")]
    NotFound,
    /// The library is older than [`MIN_CUDNN_VERSION`].
    #[error("cuDNN {found} is too old: the cudnn engine needs cuDNN 9 or newer")]
    TooOld {
        /// Version found, as cuDNN numbers it (e.g. 8907).
        found: usize,
    },
    /// cuDNN loaded but could not start.
    #[error("cuDNN could not start: {0}")]
    Failed(EngineError),
    /// The CUDA device asked for does not exist.
    #[error("there is no CUDA device {device} (this machine has {count}, numbered from 0)")]
    NoSuchDevice {
        /// The index asked for.
        device: usize,
        /// How many CUDA devices the driver reports.
        count: usize,
    },
    /// cuDNN loaded but could not start on one device.
    #[error("cuDNN could not start on CUDA device {device}: {cause}")]
    DeviceFailed {
        /// The device's index.
        device: usize,
        /// What failed.
        cause: EngineError,
    },
}

/// What [`init`](super::init) found on one device.
#[derive(Debug, Clone)]
pub struct CudnnInfo {
    /// cuDNN's version number (e.g. 90100 for 9.1.0).
    pub version: usize,
    /// Algorithm choices already known to this device: those of the cache file, and those the
    /// devices of the same GPU model chose in this process.
    pub cached: usize,
    /// The device's name, as the driver gives it (e.g. `NVIDIA H100 80GB HBM3`).
    pub gpu: String,
    /// The file this device's algorithm choices are kept in: `None` without a cache folder, and
    /// for a GPU model other than the one the file was opened for in this process (the file's
    /// choices were timed on that model; this one's are searched again each run).
    pub cache_file: Option<PathBuf>,
}

impl CudnnInfo {
    /// `9.1.0` for 90100.
    pub fn version_string(&self) -> String {
        let v = self.version;
        format!("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100)
    }
}

/// A GPU model, as far as algorithm choices go: devices with equal values share them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct GpuModel {
    /// The driver's name of the device.
    pub name: String,
    /// Compute capability, major and minor.
    pub capability: (i32, i32),
}

/// cuDNN opened on one device: a handle on the device's primary context, and what the device
/// is.
pub(super) struct Opened {
    pub handle: sys::cudnnHandle_t,
    pub ctx: cudarc::driver::sys::CUcontext,
    pub model: GpuModel,
}

/// Opens `libcudnn.so.9` and checks its version; returns the version.
pub(super) fn load_library() -> Result<usize, CudnnUnavailable> {
    // SAFETY: probing for the library only opens it.
    if !unsafe { sys::is_culib_present() } {
        return Err(CudnnUnavailable::NotFound);
    }
    // A missing symbol panics inside cudarc's loader: turn it into an error.
    let probe = std::panic::catch_unwind(|| unsafe { sys::cudnnGetVersion() });
    let version = probe.map_err(|_| {
        CudnnUnavailable::Failed(EngineError::Library(
            "the library has no cudnnGetVersion symbol".into(),
        ))
    })?;
    if version < MIN_CUDNN_VERSION {
        return Err(CudnnUnavailable::TooOld { found: version });
    }
    Ok(version)
}

/// How many CUDA devices the driver reports.
pub(super) fn device_count() -> Result<usize, CudnnUnavailable> {
    use cudarc::driver::result;
    let failed = |e| CudnnUnavailable::Failed(driver("CUDA driver")(e));
    result::init().map_err(failed)?;
    Ok(result::device::get_count().map_err(failed)?.max(0) as usize)
}

/// Creates a cuDNN handle on CUDA device `device_index`'s primary context (the library loaded
/// by [`load_library`]). The thread's current context is left as it was, where it had one.
pub(super) fn open(device_index: usize) -> Result<Opened, CudnnUnavailable> {
    let failed = |cause: EngineError| CudnnUnavailable::DeviceFailed {
        device: device_index,
        cause,
    };
    let previous = cudarc::driver::result::ctx::get_current().ok().flatten();
    let (ctx, model) = primary_context(device_index).map_err(failed)?;
    let handle = std::panic::catch_unwind(|| {
        let mut handle = std::ptr::null_mut();
        // SAFETY: the device's primary context is current on this thread.
        let status = unsafe { sys::cudnnCreate(&mut handle) };
        (status, handle)
    })
    .map_err(|_| {
        CudnnUnavailable::Failed(EngineError::Library(
            "the library has no cudnnCreate symbol".into(),
        ))
    });
    if let Some(previous) = previous {
        // SAFETY: a context that was current on this thread a moment ago.
        let _ = unsafe { cudarc::driver::result::ctx::set_current(previous) };
    }
    let handle = handle?;
    check(handle.0, "cudnnCreate").map_err(failed)?;
    Ok(Opened {
        handle: handle.1,
        ctx,
        model,
    })
}

/// CUDA device `device_index`'s compute capability (major, minor), `None` where the driver
/// cannot say: what the tuning results shipped for one GPU model are keyed by.
pub fn compute_capability(device_index: usize) -> Option<(i32, i32)> {
    gpu_model(device_index).ok().map(|m| m.capability)
}

/// CUDA device `device_index`'s name and memory in bytes, `None` where the driver cannot say:
/// what a run's memory plan is checked against, read without creating a context (which would
/// itself take memory and time).
pub fn gpu_memory(device_index: usize) -> Option<(String, u64)> {
    use cudarc::driver::result;
    result::init().ok()?;
    let device = result::device::get(device_index as i32).ok()?;
    let name = result::device::get_name(device).ok()?;
    // SAFETY: the device handle is valid.
    let total = unsafe { result::device::total_mem(device) }.ok()?;
    Some((name, total as u64))
}

/// The name and compute capability of CUDA device `device_index`.
fn gpu_model(device_index: usize) -> Result<GpuModel, EngineError> {
    use cudarc::driver::{result, sys::CUdevice_attribute as A};
    result::init().map_err(driver("CUDA driver"))?;
    let device = result::device::get(device_index as i32).map_err(driver("CUDA device"))?;
    let attribute = |a| {
        // SAFETY: the device handle is valid.
        unsafe { result::device::get_attribute(device, a) }.map_err(driver("CUDA device attribute"))
    };
    Ok(GpuModel {
        name: result::device::get_name(device).map_err(driver("CUDA device name"))?,
        capability: (
            attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ),
    })
}

/// The primary context of `device_index` (retained, and made current on this thread) and the
/// device's model.
fn primary_context(
    device_index: usize,
) -> Result<(cudarc::driver::sys::CUcontext, GpuModel), EngineError> {
    use cudarc::driver::result;
    let model = gpu_model(device_index)?;
    let device = result::device::get(device_index as i32).map_err(driver("CUDA device"))?;
    // SAFETY: the device handle is valid; cubecl retains the same primary context.
    let ctx = unsafe { result::primary_ctx::retain(device) }.map_err(driver("CUDA context"))?;
    unsafe { result::ctx::set_current(ctx) }.map_err(driver("CUDA context"))?;
    Ok((ctx, model))
}
