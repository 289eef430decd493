//! Why one call of the engine did not run. Where burn-fusion runs the call, the caller falls
//! back to burn's kernel for that shape (said once); on a device thread, where nothing can fall
//! back, the message becomes the device error that the trainer, the sampler and the bench
//! check.

use cudarc::cudnn::sys::cudnnStatus_t;
use cudarc::driver::DriverError;

/// What failed, in the words of the library that failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EngineError {
    /// A cuDNN function returned an error status.
    #[error("{what}: {status:?}")]
    Cudnn {
        /// The call, or what it was for.
        what: String,
        /// cuDNN's status.
        status: cudnnStatus_t,
    },
    /// A cuBLAS function returned an error status.
    #[error("{what} failed with cuBLAS status {status}")]
    Cublas {
        /// The function.
        what: &'static str,
        /// cuBLAS's status number.
        status: i32,
    },
    /// A CUDA driver call failed.
    #[error("{what}: {source}")]
    Driver {
        /// What the call was for.
        what: &'static str,
        /// The driver's error.
        source: DriverError,
    },
    /// A shared library did not load, or lacks a function.
    #[error("{0}")]
    Library(String),
    /// cubecl could not hand over a buffer or run the call on its device thread.
    #[error("{what}: {message}")]
    Cubecl {
        /// What was asked of cubecl.
        what: &'static str,
        /// cubecl's error, as it formats it.
        message: String,
    },
    /// The call is outside what this engine computes (a dtype, a layout, a workspace, an
    /// algorithm number from a cache); burn's kernel computes it instead.
    #[error("{0}")]
    Unsupported(String),
    /// An error with what was being done when it happened.
    #[error("{context}: {source}")]
    Context {
        /// Where it happened (a device, a shape's key).
        context: String,
        /// The error.
        source: Box<EngineError>,
    },
}

impl EngineError {
    /// This error, said to have happened in `context`.
    pub fn context(self, context: impl Into<String>) -> Self {
        Self::Context {
            context: context.into(),
            source: Box::new(self),
        }
    }
}

/// `Err(EngineError::Cudnn)` unless cuDNN reported success.
pub(crate) fn check(status: cudnnStatus_t, what: impl Into<String>) -> Result<(), EngineError> {
    match status {
        cudnnStatus_t::CUDNN_STATUS_SUCCESS => Ok(()),
        status => Err(EngineError::Cudnn {
            what: what.into(),
            status,
        }),
    }
}

/// A driver error of the call that was for `what`.
pub(crate) fn driver(what: &'static str) -> impl FnOnce(DriverError) -> EngineError {
    move |source| EngineError::Driver { what, source }
}

/// A cubecl error of the request `what` (cubecl's errors are formatted with `Debug`).
pub(crate) fn cubecl<E: std::fmt::Debug>(what: &'static str) -> impl FnOnce(E) -> EngineError {
    move |e| EngineError::Cubecl {
        what,
        message: format!("{e:?}"),
    }
}
