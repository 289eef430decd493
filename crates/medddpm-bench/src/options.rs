//! What a benchmark run is asked to do: the networks it knows and the options of a run (the
//! `medddpm bench` and `medddpm check` commands fill them from their switches).

use std::path::PathBuf;
use std::time::Duration;

use medddpm_backend::{BackendKind, ConvEngine, NormEngine, Precision};
use medddpm_unet::{ActivationCheckpointing, Layout, UNetConfig};
use serde::{Deserialize, Serialize};

use crate::error::InvalidOptions;

/// Timesteps of the schedule the benchmark's sampling steps walk down (the reference's T).
pub(crate) const TIMESTEPS: usize = 250;

/// Networks the benchmark knows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Model {
    /// The released whole-head model (C = 64, 40.2 M parameters).
    #[default]
    #[serde(rename = "whole-head")]
    WholeHead,
    /// The released BraTS model (C = 64, 57.6 M parameters).
    #[serde(rename = "brats")]
    Brats,
    /// Whole-head shape with C = 32 (the golden fixture's width).
    #[serde(rename = "whole-head-c32")]
    WholeHeadC32,
    /// Two levels, C = 8: every block kind, for tests and quick checks.
    #[serde(rename = "tiny")]
    Tiny,
}

impl Model {
    /// Every network, in the order a command's help lists them.
    pub const ALL: [Model; 4] = [
        Model::WholeHead,
        Model::Brats,
        Model::WholeHeadC32,
        Model::Tiny,
    ];

    /// The network configuration.
    pub fn config(self) -> UNetConfig {
        match self {
            Model::WholeHead => UNetConfig::whole_head(),
            Model::Brats => UNetConfig::brats(),
            Model::WholeHeadC32 => UNetConfig {
                model_channels: 32,
                ..UNetConfig::whole_head()
            },
            Model::Tiny => UNetConfig::tiny(),
        }
    }

    /// Name in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Model::WholeHead => "whole-head",
            Model::Brats => "brats",
            Model::WholeHeadC32 => "whole-head-c32",
            Model::Tiny => "tiny",
        }
    }

    /// One line saying what the network is (a command's help shows it beside the name).
    pub fn description(self) -> &'static str {
        match self {
            Model::WholeHead => "The released whole-head model (C = 64, 40.2 M parameters)",
            Model::Brats => "The released BraTS model (C = 64, 57.6 M parameters)",
            Model::WholeHeadC32 => "Whole-head shape with C = 32 (the golden fixture's width)",
            Model::Tiny => "Two levels, C = 8: every block kind, for tests and quick checks",
        }
    }
}

medddpm_backend::choice_by_name!(
    Model,
    "model",
    "whole-head, brats, whole-head-c32 or tiny",
    str::eq
);

/// The network, volume and batch a row benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workload {
    /// The network.
    pub model: Model,
    /// Volume size (d, h, w).
    pub size: [usize; 3],
    /// Batch size.
    pub batch: usize,
    /// Activations the training micro-step recomputed instead of keeping (absent: none).
    #[serde(default)]
    pub activation_checkpointing: ActivationCheckpointing,
}

