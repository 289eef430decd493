//! One row of the benchmark matrix, as written to the JSON-lines file and read back by the
//! report writers.
//!
//! The record is typed (backend, precision, layout and model are enums, a failed run's log tail
//! is a list of lines, a quoted figure says where it comes from); its JSON is the flat one of
//! the files already in `docs/benchmarks` (`record/wire.rs`), so those still read and the bytes
//! written have not changed.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use medddpm_backend::{BackendKind, ConvEngine, NormEngine, Precision, RunEnv, UnknownChoice};
use medddpm_unet::{ActivationCheckpointing, Layout};
use serde::{Deserialize, Serialize};

use crate::gpu_trace::GpuTime;
use crate::options::{Model, Workload};

mod wire;

/// What became of one configuration of the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordStatus {
    /// Measured; the output agreed with the CPU float64 reference within tolerance.
    Ok,
    /// The output disagreed with the reference: no timings are reported.
    Disagrees,
    /// The backend cannot run this precision or layout (the message says why).
    Unsupported,
    /// The run failed (crash, out of memory, timeout); the message says how.
    Failed,
}

impl RecordStatus {
    /// Lower-case name, as the reports show it.
    pub fn name(self) -> &'static str {
        match self {
            RecordStatus::Ok => "ok",
            RecordStatus::Disagrees => "disagrees",
            RecordStatus::Unsupported => "unsupported",
            RecordStatus::Failed => "failed",
        }
    }
}

/// What computed a row: burn on one of its backends, or the PyTorch reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordBackend {
    /// burn on `backend`. The engines are part of what is measured: rows whose convolutions
    /// cuDNN computed are labelled `cuda+cudnn`, our portable kernels `+cubecl` (burn's own
    /// kernels add nothing, as do the oldest records, which did not name the engine), rows
    /// with GroupNorm as burn's plain ops `+normops`.
    Burn {
        /// The backend.
        backend: BackendKind,
        /// What computed the convolutions (resolved: `Cudnn`, `Cubecl` or `Burn`).
        conv: ConvEngine,
        /// GroupNorm ran as burn's ops (`--norm-engine ops`).
        norm_ops: bool,
    },
    /// The PyTorch reference implementation. With `torch.backends.cudnn.benchmark` on, the
    /// layout is labelled `+cudnn.benchmark`.
    PyTorch {
        /// Whether cuDNN benchmarked its algorithms.
        cudnn_benchmark: bool,
    },
}

impl RecordBackend {
    /// burn on `backend` with its default engines.
    pub fn burn(backend: BackendKind) -> Self {
        RecordBackend::Burn {
            backend,
            conv: ConvEngine::Burn,
            norm_ops: false,
        }
    }

    /// The backend and engines a run found itself on.
    pub fn of(env: &RunEnv) -> Self {
        RecordBackend::Burn {
            backend: env.backend,
            conv: match env.conv_engine {
                ConvEngine::Auto => ConvEngine::Burn,
                resolved => resolved,
            },
            norm_ops: env.norm_engine == NormEngine::Ops,
        }
    }
}

impl fmt::Display for RecordBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RecordBackend::Burn {
                backend,
                conv,
                norm_ops,
            } => {
                f.write_str(backend.name())?;
                match conv {
                    ConvEngine::Cudnn => f.write_str("+cudnn")?,
                    ConvEngine::Cubecl => f.write_str("+cubecl")?,
                    ConvEngine::Burn | ConvEngine::Auto => {}
                }
                if norm_ops {
                    f.write_str("+normops")?;
                }
                Ok(())
            }
            RecordBackend::PyTorch { .. } => f.write_str("pytorch"),
        }
    }
}

impl FromStr for RecordBackend {
    type Err = UnknownChoice;
    /// A label as [`fmt::Display`] writes it (`cuda+cudnn`, `wgpu+cubecl`, `cpu+normops`,
    /// `pytorch`).
    fn from_str(s: &str) -> Result<Self, UnknownChoice> {
        if s == "pytorch" {
            return Ok(RecordBackend::PyTorch {
                cudnn_benchmark: false,
            });
        }
        let (rest, norm_ops) = match s.strip_suffix("+normops") {
            Some(rest) => (rest, true),
            None => (s, false),
        };
        let (name, conv) = if let Some(name) = rest.strip_suffix("+cudnn") {
            (name, ConvEngine::Cudnn)
        } else if let Some(name) = rest.strip_suffix("+cubecl") {
            (name, ConvEngine::Cubecl)
        } else {
            (rest, ConvEngine::Burn)
        };
        let backend = BackendKind::ALL
            .into_iter()
            .find(|b| b.name() == name)
            .ok_or_else(|| {
                UnknownChoice::new(
                    "backend in a benchmark record",
                    s,
                    "cuda, wgpu or cpu, then +cudnn or +cubecl, then +normops; or pytorch",
                )
            })?;
        Ok(RecordBackend::Burn {
            backend,
            conv,
            norm_ops,
        })
    }
}

