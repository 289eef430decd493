//! Panics of the libraries underneath (cubecl, burn) turned into messages. cubecl panics when a
//! device is missing or its memory runs out, burn when a record is malformed; the callers that
//! can recover (opening a device, loading a checkpoint) catch them, and the process-wide hook
//! that cannot (out of memory) reads their message.

use std::any::Any;
use std::sync::{Arc, Mutex};

/// The text of a panic's payload (`panic!` with a message gives a `String` or a `&str`).
pub fn panic_message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("no detail")
}

/// A panic caught by [`quiet_catch`]: the message of the first panic raised while it ran.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Panicked(pub String);

/// Runs `f`, turning a panic into the message of the first panic raised meanwhile (cubecl's
/// device thread panics with the reason and the caller then sees only a closed channel), with
/// the process-wide panic hook silenced meanwhile: for start-up and loading, not for code
/// that runs beside other threads' work.
pub fn quiet_catch<T>(f: impl FnOnce() -> T) -> Result<T, Panicked> {
    let first: Arc<Mutex<Option<String>>> = Arc::default();
    let keep = first.clone();
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        keep.lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(|| panic_message(info.payload()).to_string());
    }));
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    std::panic::set_hook(hook);
    out.map_err(|panic| {
        Panicked(
            first
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .unwrap_or_else(|| panic_message(panic.as_ref()).to_string()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_panic_message_is_kept_and_the_value_passes() {
        assert_eq!(quiet_catch(|| 7), Ok(7));
        let err = quiet_catch(|| -> u8 { panic!("no adapter {}", 3) }).unwrap_err();
        assert_eq!(err.0, "no adapter 3");
        // A panic in another thread first, then the caller's own: the first is kept.
        let err = quiet_catch(|| {
            let _ = std::thread::spawn(|| panic!("device thread: out of memory")).join();
            panic!("RecvError")
        })
        .unwrap_err();
        assert_eq!(err.0, "device thread: out of memory");
    }
}
