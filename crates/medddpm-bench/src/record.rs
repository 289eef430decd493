//! One row of the benchmark matrix, as written to the JSON-lines file and read back by the
//! report writers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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

/// One configuration (backend x precision x layout) of the benchmark matrix and what was
/// measured for it. Times in milliseconds unless the name says seconds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchRecord {
    /// `cuda`, `wgpu`, `cpu`, or `pytorch` for quoted reference rows.
    pub backend: String,
    /// Device name (GPU model where known).
    pub device: String,
    /// `fp32`, `tf32` or `bf16`.
    pub precision: String,
    /// `ncdhw` or `ndhwc`.
    pub layout: String,
    /// Model name (`whole-head`, ...).
    pub model: String,
    /// Volume size (d, h, w).
    pub size: [usize; 3],
    /// Batch size.
    pub batch: usize,
    /// Outcome.
    pub status: RecordStatus,
    /// Why a configuration is unsupported, failed or disagreed; free text otherwise.
    pub message: Option<String>,
    /// Relative L2 error of the network output against the float64 CPU reference (agreement probe).
    pub agreement_rel_l2: Option<f64>,
    /// Tolerance the agreement probe was held to for this precision.
    pub agreement_tolerance: Option<f64>,
    /// What the output was compared with (`float64 cpu at 32x32x32`, `cuda fp32 at 128x128x128`).
    #[serde(default)]
    pub agreement_reference: Option<String>,
    /// First sampling step (network forward), seconds: compilation and autotuning included.
    pub first_sample_step_s: Option<f64>,
    /// First training micro-step, seconds: compilation and autotuning included.
    pub first_train_step_s: Option<f64>,
    /// Median training micro-step (forward, L1 loss, backward, Adam), synchronised.
    pub train_step_median_ms: Option<f64>,
    /// Median host time to enqueue a training micro-step (until the synchronisation that ends
    /// it): when it is close to `train_step_median_ms`, the GPU waits for the host.
    #[serde(default)]
    pub train_issue_median_ms: Option<f64>,
    /// Median sampling step (network forward and DDPM update), synchronised.
    pub sample_step_median_ms: Option<f64>,
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
    #[serde(default)]
    pub train_breakdown_ms: BTreeMap<String, f64>,
    /// Of the profiled step's Adam phase, the host's time to enqueue the optimizer step
    /// (the rest of the phase is the device finishing it), milliseconds.
    #[serde(default)]
    pub train_optimizer_issue_ms: Option<f64>,
    /// The host's threads over the timed training steps (CubeCL backends), milliseconds per
    /// step: how long burn-fusion's thread and the compute server's thread ran tasks, and how
    /// long the caller and the fusion thread waited for the next thread down (see
    /// `threads.rs`). A thread running for most of the step is what bounds it.
    #[serde(default)]
    pub train_threads_ms: BTreeMap<String, f64>,
    /// Whether the tuning cache of this backend and precision already held results when the
    /// run started (it may still have lacked some kernels of this layout or size).
    pub tune_cache_warm: Option<bool>,
    /// burn's own memory statistics in MiB (the CubeCL backends), read in the reported
    /// profiled training step: `in use after the forward pass` (the live tensors, the saved
    /// activations among them, when memory peaks) and `reserved after the forward pass` (what
    /// the pools hold from the device).
    #[serde(default)]
    pub burn_memory_mib: BTreeMap<String, f64>,
}

/// Separates a failed run's message from the tail of its log (the markdown report drops the
/// tail of a partial run; JSON lines and CSV keep it).
pub(crate) const LOG_TAIL: &str = "; last output: ";

impl BenchRecord {
    /// A record with nothing measured yet.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        backend: &str,
        device: &str,
        precision: &str,
        layout: &str,
        model: &str,
        size: [usize; 3],
        batch: usize,
        status: RecordStatus,
    ) -> Self {
        Self {
            backend: backend.to_string(),
            device: device.to_string(),
            precision: precision.to_string(),
            layout: layout.to_string(),
            model: model.to_string(),
            size,
            batch,
            status,
            message: None,
            agreement_rel_l2: None,
            agreement_tolerance: None,
            first_sample_step_s: None,
            first_train_step_s: None,
            train_step_median_ms: None,
            train_issue_median_ms: None,
            sample_step_median_ms: None,
            peak_memory_mib: None,
            memory_source: None,
            breakdown_ms: BTreeMap::new(),
            train_breakdown_ms: BTreeMap::new(),
            train_optimizer_issue_ms: None,
            train_threads_ms: BTreeMap::new(),
            agreement_reference: None,
            tune_cache_warm: None,
            burn_memory_mib: BTreeMap::new(),
        }
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
