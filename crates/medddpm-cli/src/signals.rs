//! SIGINT and SIGTERM while training: the first asks the session to stop after the optimizer
//! step under way (it writes a checkpoint and releases the run's lock), and the process then
//! exits with 128 + the signal's number, as a shell reports a process the signal ended; a
//! second signal ends the process at once. A scheduler's SIGTERM before its SIGKILL so loses no
//! step. With several devices the lead decides: its replicas stop at the same step (they agree
//! on it each step), and replica processes ignore both signals (a Ctrl-C or a scheduler signals
//! the whole process group), ending when their lead tells them or goes away.

use std::sync::atomic::{AtomicI32, Ordering};

/// The first signal received, 0 before one.
static RECEIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(signal: libc::c_int) {
    // Only async-signal-safe work here: an atomic swap, and `_exit` on the second signal.
    if RECEIVED.swap(signal, Ordering::SeqCst) != 0 {
        // SAFETY: `_exit` is async-signal-safe and ends the process without unwinding.
        unsafe { libc::_exit(128 + signal) };
    }
}

/// Catches SIGINT and SIGTERM from now on (Unix; nothing elsewhere).
pub fn catch_stop_signals() {
    #[cfg(unix)]
    for signal in [libc::SIGINT, libc::SIGTERM] {
        let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        // SAFETY: installs a handler that does only async-signal-safe work.
        unsafe { libc::signal(signal, handler) };
    }
}

/// Ignores SIGINT and SIGTERM from now on: a replica process, whose lead decides when to stop.
pub fn ignore_stop_signals() {
    #[cfg(unix)]
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: sets a signal's disposition to "ignore".
        unsafe { libc::signal(signal, libc::SIG_IGN) };
    }
}

/// The signal received, if one was.
pub fn received() -> Option<i32> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        signal => Some(signal),
    }
}

/// The error a run stopped by a signal ends with: `main` exits with 128 + the signal's number.
#[derive(Debug)]
pub struct StoppedBySignal(pub i32);

impl std::fmt::Display for StoppedBySignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "stopped by signal {} (a checkpoint of the last step was written; --resume continues)",
            self.0
        )
    }
}

impl std::error::Error for StoppedBySignal {}
