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

pub mod tune_watch;

#[cfg(any(feature = "cuda", feature = "wgpu"))]
mod cube;

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use burn::tensor::DType;
use clap::ValueEnum;
use serde::{Deserialize, Serialize};

/// A backend, precision or layout this binary or device cannot run: a refusal, not a failure.
#[derive(Debug, Clone)]
pub struct Unsupported(pub String);

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unsupported {}

/// Returns an [`Unsupported`] error.
macro_rules! unsupported {
    ($($arg:tt)*) => {
        return Err(anyhow::Error::new($crate::Unsupported(format!($($arg)*))))
    };
}
#[allow(unused_imports)]
pub(crate) use unsupported;

/// `--backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// CUDA if compiled in and an NVIDIA device is present, else wgpu if compiled in, else CPU.
    Auto,
    /// burn's CUDA backend (`--features cuda`).
    Cuda,
    /// burn's wgpu backend: Vulkan, Metal or DX12 (`--features wgpu`).
    Wgpu,
    /// burn's Flex CPU backend.
    Cpu,
}

impl BackendKind {
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
    Compute, ComputeConfig, ConvEngine, KernelAutodiffBackend, KernelBackend, Layout, NormEngine,
    Precision,
};

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for BackendKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        <BackendKind as ValueEnum>::from_str(s, true)
            .map_err(|_| format!("unknown backend '{s}' (expected auto, cuda, wgpu or cpu)"))
    }
}

/// Everything that decides how a command computes.
#[derive(Debug, Clone)]
pub struct ComputeSettings {
    /// Which backend.
    pub backend: BackendKind,
    /// Precision of convolutions and products.
    pub precision: Precision,
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
}

impl Default for ComputeSettings {
    fn default() -> Self {
        Self {
            backend: BackendKind::Auto,
            precision: Precision::Fp32,
            layout: Layout::Ncdhw,
            conv_engine: ConvEngine::Auto,
            norm_engine: NormEngine::Kernel,
            tune_cache: None,
            show_tuning: true,
        }
    }
}

/// The command-line switches every command that computes shares.
#[derive(Debug, Clone, clap::Args)]
pub struct ComputeArgs {
    /// Backend to run on.
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: BackendKind,
    /// Precision of convolutions and matrix products: fp32 (strict IEEE, no tensor cores),
    /// tf32 (tensor cores; CUDA only) or bf16 (mixed precision, f32 master weights).
    /// Default: tf32 on CUDA (what burn and PyTorch's cuDNN convolutions do by default; strict
    /// fp32 is many times slower there), fp32 elsewhere.
    #[arg(long)]
    pub precision: Option<Precision>,
    /// Memory layout of the activations: ncdhw (channels-first, the default) or ndhwc
    /// (channels-last).
    #[arg(long)]
    pub layout: Option<Layout>,
    /// Library for the 3-D convolutions: auto (the default: cuDNN on CUDA when libcudnn.so.9
    /// loads, else burn's CubeCL kernels), cudnn (an error where it cannot run) or cubecl.
    #[arg(long)]
    pub conv_engine: Option<ConvEngine>,
    /// GroupNorm code: kernel (the default: CubeCL kernels on the CUDA and wgpu backends, burn's
    /// ops on the CPU) or ops (burn's ops everywhere, the kernels' reference).
    #[arg(long)]
    pub norm_engine: Option<NormEngine>,
    /// Kernel-tuning cache folder of the GPU backends (default: $MEDDDPM_TUNE_CACHE,
    /// ~/.cache/medddpm/tune).
    #[arg(long)]
    pub tune_cache: Option<PathBuf>,
}

impl ComputeArgs {
    /// The settings these switches select.
    pub fn settings(&self) -> ComputeSettings {
        self.settings_with(&ComputeConfig::default())
    }

