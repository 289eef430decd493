//! Loading cuDNN at run time: the shared library, its version, a handle on the device's
//! primary context, and cuDNN's status codes as errors.

use cudarc::cudnn::sys;

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
    Failed(String),
}

/// What [`init`](super::init) found.
#[derive(Debug, Clone)]
pub struct CudnnInfo {
    /// cuDNN's version number (e.g. 90100 for 9.1.0).
    pub version: usize,
    /// Algorithms already in it.
    pub cached: usize,
}

impl CudnnInfo {
    /// `9.1.0` for 90100.
    pub fn version_string(&self) -> String {
        let v = self.version;
        format!("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100)
    }
}

/// A loaded cuDNN: its version, a handle, and the device's primary context it was made on.
pub(super) struct Loaded {
    pub version: usize,
    pub handle: sys::cudnnHandle_t,
    pub ctx: cudarc::driver::sys::CUcontext,
}

/// Opens `libcudnn.so.9`, checks its version and creates a handle on CUDA device
/// `device_index`'s primary context (made current on this thread).
pub(super) fn load(device_index: usize) -> Result<Loaded, CudnnUnavailable> {
    // SAFETY: probing for the library only opens it.
    if !unsafe { sys::is_culib_present() } {
        return Err(CudnnUnavailable::NotFound);
    }
    // A missing symbol panics inside cudarc's loader: turn it into an error.
    let probe = std::panic::catch_unwind(|| unsafe { sys::cudnnGetVersion() });
    let version = probe.map_err(|_| {
        CudnnUnavailable::Failed("the library has no cudnnGetVersion symbol".into())
    })?;
    if version < MIN_CUDNN_VERSION {
        return Err(CudnnUnavailable::TooOld { found: version });
    }
    let ctx = primary_context(device_index).map_err(CudnnUnavailable::Failed)?;
    let handle = std::panic::catch_unwind(|| {
        let mut handle = std::ptr::null_mut();
        // SAFETY: the device's primary context is current on this thread.
        let status = unsafe { sys::cudnnCreate(&mut handle) };
        (status, handle)
    })
    .map_err(|_| CudnnUnavailable::Failed("the library has no cudnnCreate symbol".into()))?;
    if handle.0 != sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
        return Err(CudnnUnavailable::Failed(format!(
            "cudnnCreate: {:?}",
            handle.0
        )));
    }
    Ok(Loaded {
        version,
        handle: handle.1,
        ctx,
    })
}

fn primary_context(device_index: usize) -> Result<cudarc::driver::sys::CUcontext, String> {
    use cudarc::driver::result;
    result::init().map_err(|e| format!("CUDA driver: {e}"))?;
    let device = result::device::get(device_index as i32)
        .map_err(|e| format!("CUDA device {device_index}: {e}"))?;
    // SAFETY: the device handle is valid; cubecl retains the same primary context.
    let ctx =
        unsafe { result::primary_ctx::retain(device) }.map_err(|e| format!("CUDA context: {e}"))?;
    unsafe { result::ctx::set_current(ctx) }.map_err(|e| format!("CUDA context: {e}"))?;
    Ok(ctx)
}

/// `Err("what: status")` unless cuDNN reported success.
pub(super) fn check(status: sys::cudnnStatus_t, what: &str) -> Result<(), String> {
    if status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what}: {status:?}"))
    }
}
