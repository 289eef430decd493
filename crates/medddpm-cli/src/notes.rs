//! Where the libraries' notes are printed. The library crates print nothing: they report
//! through the `log` facade (the engine a run chose, a fallback said once per shape, a
//! device-thread failure, the bench's progress, kernels as they are tuned), and this logger,
//! installed once by `main`, writes our crates' records to stderr as plain lines, the same text
//! the user has always seen. Kernels being tuned are a spinner on a terminal, hidden between
//! bursts so that other progress bars are not overdrawn, and `[tune]` lines elsewhere (device
//! logs keep them). Other crates' records (burn's, cubecl's) stay silent, as they always were.

use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use log::{Level, LevelFilter, Log, Metadata, Record};

/// A tuning burst is over when no kernel was tuned for this long.
const TUNE_IDLE: Duration = Duration::from_secs(3);

struct Notes {
    terminal: bool,
    tuning: Arc<Mutex<Option<(ProgressBar, Instant)>>>,
}

impl Notes {
    fn tuned(&self, message: String) {
        if !self.terminal {
            eprintln!("[tune] {message}");
            return;
        }
        let mut slot = self.tuning.lock().unwrap_or_else(|e| e.into_inner());
        let spinner = match slot.take() {
            Some((s, _)) if !s.is_finished() => s,
            _ => {
                let s = ProgressBar::new_spinner();
                s.set_style(
                    ProgressStyle::with_template("{spinner} tuning kernels [{elapsed}] {msg}")
                        .expect("valid template"),
                );
                s.enable_steady_tick(Duration::from_millis(120));
                self.hide_when_idle();
                s
            }
        };
        spinner.set_message(message);
        *slot = Some((spinner, Instant::now()));
    }

    /// Clears the spinner once a burst of tuning is over.
    fn hide_when_idle(&self) {
        let tuning = self.tuning.clone();
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(250));
            let mut slot = tuning.lock().unwrap_or_else(|e| e.into_inner());
            match slot.as_ref() {
                Some((s, last)) if last.elapsed() > TUNE_IDLE => {
                    s.finish_and_clear();
                    *slot = None;
                    return;
                }
                Some(_) => {}
                None => return,
            }
        });
    }

    /// Ends a tuning spinner before a plain line is written under it.
    fn clear_tuning(&self) {
        let mut slot = self.tuning.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((s, _)) = slot.take() {
            s.finish_and_clear();
        }
    }
}

impl Log for Notes {
    fn enabled(&self, metadata: &Metadata) -> bool {
        metadata.level() <= Level::Info && metadata.target().starts_with("medddpm")
    }

    fn log(&self, record: &Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        if record.target() == medddpm_backend::TUNE_NOTES {
            self.tuned(record.args().to_string());
        } else {
            self.clear_tuning();
            eprintln!("{}", record.args());
        }
    }

    fn flush(&self) {}
}

/// Installs the logger (once, before any library runs).
pub fn install() {
    let notes = Notes {
        terminal: std::io::stderr().is_terminal(),
        tuning: Arc::new(Mutex::new(None)),
    };
    // The logger lives as long as the process.
    if log::set_logger(Box::leak(Box::new(notes))).is_ok() {
        log::set_max_level(LevelFilter::Info);
    }
}
