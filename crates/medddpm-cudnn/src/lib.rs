//! NVIDIA's libraries on burn's fused CUDA backend, for `medddpm-kernels`' CUDA implementation
//! of its backend trait: cuDNN's 3-D convolutions with both gradients (this page), cuBLAS's
//! matrix products ([`cublas`]), CUDA graphs of a whole step ([`cuda_graph`]) and uploads from
//! page-locked host memory ([`pinned`]).
//!
//! The cuDNN convolution engine:
//!
//! - **Library.** `libcudnn.so.9` is loaded at run time through `cudarc` (the version
//!   `cubecl-cuda` already uses), so building needs no CUDA toolkit; [`init`] says whether it
//!   loads and why not.
//! - **Stream.** Every call is enqueued on the CUDA stream cubecl runs its own kernels on (the
//!   patched `cubecl-cuda` hands it out with each buffer, see
//!   `vendor/cubecl-cuda/README.medddpm.md`), so cuDNN and burn's kernels stay ordered without
//!   any device synchronisation.
//! - **Memory.** Inputs, outputs and the workspace are buffers of burn's memory pool, borrowed
//!   by raw device pointer for the duration of the enqueue; nothing here frees them.
//! - **Algorithms.** Per shape, the first call times the candidates (`cudnnFind*Ex`, what
//!   PyTorch's `cudnn.benchmark` does) and keeps the winner in a JSON cache file beside the
//!   kernel-tuning cache, so a warm start does not search again.
//! - **Devices.** [`init`] opens cuDNN on each CUDA device a run uses; a convolution runs on
//!   the engine of its operands' device. Each device has its own handles, context, descriptors
//!   and lock, so the replicas of data-parallel training (one thread per device) never wait
//!   for one another; the devices of one GPU model share their algorithm choices (a timing on
//!   one holds for the others), read only on a shape's first calls.
//! - **Threads.** burn-fusion runs operations on its own thread, which hands kernel launches to
//!   cubecl's device thread without waiting. Once a shape's algorithm is known, a convolution is
//!   handed over the same way: one task on cubecl's device thread resolves the buffers and calls
//!   cuDNN, in order with the kernels queued before it. Waiting for the device thread instead
//!   (one round trip per call) tied the fusion thread to the GPU's progress at every
//!   convolution: on an H100, 132 waits of about 0.4 ms per bf16 training step, 55 ms of the
//!   fusion thread's 123 (docs/benchmarks).
//! - **Plans.** For 16-bit precisions and TF32 the device thread's calls run execution plans of
//!   cuDNN's graph API, built once per shape (`graph`): the legacy functions finalize a plan
//!   inside every call, about 80 us of the device thread's time each, and offer no knobs. The
//!   first device-thread call of a shape times the heuristics' proposals (for TF32 only those
//!   that keep f32 inputs and sums), then the fastest one's knobs, and still runs the legacy
//!   function; the choice is kept in `cudnn-plans.json`. `MEDDDPM_CUDNN_LEGACY=1` keeps every
//!   call on the legacy functions (FP32 uses them always: its math type is what keeps tensor
//!   cores out).
//! - **Failure.** A call cuDNN refuses falls back to burn's kernel for that shape, saying so once.
//!   A shape goes to the device thread only once a call of it succeeded where burn-fusion runs
//!   it (the first call of each shape, where a refusal can still fall back); a later call that
//!   fails there (none was seen to) cannot fall back, and is reported by [`device_error`](crate::device_error()),
//!   which the trainer (each step), the sampler (each sample) and the bench (each
//!   synchronisation) check.

#![warn(missing_docs)]
// Empty without CUDA (see the crate's features).
#![cfg(feature = "cuda")]

// The layers below, under the paths the engine was written with.
pub(crate) use medddpm_ops::{capture, compute, cuda, device_error, reference};

mod algorithms;
mod calls;
pub mod cublas;
pub mod cuda_graph;
pub mod custom;
mod descriptors;
mod device_thread;
mod devices;
pub mod engine;
mod error;
mod graph;
mod layout;
mod library;
pub mod operands;
pub mod pinned;
#[cfg(test)]
mod tests;

pub use crate::device_error::device_error;
pub use devices::init;
pub use error::EngineError;
pub use library::{compute_capability, gpu_memory, CudnnInfo, CudnnUnavailable, MIN_CUDNN_VERSION};
