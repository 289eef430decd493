//! The first failure of work handed to a GPU device thread without waiting (a cuDNN
//! convolution, a cuBLAS product, a graph replay, an all-reduce across processes): the caller
//! learns of it at its next check, since nothing waited for the call.

use std::sync::Mutex;

/// The first convolution that failed on a device thread since [`device_error`] last looked.
static DEVICE_ERROR: Mutex<Option<String>> = Mutex::new(None);

/// The first convolution that failed on one of cubecl's device threads (any device) since the
/// last call, if any; the message names the device. Such a failure leaves that convolution's
/// output unwritten, so whatever step it belonged to is invalid: callers stop with this as the
/// error.
pub fn device_error() -> Option<String> {
    DEVICE_ERROR
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
}

/// Keeps `message` as the device error (the first one since [`device_error`] last looked) and
/// reports it (`log`): for other work handed to a device thread without waiting (the all-reduce
/// across processes).
pub fn record_device_error(message: String) {
    log::error!("{message}");
    DEVICE_ERROR
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert(message);
}