/// What one `medddpm bench` (or `medddpm check`) run measures and where it writes. The
/// defaults are the command's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BenchOptions {
    /// Backends to measure.
    pub backends: Vec<BackendKind>,
    /// Precisions to measure.
    pub precisions: Vec<Precision>,
    /// Activation layouts to measure.
    pub layouts: Vec<Layout>,
    /// Convolution engine of every configuration.
    pub conv_engine: ConvEngine,
    /// GroupNorm code of every configuration.
    pub norm_engine: NormEngine,
    /// Network, volume size, batch size, and the activations the training micro-step
    /// recomputes in its backward pass instead of keeping (the trainer's `[train]
    /// activation_checkpointing`).
    pub workload: Workload,
    /// Untimed steps after the first.
    pub warmup: usize,
    /// Timed steps (the median is reported).
    pub steps: usize,
    /// Run the per-operation breakdown.
    pub breakdown: bool,
    /// Folder for results.jsonl (appended to), results.csv, results.md and results.png.
    pub out: PathBuf,
    /// Title of the chart and the markdown file.
    pub title: Option<String>,
    /// Add the PyTorch reference's figures measured on this GPU (only `h100` is known).
    pub pytorch_reference: Option<String>,
    /// Kill a configuration's process after this long.
    pub timeout: Duration,
    /// Kernel-tuning cache root (default: [`medddpm_backend::default_tune_cache`]).
    pub tune_cache: Option<PathBuf>,
    /// Start an empty tuning cache from the results shipped for the GPU model (see
    /// [`medddpm_backend::ComputeSettings::shipped_tuning`]).
    pub shipped_tuning: bool,
    /// Seed of weights and inputs.
    pub seed: u64,
    /// Only rebuild the CSV, markdown and chart from results.jsonl.
    pub report_only: bool,
    /// Only run the agreement probe of each configuration (what `medddpm check` does).
    pub check_only: bool,
    /// When a configuration's output disagrees, name the first operation that deviates from
    /// the float64 reference (locate-*.json in `out`).
    pub locate: bool,
    /// Sample the host's call stacks during the timed training steps (`host-profile-*.folded`
    /// in `out`; needs the `host-profile` feature).
    pub host_profile: bool,
    /// Also time sampling steps and training micro-steps replayed from CUDA graphs (CUDA), each
    /// checked value for value against the step run as it comes. Adds their memory pool to the
    /// run's peak, so the peak no longer measures the steps as they come alone.
    pub cuda_graphs: bool,
    /// This process is a configuration's child: run the configuration in this JSON file and
    /// write its record to `single_out`.
    pub single_config: Option<PathBuf>,
    /// Where a child's record goes.
    pub single_out: Option<PathBuf>,
}

impl Default for BenchOptions {
    fn default() -> Self {
        Self {
            backends: vec![BackendKind::Auto],
            // f16 only when asked for: a Vulkan precision (CUDA runs bf16).
            precisions: vec![Precision::Fp32, Precision::Tf32, Precision::Bf16],
            layouts: Layout::ALL.to_vec(),
            conv_engine: ConvEngine::Auto,
            norm_engine: NormEngine::Kernel,
            workload: Workload {
                model: Model::WholeHead,
                size: [128; 3],
                batch: 1,
                activation_checkpointing: ActivationCheckpointing::None,
            },
            warmup: 2,
            steps: 5,
            breakdown: true,
            out: PathBuf::from("bench-results"),
            title: None,
            pytorch_reference: None,
            timeout: Duration::from_secs(1800),
            tune_cache: None,
            shipped_tuning: true,
            seed: 0,
            report_only: false,
            check_only: false,
            locate: false,
            host_profile: false,
            cuda_graphs: false,
            single_config: None,
            single_out: None,
        }
    }
}

impl BenchOptions {
    /// Refuses a run that cannot work before any configuration starts: a size the network
    /// cannot take, no steps or batch, more sampling steps than the schedule has.
    pub fn validate(&self, unet: &UNetConfig) -> Result<(), InvalidOptions> {
        let divisor = unet.size_divisor();
        let w = &self.workload;
        if w.size.iter().any(|&s| s == 0 || s % divisor != 0) {
            return Err(InvalidOptions::Size {
                size: w.size,
                divisor,
                model: w.model.name().to_string(),
            });
        }
        if self.steps == 0 {
            return Err(InvalidOptions::Zero { option: "steps" });
        }
        if w.batch == 0 {
            return Err(InvalidOptions::Zero { option: "batch" });
        }
        // The sampling steps walk down from the last timestep, one per step.
        let timesteps = TIMESTEPS;
        if 1 + self.warmup + self.steps > timesteps {
            return Err(InvalidOptions::TooManySteps {
                warmup: self.warmup,
                steps: self.steps,
                timesteps,
            });
        }
        Ok(())
    }
}