/// Where a row's figures come from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// Measured by this benchmark.
    #[default]
    Measured,
    /// Quoted from elsewhere (the PyTorch reference's figures), drawn as a reference.
    Quoted {
        /// The document the figures come from.
        from: String,
    },
}

impl Source {
    /// Whether the figures were measured here.
    pub fn is_measured(&self) -> bool {
        matches!(self, Source::Measured)
    }
}

/// One configuration (backend x precision x layout) of the benchmark matrix and what was
/// measured for it. Times in milliseconds unless the name says seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(into = "wire::Record", try_from = "wire::Record")]
pub struct BenchRecord {
    /// burn's backend (and engines), or the PyTorch reference for quoted rows.
    pub backend: RecordBackend,
    /// Device name (GPU model where known).
    pub device: String,
    /// Precision of convolutions and products.
    pub precision: Precision,
    /// Activation layout.
    pub layout: Layout,
    /// The network.
    pub model: Model,
    /// Volume size (d, h, w).
    pub size: [usize; 3],
    /// Batch size.
    pub batch: usize,
    /// Activations the training micro-step recomputed instead of keeping (JSON: written only
    /// when not `none`, so earlier files read as `none`).
    pub activation_checkpointing: ActivationCheckpointing,
    /// Outcome.
    pub status: RecordStatus,
    /// Why a configuration is unsupported, failed or disagreed; free text otherwise.
    pub message: Option<String>,
    /// The last lines a failed run printed, where the benchmark kept them (JSON lines and CSV
    /// show them after the message; the markdown report leaves a partial run's out). `Some`
    /// and empty when the run printed nothing.
    pub log_tail: Option<Vec<String>>,
    /// Measured here, or quoted from elsewhere.
    pub source: Source,
    /// Relative L2 error of the network output against the float64 CPU reference (agreement probe).
    pub agreement_rel_l2: Option<f64>,
    /// Tolerance the agreement probe was held to for this precision.
    pub agreement_tolerance: Option<f64>,
    /// What the output was compared with (`float64 cpu at 32x32x32`, `cuda fp32 at 128x128x128`).
    pub agreement_reference: Option<String>,
    /// First sampling step (network forward), seconds: compilation and autotuning included.
    pub first_sample_step_s: Option<f64>,
    /// First training micro-step, seconds: compilation and autotuning included.
    pub first_train_step_s: Option<f64>,
    /// Median training micro-step (forward, L1 loss, backward, Adam), synchronised.
    pub train_step_median_ms: Option<f64>,
    /// Median host time to enqueue a training micro-step (until the synchronisation that ends
    /// it): when it is close to `train_step_median_ms`, the GPU waits for the host.
    pub train_issue_median_ms: Option<f64>,
    /// Median sampling step (network forward and DDPM update), synchronised.
    pub sample_step_median_ms: Option<f64>,
    /// Training micro-steps enqueued back to back and synchronised once, mean ms a step (how
    /// `../shared/peer/torch_bench.py` times PyTorch; a step's start overlaps the previous one).
    pub train_back_to_back_ms: Option<f64>,
    /// Sampling steps enqueued back to back and synchronised once, mean ms a step.
    pub sample_back_to_back_ms: Option<f64>,
    /// Peak device memory in MiB.
    pub peak_memory_mib: Option<f64>,
    /// How `peak_memory_mib` was measured (e.g. `nvidia-smi used_memory of the process`).
    pub memory_source: Option<String>,
    /// Forward pass split by operation class (`convolution`, `normalisation`, `attention`,
    /// `elementwise`, `upsample`), milliseconds, each op synchronised on its own.
    pub breakdown_ms: BTreeMap<String, f64>,
    /// One training micro-step split into its phases (forward and loss; backward, with the
    /// convolution data and weight gradients timed on their own; the Adam step), milliseconds,
    /// the phases synchronised.
    pub train_breakdown_ms: BTreeMap<String, f64>,
    /// Of the profiled step's Adam phase, the host's time to enqueue the optimizer step
    /// (the rest of the phase is the device finishing it), milliseconds.
    pub train_optimizer_issue_ms: Option<f64>,
    /// The host's threads over the timed training steps (CubeCL backends), milliseconds per
    /// step: how long burn-fusion's thread and the compute server's thread ran tasks, and how
    /// long the caller and the fusion thread waited for the next thread down (see
    /// `threads.rs`). A thread running for most of the step is what bounds it.
    pub train_threads_ms: BTreeMap<String, f64>,
    /// Whether the tuning cache of this backend and precision already held results when the
    /// run started (it may still have lacked some kernels of this layout or size).
    pub tune_cache_warm: Option<bool>,
    /// burn's own memory statistics in MiB (the CubeCL backends), read in the reported
    /// profiled training step: `in use after the forward pass` (the live tensors, the saved
    /// activations among them, when memory peaks) and `reserved after the forward pass` (what
    /// the pools hold from the device).
    pub burn_memory_mib: BTreeMap<String, f64>,
    /// The GPU's time in a few traced training micro-steps (CUDA, CUPTI): busy time, kernel
    /// time by operation class, the costliest kernels.
    pub train_gpu: Option<GpuTime>,
    /// The same for sampling steps.
    pub sample_gpu: Option<GpuTime>,
    /// Sampling steps whose network call replays a CUDA graph (CUDA).
    pub sample_graph: Option<GraphRun>,
    /// Training micro-steps replayed from a CUDA graph (CUDA).
    pub train_graph: Option<GraphRun>,
}

