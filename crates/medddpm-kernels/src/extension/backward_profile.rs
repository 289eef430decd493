//! Time spent in the convolution gradients of autodiff backward passes, for the bench's
//! breakdown. Off by default; when on, every gradient is synchronised before and after, so
//! the backward pass runs slower than unprofiled.

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;

static ON: AtomicBool = AtomicBool::new(false);
static MS: Mutex<[f64; 2]> = Mutex::new([0.0; 2]);

/// Starts accumulating (and clears what was accumulated).
pub fn start() {
    *MS.lock().unwrap_or_else(|e| e.into_inner()) = [0.0; 2];
    ON.store(true, Ordering::SeqCst);
}

/// Stops and returns the milliseconds in `[data gradients, weight gradients]`.
pub fn stop() -> [f64; 2] {
    ON.store(false, Ordering::SeqCst);
    *MS.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) struct Timer<B: Backend> {
    device: Option<B::Device>,
    last: Cell<Instant>,
    _b: PhantomData<B>,
}

impl<B: Backend> Timer<B> {
    pub(crate) fn start(x: &FloatTensor<B>) -> Self {
        let device = ON.load(Ordering::Relaxed).then(|| B::float_device(x));
        if let Some(d) = &device {
            let _ = B::sync(d);
        }
        Timer {
            device,
            last: Cell::new(Instant::now()),
            _b: PhantomData,
        }
    }

    /// Charges the time since the previous lap to slot `i`, once `out` is computed.
    pub(crate) fn lap(&self, i: usize, out: FloatTensor<B>) -> FloatTensor<B> {
        if let Some(d) = &self.device {
            let _ = B::sync(d);
            let now = Instant::now();
            let ms = (now - self.last.replace(now)).as_secs_f64() * 1e3;
            MS.lock().unwrap_or_else(|e| e.into_inner())[i] += ms;
        }
        out
    }
}
