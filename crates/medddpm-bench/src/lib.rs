//! Benchmarks of the Med-DDPM U-Net on burn's backends: the training micro-step (forward, L1
//! loss, backward, Adam) and the sampling step, over a matrix of backend x precision x layout,
//! with first-step (compilation and tuning) delays, peak memory, a per-operation breakdown and
//! an agreement check against a float64 CPU reference. `medddpm bench` and `medddpm check`
//! drive it ([`run_bench`] with [`BenchOptions`] filled from their switches).
#![warn(missing_docs)]

pub mod cell;
mod child;
pub mod error;
pub mod gpu_trace;
pub mod host_profile;
pub mod matrix;
pub mod memory;
pub mod options;
pub mod probe;
pub mod record;
pub mod reference;
pub mod report;
pub mod run;
pub mod scaling;
pub mod single;
pub mod threads;

pub use error::{Error, Result};
pub use options::{BenchOptions, Model, Workload};
pub use record::{BenchRecord, GraphRun, RecordBackend, RecordStatus, Source};
pub use run::{run_bench, write_reports, BenchReport};
pub use scaling::{
    run_scaling, LauncherFor, ScalingOptions, ScalingRecord, ScalingRun, ScalingTask,
};
pub use single::{bench_one, bench_one_with_partial, median, SingleConfig};

#[cfg(test)]
mod tests;
