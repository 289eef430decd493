//! Work that runs on whichever backend the user picked: the task trait and what a task learns
//! about where it runs.

use std::path::PathBuf;

use burn::prelude::DeviceOps;
use burn::tensor::backend::DeviceId;
use burn::tensor::DType;
use medddpm_kernels::{Collective, Compute, Launch};

use crate::{BackendKind, ConvEngine, Error, KernelAutodiffBackend, Layout, NormEngine, Precision};

/// What a task learns about where it runs.
#[derive(Debug, Clone)]
pub struct RunEnv {
    /// `cuda`, `wgpu` or `cpu`.
    pub backend: BackendKind,
    /// The precision in force.
    pub precision: Precision,
    /// The layout to give the network.
    pub layout: Layout,
    /// The convolution engine that runs (never `auto`).
    pub conv_engine: ConvEngine,
    /// The GroupNorm code asked for.
    pub norm_engine: NormEngine,
    /// Folder of this backend and precision's tuning cache (GPU backends).
    pub tune_cache: Option<PathBuf>,
    /// Kernels already in that cache when the process started.
    pub tuned_before: usize,
    /// The devices of the run (CUDA indices; `[0]` elsewhere): the first is the one the task
    /// receives, and data-parallel training runs one replica on each. Each was opened and
    /// checked for the precision (and cuDNN started on it where that engine runs).
    pub devices: Vec<usize>,
    /// How the replicas average their gradients (never `auto`; `host` for one device, where
    /// nothing is averaged).
    pub collective: Collective,
    /// Where the replicas run (never `auto`; `threads` for one device). With `processes` this
    /// process opened only the first device: the task starts a process for each other one.
    pub launch: Launch,
}

impl RunEnv {
    /// Precision, layout and engine in one value, as the network takes it.
    pub fn compute(&self) -> Compute {
        Compute {
            precision: self.precision,
            layout: self.layout,
            conv_engine: self.conv_engine,
            norm_engine: self.norm_engine,
        }
    }

    /// The dtype to compute in.
    pub fn compute_dtype(&self) -> DType {
        self.precision.compute_dtype()
    }

    /// The run's devices on the backend of `first`, the device the task received.
    pub fn devices_like<D: DeviceOps>(&self, first: &D) -> Vec<D> {
        let type_id = first.to_id().type_id;
        self.devices
            .iter()
            .map(|&i| D::from_id(DeviceId::new(type_id, i as u16)))
            .collect()
    }

    /// [`Error::OneDevice`] unless the run has one device: for the tasks of commands that run
    /// on one (`medddpm sample`, ...).
    pub fn one_device(&self, command: &str) -> Result<(), Error> {
        crate::devices::one_device(command, &self.devices)
    }
}

/// Work that runs on whichever backend the user picked.
pub trait BackendTask {
    /// What the work returns.
    type Output;
    /// The task's own error. It holds the backend's set-up errors too: [`run_on`] returns them
    /// through it (a binary's `anyhow::Error` does; a library's error gets a variant).
    type Error: From<Error>;
    /// Runs the work on backend `B`.
    fn run<B: KernelAutodiffBackend>(
        self,
        device: B::Device,
        env: &RunEnv,
    ) -> Result<Self::Output, Self::Error>;
}

/// What a task run on a backend that was set up returns; the outer error is the set-up's.
pub(crate) type Ran<T> =
    Result<Result<<T as BackendTask>::Output, <T as BackendTask>::Error>, Error>;