/// Steps replayed from a CUDA graph, beside the same steps run as they come.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GraphRun {
    /// Median time of a step, ms (`None` when graphs were off).
    pub step_median_ms: Option<f64>,
    /// Median time the host took to enqueue a step, ms (training only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issue_median_ms: Option<f64>,
    /// Launches and copies in the graph.
    pub nodes: usize,
    /// Its nodes by kind, e.g. `kernel 1097, memset 61`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node_kinds: String,
    /// How busy the host's threads were per replayed step (as `train_threads_ms`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub threads_ms: BTreeMap<String, f64>,
    /// Why the steps ran as they come, if they did.
    pub off: Option<String>,
    /// The network's output on one input, replayed against run as it comes: the largest
    /// absolute difference and the number of values that differ (0: bit for bit the same).
    pub max_abs_diff: Option<f64>,
    /// See `max_abs_diff`.
    pub values_differing: Option<usize>,
    /// The GPU's time in a few traced replayed steps.
    pub gpu: Option<GpuTime>,
}

/// Separates a failed run's message from the tail of its log in the JSON lines and the CSV.
pub(crate) const LOG_TAIL: &str = "; last output: ";

/// Separates the lines of a log tail.
pub(crate) const LOG_LINES: &str = " | ";

impl BenchRecord {
    /// A record with nothing measured yet (and no device named).
    pub fn new(
        backend: RecordBackend,
        precision: Precision,
        layout: Layout,
        workload: Workload,
        status: RecordStatus,
    ) -> Self {
        Self {
            backend,
            device: String::new(),
            precision,
            layout,
            model: workload.model,
            size: workload.size,
            batch: workload.batch,
            activation_checkpointing: workload.activation_checkpointing,
            status,
            message: None,
            log_tail: None,
            source: Source::Measured,
            agreement_rel_l2: None,
            agreement_tolerance: None,
            agreement_reference: None,
            first_sample_step_s: None,
            first_train_step_s: None,
            train_step_median_ms: None,
            train_issue_median_ms: None,
            sample_step_median_ms: None,
            train_back_to_back_ms: None,
            sample_back_to_back_ms: None,
            peak_memory_mib: None,
            memory_source: None,
            breakdown_ms: BTreeMap::new(),
            train_breakdown_ms: BTreeMap::new(),
            train_optimizer_issue_ms: None,
            train_threads_ms: BTreeMap::new(),
            tune_cache_warm: None,
            burn_memory_mib: BTreeMap::new(),
            train_gpu: None,
            sample_gpu: None,
            sample_graph: None,
            train_graph: None,
        }
    }

    /// The network, volume and batch.
    pub fn workload(&self) -> Workload {
        Workload {
            model: self.model,
            size: self.size,
            batch: self.batch,
            activation_checkpointing: self.activation_checkpointing,
        }
    }

    /// The layout as the reports label it (`ncdhw+cudnn.benchmark` for a PyTorch row run with
    /// cuDNN's benchmarking on).
    pub fn layout_label(&self) -> String {
        match self.backend {
            RecordBackend::PyTorch {
                cudnn_benchmark: true,
            } => format!("{}+cudnn.benchmark", self.layout),
            _ => self.layout.to_string(),
        }
    }

    /// The message with the log tail after it, as the JSON lines and the CSV keep it.
    pub fn full_message(&self) -> Option<String> {
        match &self.log_tail {
            None => self.message.clone(),
            Some(lines) => Some(format!(
                "{}{LOG_TAIL}{}",
                self.message.as_deref().unwrap_or_default(),
                lines.join(LOG_LINES)
            )),
        }
    }

    /// Whether the figures were quoted from elsewhere (reference rows).
    pub fn is_quoted(&self) -> bool {
        !self.source.is_measured()
    }

    /// Whether the timings may be reported: the run finished (Ok), or it was cut short (a
    /// timeout) after its agreement probe passed, so the phases it did finish measured a
    /// network whose output is known to be right. A run that stopped before its probe, or
    /// whose probe failed, has no trusted timings.
    pub fn timings_verified(&self) -> bool {
        match self.status {
            RecordStatus::Ok => true,
            RecordStatus::Failed => matches!(
                (self.agreement_rel_l2, self.agreement_tolerance),
                (Some(e), Some(t)) if e <= t
            ),
            RecordStatus::Disagrees | RecordStatus::Unsupported => false,
        }
    }
}

#[cfg(test)]
mod tests;
