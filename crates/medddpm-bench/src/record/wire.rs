//! The JSON form of a [`BenchRecord`]: the flat record of strings and numbers the benchmark has
//! always written (`docs/benchmarks/**/results.jsonl`), field for field and in the same order.
//! A log tail follows the message after `; last output: `, its lines `|`-separated; a quoted
//! row adds `source` (measured rows, the only ones written to files, never do).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use medddpm_backend::UnknownChoice;
use medddpm_unet::ActivationCheckpointing;

use crate::gpu_trace::GpuTime;

use super::{BenchRecord, GraphRun, RecordBackend, RecordStatus, Source, LOG_LINES, LOG_TAIL};

/// A record as JSON has it.
#[derive(Serialize, Deserialize)]
pub(super) struct Record {
    backend: String,
    device: String,
    precision: String,
    layout: String,
    model: String,
    size: [usize; 3],
    batch: usize,
    #[serde(default, skip_serializing_if = "is_none")]
    activation_checkpointing: ActivationCheckpointing,
    status: RecordStatus,
    message: Option<String>,
    agreement_rel_l2: Option<f64>,
    agreement_tolerance: Option<f64>,
    #[serde(default)]
    agreement_reference: Option<String>,
    first_sample_step_s: Option<f64>,
    first_train_step_s: Option<f64>,
    train_step_median_ms: Option<f64>,
    #[serde(default)]
    train_issue_median_ms: Option<f64>,
    sample_step_median_ms: Option<f64>,
    // Absent rather than null when not measured: records from before these existed stay in
    // the current form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    train_back_to_back_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sample_back_to_back_ms: Option<f64>,
    peak_memory_mib: Option<f64>,
    memory_source: Option<String>,
    breakdown_ms: BTreeMap<String, f64>,
    #[serde(default)]
    train_breakdown_ms: BTreeMap<String, f64>,
    #[serde(default)]
    train_optimizer_issue_ms: Option<f64>,
    #[serde(default)]
    train_threads_ms: BTreeMap<String, f64>,
    tune_cache_warm: Option<bool>,
    #[serde(default)]
    burn_memory_mib: BTreeMap<String, f64>,
    #[serde(default, skip_serializing_if = "Source::is_measured")]
    source: Source,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    train_gpu: Option<GpuTime>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sample_gpu: Option<GpuTime>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sample_graph: Option<GraphRun>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    train_graph: Option<GraphRun>,
}

/// `$to` with the fields given and, moved from `$r`, those both forms hold alike: the list stands
/// once for both directions.
macro_rules! with_common_fields {
    ($to:ident { $($own:tt)* } from $r:ident) => {
        $to {
            $($own)*
            device: $r.device,
            size: $r.size,
            batch: $r.batch,
            activation_checkpointing: $r.activation_checkpointing,
            status: $r.status,
            source: $r.source,
            agreement_rel_l2: $r.agreement_rel_l2,
            agreement_tolerance: $r.agreement_tolerance,
            agreement_reference: $r.agreement_reference,
            first_sample_step_s: $r.first_sample_step_s,
            first_train_step_s: $r.first_train_step_s,
            train_step_median_ms: $r.train_step_median_ms,
            train_issue_median_ms: $r.train_issue_median_ms,
            sample_step_median_ms: $r.sample_step_median_ms,
            train_back_to_back_ms: $r.train_back_to_back_ms,
            sample_back_to_back_ms: $r.sample_back_to_back_ms,
            peak_memory_mib: $r.peak_memory_mib,
            memory_source: $r.memory_source,
            breakdown_ms: $r.breakdown_ms,
            train_breakdown_ms: $r.train_breakdown_ms,
            train_optimizer_issue_ms: $r.train_optimizer_issue_ms,
            train_threads_ms: $r.train_threads_ms,
            tune_cache_warm: $r.tune_cache_warm,
            burn_memory_mib: $r.burn_memory_mib,
            train_gpu: $r.train_gpu,
            sample_gpu: $r.sample_gpu,
            sample_graph: $r.sample_graph,
            train_graph: $r.train_graph,
        }
    };
}

impl From<BenchRecord> for Record {
    fn from(r: BenchRecord) -> Self {
        with_common_fields!(Record {
            message: r.full_message(),
            layout: r.layout_label(),
            backend: r.backend.to_string(),
            precision: r.precision.name().to_string(),
            model: r.model.name().to_string(),
        } from r)
    }
}

impl TryFrom<Record> for BenchRecord {
    type Error = UnknownChoice;

    fn try_from(r: Record) -> Result<Self, UnknownChoice> {
        let mut backend: RecordBackend = r.backend.parse()?;
        let layout = match r.layout.strip_suffix("+cudnn.benchmark") {
            Some(layout) if matches!(backend, RecordBackend::PyTorch { .. }) => {
                backend = RecordBackend::PyTorch {
                    cudnn_benchmark: true,
                };
                layout
            }
            _ => &r.layout,
        };
        let (message, log_tail) = match r.message {
            Some(m) => match m.split_once(LOG_TAIL) {
                Some((message, tail)) => (Some(message.to_string()), Some(split_tail(tail))),
                None => (Some(m), None),
            },
            None => (None, None),
        };
        Ok(with_common_fields!(BenchRecord {
            backend,
            precision: r.precision.parse()?,
            layout: layout.parse()?,
            model: r.model.parse()?,
            message,
            log_tail,
        } from r))
    }
}

fn is_none(c: &ActivationCheckpointing) -> bool {
    *c == ActivationCheckpointing::None
}

/// The lines of a log tail as the message holds them (none when it is empty).
fn split_tail(tail: &str) -> Vec<String> {
    if tail.is_empty() {
        return Vec::new();
    }
    tail.split(LOG_LINES).map(str::to_string).collect()
}
