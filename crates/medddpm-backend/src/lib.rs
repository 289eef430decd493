//! Picks and configures the burn backend a command runs on: CUDA, wgpu or the CPU, the
//! precision (strict FP32, TF32 or bf16), the activation layout, and the kernel-tuning cache
//! with a display of what is being tuned.
//!
//! The precision switches are real:
//! - `fp32`: every convolution and matrix product runs in IEEE f32. On the CubeCL backends this
//!   forbids TF32 tensor cores (through the patched `cubek-matmul`, see
//!   `vendor/cubek-matmul/README.medddpm.md`), so the tuner can only pick f32 FMA kernels.
//! - `tf32`: burn's default on a tensor-core GPU: f32 operands rounded to TF32 in the matrix
//!   units. Refused where the device has no TF32 (the CPU, wgpu/Vulkan).
//! - `bf16`: convolutions, products and activations in bf16, with f32 master weights, Adam
//!   state, EMA, GroupNorm statistics and softmax (see `medddpm_unet::cast_compute_params`).
//!
//! The switch is process-wide on the GPU backends (burn's kernels read it when they are tuned
//! and launched), so one process runs one precision; `medddpm bench` runs each configuration of
//! its matrix in a child process.
#![warn(missing_docs)]

mod devices;
mod error;
mod run;
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
mod shipped_kernels;
mod shipped_tuning;
mod task;
pub mod tune_watch;

#[cfg(any(feature = "cuda", feature = "wgpu"))]
mod cube;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use error::Error;
pub use run::run_on;
pub use task::{BackendTask, RunEnv};
pub use tune_watch::TUNE_NOTES;

/// `--backend`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// CUDA if compiled in and an NVIDIA device is present, else wgpu if compiled in, else CPU.
    #[default]
    Auto,
    /// burn's CUDA backend (`--features cuda`).
    Cuda,
    /// burn's wgpu backend: Vulkan, Metal or DX12 (`--features wgpu`).
    Wgpu,
    /// burn's Flex CPU backend.
    Cpu,
}

impl BackendKind {
    /// Every choice, in the order a command's help lists them.
    pub const ALL: [BackendKind; 4] = [
        BackendKind::Auto,
        BackendKind::Cuda,
        BackendKind::Wgpu,
        BackendKind::Cpu,
    ];

    /// `auto` resolved against what is compiled in and present.
    pub fn resolve(self) -> BackendKind {
        match self {
            BackendKind::Auto if cfg!(feature = "cuda") && nvidia_present() => BackendKind::Cuda,
            BackendKind::Auto if cfg!(feature = "wgpu") => BackendKind::Wgpu,
            BackendKind::Auto => BackendKind::Cpu,
            other => other,
        }
    }

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Auto => "auto",
            BackendKind::Cuda => "cuda",
            BackendKind::Wgpu => "wgpu",
            BackendKind::Cpu => "cpu",
        }
    }

    /// One line saying what the choice means (a command's help shows it beside the name).
    pub fn description(self) -> &'static str {
        match self {
            BackendKind::Auto => {
                "CUDA if compiled in and an NVIDIA device is present, else wgpu if compiled in, else CPU"
            }
            BackendKind::Cuda => "burn's CUDA backend (`--features cuda`)",
            BackendKind::Wgpu => "burn's wgpu backend: Vulkan, Metal or DX12 (`--features wgpu`)",
            BackendKind::Cpu => "burn's Flex CPU backend",
        }
    }

    /// Whether this binary was built with the backend.
    pub fn compiled_in(self) -> bool {
        match self {
            BackendKind::Auto | BackendKind::Cpu => true,
            BackendKind::Cuda => cfg!(feature = "cuda"),
            BackendKind::Wgpu => cfg!(feature = "wgpu"),
        }
    }
}

fn nvidia_present() -> bool {
    std::path::Path::new("/dev/nvidiactl").exists()
}

pub use medddpm_kernels::{
    Collective, Compute, ComputeConfig, ConvEngine, KernelAutodiffBackend, KernelBackend, Launch,
    Layout, NormEngine, Precision, UnknownChoice,
};

/// `Display` and `FromStr` for an enum of named choices (one with `ALL` and `name`): it is
/// written as its name and read from one of `ALL`'s names, compared with `$same` (`str::eq`, or
/// `str::eq_ignore_ascii_case` for any case); `$what` and `$names` word the error.
#[macro_export]
macro_rules! choice_by_name {
    ($ty:ident, $what:literal, $names:literal, $same:path) => {
        impl ::std::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl ::std::str::FromStr for $ty {
            type Err = $crate::UnknownChoice;
            fn from_str(s: &str) -> Result<Self, $crate::UnknownChoice> {
                $ty::ALL
                    .into_iter()
                    .find(|c| $same(c.name(), s))
                    .ok_or_else(|| $crate::UnknownChoice::new($what, s, $names))
            }
        }
    };
}

choice_by_name!(
    BackendKind,
    "backend",
    "auto, cuda, wgpu or cpu",
    str::eq_ignore_ascii_case
);

