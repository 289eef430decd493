//! Points a program marks in its work (`step start`, `losses read`) while a profiler records,
//! on the profiler's clock: the bench's GPU trace puts them beside the device's activities to
//! say what the host was doing while the GPU idled. Marking costs one atomic load while
//! nothing records.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// A point marked, on the recording's clock (ns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// What had just happened.
    pub label: &'static str,
    /// When, ns.
    pub at_ns: u64,
}

/// The recording's clock: now in ns, `None` where it cannot tell.
pub type Clock = fn() -> Option<u64>;

static RECORDING: AtomicBool = AtomicBool::new(false);
static CLOCK: Mutex<Option<Clock>> = Mutex::new(None);
static MARKS: Mutex<Vec<Mark>> = Mutex::new(Vec::new());

/// Marks `label` now, while a recording runs (nothing otherwise).
pub fn mark(label: &'static str) {
    if !RECORDING.load(Ordering::Relaxed) {
        return;
    }
    let clock = *CLOCK.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(at_ns) = clock.and_then(|now| now()) {
        MARKS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Mark { label, at_ns });
    }
}

/// Starts recording marks, timed by `clock` (ns), forgetting earlier ones.
pub fn start(clock: Clock) {
    *CLOCK.lock().unwrap_or_else(|p| p.into_inner()) = Some(clock);
    MARKS.lock().unwrap_or_else(|p| p.into_inner()).clear();
    RECORDING.store(true, Ordering::Relaxed);
}

/// Stops recording and hands over the marks.
pub fn take() -> Vec<Mark> {
    RECORDING.store(false, Ordering::Relaxed);
    std::mem::take(&mut *MARKS.lock().unwrap_or_else(|p| p.into_inner()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_are_kept_only_while_recording() {
        mark("before");
        start(|| Some(7));
        mark("during");
        let marks = take();
        mark("after");
        assert_eq!(
            marks,
            [Mark {
                label: "during",
                at_ns: 7
            }]
        );
        assert!(take().is_empty());
    }
}
