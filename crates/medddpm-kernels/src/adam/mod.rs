//! Adam updates of many parameter tensors as one backend operation.
//!
//! burn's Adam spends about a dozen tensor operations per parameter tensor and step; with a
//! few hundred parameter tensors that is thousands of operations whose host-side cost, not
//! their arithmetic, made the optimizer phase 15.7-18.9 ms of a bf16 training step on an H100
//! (9.9 ms with one operation per tensor; docs/benchmarks/README.md).
//! [`crate::KernelBackend::adam_steps`] updates a whole list of tensors in one operation (on
//! the CubeCL backends one kernel launch per few dozen tensors), with [`adam_step_reference`]
//! per tensor as its plain-op twin.
//!
//! Its parts: [`reference`](mod@reference) (the operands, [`AdamStep`] and the plain-op twin,
//! below the trait), `ops` ([`adam_step`] on one tensor, through `KernelBackend`) and `check`
//! ([`engine_vs_reference`]); `sum` ([`sum::engine_vs_reference`] and the twin of
//! [`crate::KernelBackend::sum_f32`], the micro-batches' gradients summed before the update).

mod check;
mod ops;
pub use crate::reference::adam as reference;
pub mod sum;

pub use check::{case_lengths, engine_vs_reference};
pub use ops::adam_step;
pub use reference::{adam_step_reference, AdamOutput, AdamStep, AdamTensors};
