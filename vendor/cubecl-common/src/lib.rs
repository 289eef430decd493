#![no_std]
#![warn(missing_docs)]

//! # `CubeCL` Common Library
//!
//! This library contains common types used by other crates that must be shared.

#[cfg(feature = "std")]
extern crate std;

#[macro_use]
extern crate derive_new;

/// Rand module contains types for random number generation for non-std environments and for
/// std environments.
pub mod rand;

/// A circular, allocation-free arena for reusable memory blocks.
#[cfg(feature = "std")]
pub mod arena;

/// Backtrace module to build error reports.
pub mod backtrace;

/// Device module.
pub mod device;

/// Device handle module.
pub mod device_handle {
    pub use super::device::handle::DeviceHandle;
}

/// Utilities module to manipulate bytes.
#[cfg(feature = "serde")]
pub mod bytes;

/// Stub module contains types for stubs for non-std environments and for std environments.
pub mod stub;

/// Stream id related utilities.
pub mod stream_id;

/// Cache module for an efficient in-memory and persistent database.
#[cfg(feature = "cache")]
pub mod cache;

#[cfg(feature = "cache")]
pub(crate) mod cache_file;

/// Chunked cache optimized for compilation artifacts
#[cfg(feature = "compilation-cache")]
pub mod compilation_cache;

/// Module for benchmark timings
pub mod benchmark;

/// Runtime configuration trait shared across crates.
pub mod config;

/// Module for profiling any executable part
pub mod profile;

/// Useful when you need to read async data without having to decorate each function with async
/// notation.
pub mod reader;

/// Future utils with a compatible API for native, non-std and wasm environments.
pub mod future;

/// Quantization primitives required outside of `cubecl-quant`
pub mod quant;

/// Format utilities.
pub mod format;

/// Various utilities to create ID's.
extern crate alloc;

/// Hashing helper for stable, collision resistant hashes
#[cfg(feature = "hash")]
pub mod hash;

/// Custom float implementations
mod float;

pub use float::*;

/// medddpm-rs patch: how busy the device runner threads are, and how long their callers wait
/// for them (see `README.medddpm.md`).
#[cfg(feature = "std")]
pub mod busy {
    use core::sync::atomic::{AtomicU64, Ordering};

    /// One counter: events and the nanoseconds they took.
    pub struct Counter {
        count: AtomicU64,
        nanos: AtomicU64,
    }

    impl Counter {
        const fn new() -> Self {
            Self {
                count: AtomicU64::new(0),
                nanos: AtomicU64::new(0),
            }
        }

        /// Adds one event that started at `since`.
        pub fn add(&self, since: std::time::Instant) {
            self.count.fetch_add(1, Ordering::Relaxed);
            self.nanos
                .fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }

        /// (events, seconds).
        pub fn read(&self) -> (u64, f64) {
            (
                self.count.load(Ordering::Relaxed),
                self.nanos.load(Ordering::Relaxed) as f64 * 1e-9,
            )
        }

        fn reset(&self) {
            self.count.store(0, Ordering::Relaxed);
            self.nanos.store(0, Ordering::Relaxed);
        }
    }

    /// Which thread: 0 any other thread, 1 an upstream runner (burn-fusion's), 2 a downstream
    /// runner (the compute server's).
    pub const THREAD_KINDS: usize = 3;

    /// Time the runner threads spent running tasks: `[_, upstream, downstream]`.
    pub static RUNNING: [Counter; THREAD_KINDS] = [Counter::new(), Counter::new(), Counter::new()];

    /// Time threads of each kind spent waiting for a runner: for room in its full queue, or
    /// for the result of a blocking call.
    pub static WAITING: [Counter; THREAD_KINDS] = [Counter::new(), Counter::new(), Counter::new()];

    /// What the compute server's runner spends its time on: [`IN_CALL`]'s rows.
    pub const CALL_KINDS: usize = 13;
    /// A kernel launch task as a whole (cubecl's bookkeeping and the driver call).
    pub const LAUNCH_TASK: usize = 0;
    /// The driver's `cuLaunchKernel` alone (blocks while the GPU's launch queue is full).
    pub const DRIVER_LAUNCH: usize = 1;
    /// Memory reservations for new tensors (the pools' search).
    pub const RESERVE: usize = 2;
    /// cuDNN calls that enqueue a convolution.
    pub const CUDNN: usize = 3;
    /// cuBLAS calls that enqueue a product.
    pub const CUBLAS: usize = 4;
    /// Parts of a launch task: the kernel's id (its compile-time configuration) ...
    pub const LAUNCH_ID: usize = 5;
    /// ... the command (the stream resolved against the buffers' streams) ...
    pub const LAUNCH_COMMAND: usize = 6;
    /// ... the metadata that does not fit the launch parameters, uploaded ...
    pub const LAUNCH_METADATA: usize = 7;
    /// ... the buffers' device pointers ...
    pub const LAUNCH_RESOURCES: usize = 8;
    /// ... and the launch itself (the compiled kernel found, the driver called) ...
    pub const LAUNCH_KERNEL: usize = 9;
    /// ... of which the release of uploaded metadata's staging buffers (a wait for the GPU to
    /// pass an earlier fence).
    pub const LAUNCH_FLUSH: usize = 10;
    /// `cuGraphLaunch` (medddpm-kernels' CUDA graphs).
    pub const GRAPH_LAUNCH: usize = 11;
    /// A graph replay's copies of its inputs in and its outputs out.
    pub const GRAPH_COPIES: usize = 12;

    /// Time inside the calls named by [`LAUNCH_TASK`] ... [`LAUNCH_FLUSH`].
    pub static IN_CALL: [Counter; CALL_KINDS] = [
        Counter::new(),
        Counter::new(),
        Counter::new(),
        Counter::new(),
        Counter::new(),
        Counter::new(),
        Counter::new(),
        Counter::new(),
        Counter::new(),
        Counter::new(),
        Counter::new(),
        Counter::new(),
        Counter::new(),
    ];

    /// Zeroes every counter.
    pub fn reset() {
        for c in RUNNING.iter().chain(WAITING.iter()).chain(IN_CALL.iter()) {
            c.reset();
        }
    }
}
