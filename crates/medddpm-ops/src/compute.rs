//! How the network computes, apart from its weights: one value the command line builds once and
//! every layer above passes down.

use std::fmt;
use std::str::FromStr;

use burn::tensor::DType;
use serde::{Deserialize, Serialize};

/// `Display` as the choice's `name()`, and `FromStr` from that name in any case, for a setting
/// whose choices are all in its `ALL`.
macro_rules! named_choice {
    ($ty:ty, $setting:literal, $expected:literal) => {
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }

        impl FromStr for $ty {
            type Err = UnknownChoice;
            fn from_str(s: &str) -> Result<Self, UnknownChoice> {
                <$ty>::ALL
                    .into_iter()
                    .find(|c| c.name().eq_ignore_ascii_case(s))
                    .ok_or_else(|| UnknownChoice::new($setting, s, $expected))
            }
        }
    };
}

/// How convolutions and matrix products compute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// IEEE f32 everywhere, no tensor cores (PyTorch's "Baseline").
    #[default]
    Fp32,
    /// f32 tensors, TF32 tensor cores for convolutions and products (PyTorch's "OPT1").
    Tf32,
    /// bf16 compute with f32 master weights, optimizer state and EMA.
    Bf16,
    /// f16 compute with f32 master weights, optimizer state and EMA: the 16-bit format every
    /// Vulkan GPU has (Vulkan has no TF32 and rarely bf16). Training scales the loss (f16's
    /// range is narrow: a loss gradient of 1/voxels is below its smallest normal number).
    F16,
}

impl Precision {
    /// All four, in the order reports list them.
    pub const ALL: [Precision; 4] = [
        Precision::Fp32,
        Precision::Tf32,
        Precision::Bf16,
        Precision::F16,
    ];

    /// The dtype the network's weights and activations are cast to while computing.
    pub fn compute_dtype(self) -> DType {
        match self {
            Precision::Fp32 | Precision::Tf32 => DType::F32,
            Precision::Bf16 => DType::BF16,
            Precision::F16 => DType::F16,
        }
    }

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Tf32 => "tf32",
            Precision::Bf16 => "bf16",
            Precision::F16 => "f16",
        }
    }

    /// Relative L2 error of a network output against a float64 reference that this precision
    /// is held to: a few ulps of accumulated rounding for f32, TF32's 10-bit mantissa, bf16's
    /// 7-bit one; f16 rounds what bf16 rounds, with TF32's 10-bit mantissa (an eighth of
    /// bf16's error), so TF32's tolerance.
    pub fn agreement_tolerance(self) -> f64 {
        match self {
            Precision::Fp32 => 1e-4,
            Precision::Tf32 | Precision::F16 => 2e-2,
            Precision::Bf16 => 1e-1,
        }
    }
}

/// A name that is none of a setting's choices: the error of the settings' `FromStr` (the
/// command line's flags and the experiment files are read through it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {setting} '{given}' (expected {expected})")]
pub struct UnknownChoice {
    /// The setting (`precision`, `layout`, ...).
    pub setting: &'static str,
    /// What was given.
    pub given: String,
    /// The choices, as a sentence (`fp32, tf32, bf16 or f16`).
    pub expected: &'static str,
}

impl UnknownChoice {
    /// `given` is none of `setting`'s choices, `expected`.
    pub fn new(setting: &'static str, given: &str, expected: &'static str) -> Self {
        Self {
            setting,
            given: given.to_string(),
            expected,
        }
    }
}

named_choice!(Precision, "precision", "fp32, tf32, bf16 or f16");

/// Memory order of the activations inside the network.
///
/// `Ncdhw` keeps burn's default: every activation is a contiguous `[batch, channels, d, h, w]`
/// tensor. `Ndhwc` ("channels-last 3D") keeps every activation as a contiguous
/// `[batch, d, h, w, channels]` tensor from the first convolution to the last: GroupNorm,
/// SiLU, the skip concatenation, upsampling and attention all work on channels-last memory,
/// and each convolution receives a channels-last buffer (burn's CubeCL convolutions and
/// cuDNN's tensor-core convolutions are channels-last kernels, so nothing is transposed around
/// them). The network's input and output stay `[batch, channels, d, h, w]`; the order changes
/// once after the input and once before the output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// Channels-first (PyTorch's default, burn's default).
    #[default]
    Ncdhw,
    /// Channels-last 3D.
    Ndhwc,
}

impl Layout {
    /// Axis of the channels in an activation.
    pub fn channel_dim(self) -> usize {
        match self {
            Layout::Ncdhw => 1,
            Layout::Ndhwc => 4,
        }
    }

    /// Both layouts, in the order the benchmark reports them.
    pub const ALL: [Layout; 2] = [Layout::Ncdhw, Layout::Ndhwc];
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layout::Ncdhw => "ncdhw",
            Layout::Ndhwc => "ndhwc",
        })
    }
}