/// Everything that decides how a command computes.
#[derive(Debug, Clone)]
pub struct ComputeSettings {
    /// Which backend.
    pub backend: BackendKind,
    /// Precision of convolutions and products; `None` is the default of the backend that
    /// runs ([`default_precision`]), decided once `auto` is (so that `auto` falling back to the
    /// CPU gets the CPU's).
    pub precision: Option<Precision>,
    /// Activation layout inside the network.
    pub layout: Layout,
    /// Library for the 3-D convolutions (`auto` is resolved when the backend starts).
    pub conv_engine: ConvEngine,
    /// Code for GroupNorm.
    pub norm_engine: NormEngine,
    /// Root of the kernel-tuning cache (GPU backends); `None` uses [`default_tune_cache`].
    pub tune_cache: Option<PathBuf>,
    /// Show a spinner with each kernel tuned (a line per kernel when stderr is not a terminal).
    pub show_tuning: bool,
    /// Start an empty tuning cache from the results shipped for the GPU model (H100, H200),
    /// where there are some; default true.
    pub shipped_tuning: bool,
    /// Device indices (CUDA), the first the one a task receives; several run data-parallel
    /// training. Default `[0]`.
    pub devices: Vec<usize>,
    /// How several devices average their gradients (`auto` is resolved when the backend
    /// starts).
    pub collective: Collective,
    /// Where several devices' replicas run (`auto` is resolved when the backend starts).
    pub launch: Launch,
    /// The processes of a run that a cluster launcher started, one device each, when this
    /// process is one of them: `collective` is resolved for that many.
    pub cluster_world: Option<usize>,
}

impl ComputeSettings {
    /// [`Error::OneDevice`] unless these settings name one device: for the commands that run
    /// on one (checked before any device starts).
    pub fn one_device(&self, command: &str) -> Result<(), Error> {
        devices::one_device(command, &self.devices)
    }
}

impl Default for ComputeSettings {
    fn default() -> Self {
        Self {
            backend: BackendKind::Auto,
            precision: None,
            layout: Layout::Ncdhw,
            conv_engine: ConvEngine::Auto,
            norm_engine: NormEngine::Kernel,
            tune_cache: None,
            show_tuning: true,
            shipped_tuning: true,
            devices: vec![0],
            collective: Collective::Auto,
            launch: Launch::Auto,
            cluster_world: None,
        }
    }
}

/// What a user asked for about computing (a command's `--backend`, `--precision`, ...
/// switches): each choice left out is filled in by an experiment's `[compute]` table or the
/// default ([`ComputeRequest::settings_with`]).
#[derive(Debug, Clone, Default)]
pub struct ComputeRequest {
    /// Backend to run on.
    pub backend: BackendKind,
    /// Precision of convolutions and matrix products (default: [`default_precision`]).
    pub precision: Option<Precision>,
    /// Memory layout of the activations (default: ncdhw).
    pub layout: Option<Layout>,
    /// Library for the 3-D convolutions (default: auto).
    pub conv_engine: Option<ConvEngine>,
    /// GroupNorm code (default: kernel).
    pub norm_engine: Option<NormEngine>,
    /// Kernel-tuning cache folder of the GPU backends (default: [`default_tune_cache`]).
    pub tune_cache: Option<PathBuf>,
    /// Tune every kernel on this machine, not starting from the shipped results.
    pub no_shipped_tuning: bool,
    /// CUDA device indices, one replica each (default: `[0]`).
    pub devices: Option<Vec<usize>>,
    /// How several devices average their gradients (default: auto).
    pub collective: Option<Collective>,
    /// Where several devices' replicas run (default: auto).
    pub launch: Option<Launch>,
}

impl ComputeRequest {
    /// The settings asked for, defaults filling the rest.
    pub fn settings(&self) -> ComputeSettings {
        self.settings_with(&ComputeConfig::default())
    }

    /// The settings asked for, with an experiment's `[compute]` table filling in what was not
    /// asked for.
    pub fn settings_with(&self, config: &ComputeConfig) -> ComputeSettings {
        ComputeSettings {
            backend: self.backend,
            precision: self.precision.or(config.precision),
            layout: self.layout.or(config.layout).unwrap_or_default(),
            conv_engine: self.conv_engine.or(config.conv_engine).unwrap_or_default(),
            norm_engine: self.norm_engine.or(config.norm_engine).unwrap_or_default(),
            tune_cache: self.tune_cache.clone(),
            show_tuning: true,
            shipped_tuning: !self.no_shipped_tuning,
            devices: (self.devices.clone().or_else(|| config.devices.clone()))
                .unwrap_or_else(|| vec![0]),
            collective: self.collective.or(config.collective).unwrap_or_default(),
            launch: self.launch.or(config.launch).unwrap_or_default(),
            cluster_world: None,
        }
    }
}

/// The precision used when none is asked for: TF32 on CUDA, strict FP32 elsewhere (`auto`:
/// what it resolves to on this machine).
pub fn default_precision(backend: BackendKind) -> Precision {
    match backend.resolve() {
        BackendKind::Cuda => Precision::Tf32,
        _ => Precision::Fp32,
    }
}

/// The kernel-tuning cache used when none is given: `$MEDDDPM_TUNE_CACHE`, else
/// `$XDG_CACHE_HOME/medddpm/tune`, else `~/.cache/medddpm/tune`, else `./.medddpm-tune`.
pub fn default_tune_cache() -> PathBuf {
    if let Some(dir) = std::env::var_os("MEDDDPM_TUNE_CACHE") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("medddpm").join("tune");
    }
    if let Some(home) = std::env::var_os("HOME") {
        return PathBuf::from(home)
            .join(".cache")
            .join("medddpm")
            .join("tune");
    }
    PathBuf::from(".medddpm-tune")
}

#[cfg(test)]
mod tests;