    /// The settings these switches select, with an experiment's `[compute]` table filling in
    /// what was not given on the command line.
    pub fn settings_with(&self, config: &ComputeConfig) -> ComputeSettings {
        ComputeSettings {
            backend: self.backend,
            precision: self
                .precision
                .or(config.precision)
                .unwrap_or_else(|| default_precision(self.backend)),
            layout: self.layout.or(config.layout).unwrap_or_default(),
            conv_engine: self.conv_engine.or(config.conv_engine).unwrap_or_default(),
            norm_engine: self.norm_engine.or(config.norm_engine).unwrap_or_default(),
            tune_cache: self.tune_cache.clone(),
            show_tuning: true,
        }
    }
}

/// The precision used when none is asked for: TF32 on CUDA, strict FP32 elsewhere.
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
}

/// Work that runs on whichever backend the user picked.
pub trait BackendTask {
    /// What the work returns.
    type Output;
    /// Runs the work on backend `B`.
    fn run<B: KernelAutodiffBackend>(
        self,
        device: B::Device,
        env: &RunEnv,
    ) -> anyhow::Result<Self::Output>;
}

/// Resolves `auto`, configures precision and tuning, checks the device supports the precision,
/// and runs `task`.
pub fn run_on<T: BackendTask>(settings: &ComputeSettings, task: T) -> anyhow::Result<T::Output> {
    let backend = settings.backend.resolve();
    let mut task = Some(task);
    match run_resolved(backend, settings, &mut task) {
        Err(e) if e.is::<NoDevice>() => {
            let why = e.downcast::<NoDevice>().expect("checked").0;
            match (settings.backend, task) {
                // `auto` chose a GPU backend that has no device: the CPU, saying so.
                (BackendKind::Auto, Some(task)) => {
                    eprintln!("no usable GPU for the {backend} backend ({why}): running on the cpu backend");
                    run_resolved(BackendKind::Cpu, settings, &mut Some(task))
                }
                // Asked for by name: a GPU run silently on the CPU could take days.
                _ => Err(anyhow::Error::new(Unsupported(format!(
                    "the {backend} backend found no usable GPU device ({why}); {}",
                    match backend {
                        BackendKind::Cuda => "check that the NVIDIA driver is installed and loaded (nvidia-smi), or use --backend cpu",
                        _ => "for wgpu on Linux install a Vulkan driver and loader (e.g. libvulkan1 and the NVIDIA or Mesa ICD) or point VK_DRIVER_FILES at the driver's ICD file, or use --backend cpu",
                    }
                )))),
            }
        }
        other => other,
    }
}

/// No GPU device could be opened (no driver, no adapter). `run_on` falls back to the CPU on it
/// when the backend was `auto`.
#[derive(Debug, Clone)]
pub struct NoDevice(pub String);

impl fmt::Display for NoDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no usable GPU device: {}", self.0)
    }
}

impl std::error::Error for NoDevice {}