impl FromStr for Layout {
    type Err = UnknownChoice;
    fn from_str(s: &str) -> Result<Self, UnknownChoice> {
        match s.to_ascii_lowercase().as_str() {
            "ncdhw" | "channels-first" => Ok(Layout::Ncdhw),
            "ndhwc" | "channels-last" => Ok(Layout::Ndhwc),
            _ => Err(UnknownChoice::new("layout", s, "ncdhw or ndhwc")),
        }
    }
}

/// Which library computes the 3-D convolutions and their gradients.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConvEngine {
    /// cuDNN on CUDA when the library loads, burn's own kernels otherwise.
    #[default]
    Auto,
    /// NVIDIA's cuDNN (CUDA only; `libcudnn.so.9` at run time).
    Cudnn,
    /// Our portable CubeCL kernels (`medddpm_cube::conv`) on the GPU backends, CUDA and wgpu
    /// alike (burn's own CubeCL kernels are [`ConvEngine::Burn`]).
    Cubecl,
    /// burn 0.21's own convolutions: its CubeCL kernels on the GPU backends, Flex's on the CPU
    /// (where this is the only engine).
    Burn,
}

impl ConvEngine {
    /// All four, as the command line lists them.
    pub const ALL: [ConvEngine; 4] = [
        ConvEngine::Auto,
        ConvEngine::Cudnn,
        ConvEngine::Cubecl,
        ConvEngine::Burn,
    ];

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            ConvEngine::Auto => "auto",
            ConvEngine::Cudnn => "cudnn",
            ConvEngine::Cubecl => "cubecl",
            ConvEngine::Burn => "burn",
        }
    }
}

named_choice!(
    ConvEngine,
    "convolution engine",
    "auto, cudnn, cubecl or burn"
);

/// Which code computes GroupNorm (+ SiLU) and its gradients.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NormEngine {
    /// The CubeCL kernels on burn's CubeCL backends (CUDA, wgpu) in f32, f16 and bf16; burn's
    /// plain ops elsewhere.
    #[default]
    Kernel,
    /// burn's plain ops everywhere (the kernels' reference twin).
    Ops,
}

impl NormEngine {
    /// Both, as the command line lists them.
    pub const ALL: [NormEngine; 2] = [NormEngine::Kernel, NormEngine::Ops];

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            NormEngine::Kernel => "kernel",
            NormEngine::Ops => "ops",
        }
    }
}

named_choice!(NormEngine, "normalisation engine", "kernel or ops");

/// Everything that decides how the network's operations compute.
///
/// Built once by the command line (or a test) and handed down: the U-Net keeps it, and every
/// heavy operation in `medddpm_kernels::KernelBackend` receives it. `conv_engine` is [`ConvEngine::Auto`]
/// until the backend set-up resolves it to what actually runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Compute {
    /// Precision of convolutions and products.
    pub precision: Precision,
    /// Activation layout inside the network.
    pub layout: Layout,
    /// Library for the 3-D convolutions.
    pub conv_engine: ConvEngine,
    /// Code for GroupNorm.
    pub norm_engine: NormEngine,
}

impl Compute {
    /// Whether the convolutions go to cuDNN.
    pub fn uses_cudnn(&self) -> bool {
        self.conv_engine == ConvEngine::Cudnn
    }

    /// Whether the convolutions go to our portable CubeCL kernels.
    pub fn uses_portable_kernels(&self) -> bool {
        self.conv_engine == ConvEngine::Cubecl
    }
}

impl fmt::Display for Compute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} / {} / {}",
            self.precision, self.layout, self.conv_engine
        )?;
        if self.norm_engine != NormEngine::default() {
            write!(f, " / norm {}", self.norm_engine)?;
        }
        Ok(())
    }
}

/// What an experiment file asks for under `[compute]`; every field is optional, and a
/// command-line switch given explicitly wins over it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ComputeConfig {
    /// `fp32`, `tf32` or `bf16`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub precision: Option<Precision>,
    /// `ncdhw` or `ndhwc`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layout: Option<Layout>,
    /// `auto`, `cudnn` or `cubecl`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conv_engine: Option<ConvEngine>,
    /// `kernel` or `ops`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub norm_engine: Option<NormEngine>,
    /// CUDA device indices, e.g. `[0, 1]`: data-parallel training runs one replica on each.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub devices: Option<Vec<usize>>,
    /// How the replicas average their gradients: `auto`, `nccl` or `host`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub collective: Option<Collective>,
    /// Where the replicas run: `auto`, `threads` or `processes`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub launch: Option<Launch>,
}

/// How the replicas of a multi-device run average their gradients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Collective {
    /// NCCL on CUDA, the host elsewhere.
    #[default]
    Auto,
    /// NCCL's all-reduce on the GPUs (CUDA only).
    Nccl,
    /// Gradients gathered, averaged and handed back through host threads (any backend; slower,
    /// since every gradient crosses to one device and back).
    Host,
}

/// Where the replicas of a multi-device run live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Launch {
    /// One process per device on CUDA, threads of one process elsewhere.
    #[default]
    Auto,
    /// One process drives every device, a thread each.
    Threads,
    /// One process per device (the first starts the others), as PyTorch's DDP runs: two
    /// devices driven from one process wait for each other inside the CUDA driver.
    Processes,
}