/// [`run_on`] on a resolved backend; `task` stays in its option when the device is missing.
fn run_resolved<T: BackendTask>(
    backend: BackendKind,
    settings: &ComputeSettings,
    task: &mut Option<T>,
) -> anyhow::Result<T::Output> {
    if !backend.compiled_in() {
        unsupported!(
            "the {backend} backend is not compiled into this binary: rebuild with `cargo build --release -p medddpm --features {backend}`"
        );
    }
    match backend {
        BackendKind::Cpu => {
            if settings.precision == Precision::Tf32 {
                unsupported!(
                    "--precision tf32 is not supported on the cpu backend: TF32 is a GPU tensor-core format; the CPU computes in IEEE f32 (use --precision fp32)"
                );
            }
            if settings.conv_engine == ConvEngine::Cudnn {
                unsupported!(
                    "--conv-engine cudnn needs the cuda backend (cuDNN is NVIDIA's library); the cpu backend computes convolutions with burn's kernels (use --conv-engine auto or cubecl)"
                );
            }
            let env = RunEnv {
                backend,
                precision: settings.precision,
                layout: settings.layout,
                conv_engine: ConvEngine::Cubecl,
                norm_engine: settings.norm_engine,
                tune_cache: None,
                tuned_before: 0,
            };
            let task = task.take().expect("the task is taken only once");
            task.run::<burn::backend::Autodiff<burn::backend::Flex>>(Default::default(), &env)
        }
        #[cfg(feature = "cuda")]
        BackendKind::Cuda => {
            let device = burn::backend::cuda::CudaDevice::default();
            let index = device.index;
            cube::run::<cubecl::cuda::CudaRuntime, burn::backend::Autodiff<burn::backend::Cuda>, T>(
                backend,
                device,
                settings,
                |cache| cube::cuda_conv_engine(settings.conv_engine, index, cache),
                task,
            )
        }
        #[cfg(feature = "wgpu")]
        BackendKind::Wgpu => {
            let device = burn::backend::wgpu::WgpuDevice::default();
            cube::run::<cubecl::wgpu::WgpuRuntime, burn::backend::Autodiff<burn::backend::Wgpu>, T>(
                backend,
                device,
                settings,
                |_| cube::wgpu_conv_engine(settings.conv_engine),
                task,
            )
        }
        #[allow(unreachable_patterns)]
        other => unsupported!("the {other} backend is not compiled into this binary"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in Precision::ALL {
            assert_eq!(p.name().parse::<Precision>().unwrap(), p);
        }
        for e in ConvEngine::ALL {
            assert_eq!(e.name().parse::<ConvEngine>().unwrap(), e);
        }
        assert!("fp16".parse::<Precision>().is_err());
        assert_eq!("CUDA".parse::<BackendKind>().unwrap(), BackendKind::Cuda);
    }

    #[test]
    fn switches_win_over_the_experiment_file() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            compute: ComputeArgs,
        }
        let file = ComputeConfig {
            precision: Some(Precision::Bf16),
            layout: Some(Layout::Ndhwc),
            conv_engine: Some(ConvEngine::Cubecl),
            norm_engine: Some(NormEngine::Ops),
        };
        let s = Cli::parse_from(["x", "--backend", "cpu"])
            .compute
            .settings_with(&file);
        assert_eq!(
            (s.precision, s.layout, s.conv_engine, s.norm_engine),
            (
                Precision::Bf16,
                Layout::Ndhwc,
                ConvEngine::Cubecl,
                NormEngine::Ops
            )
        );
        let cli = Cli::parse_from([
            "x",
            "--backend",
            "cpu",
            "--layout",
            "ncdhw",
            "--conv-engine",
            "auto",
        ]);
        let s = cli.compute.settings_with(&file);
        assert_eq!((s.layout, s.conv_engine), (Layout::Ncdhw, ConvEngine::Auto));
        let s = cli.compute.settings();
        assert_eq!(s.precision, Precision::Fp32);
    }

    #[test]
    fn default_precision_is_tf32_only_on_cuda() {
        assert_eq!(default_precision(BackendKind::Cuda), Precision::Tf32);
        assert_eq!(default_precision(BackendKind::Cpu), Precision::Fp32);
        assert_eq!(default_precision(BackendKind::Wgpu), Precision::Fp32);
    }

    #[test]
    fn cpu_refuses_tf32_with_a_reason() {
        struct Never;
        impl BackendTask for Never {
            type Output = ();
            fn run<B: KernelAutodiffBackend>(self, _: B::Device, _: &RunEnv) -> anyhow::Result<()> {
                unreachable!("must not run")
            }
        }
        let settings = ComputeSettings {
            backend: BackendKind::Cpu,
            precision: Precision::Tf32,
            ..Default::default()
        };
        let err = run_on(&settings, Never).unwrap_err();
        assert!(err.downcast_ref::<Unsupported>().is_some());
        let err = err.to_string();
        assert!(err.contains("tf32") && err.contains("cpu"), "{err}");

        let settings = ComputeSettings {
            backend: BackendKind::Cpu,
            conv_engine: ConvEngine::Cudnn,
            ..Default::default()
        };
        let err = run_on(&settings, Never).unwrap_err();
        assert!(err.downcast_ref::<Unsupported>().is_some());
        assert!(err.to_string().contains("cudnn"), "{err}");
    }
}
