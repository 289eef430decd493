//! What a session records: `metrics.jsonl` (one line per optimizer step, trimmed back to the
//! checkpoint on resume) and the loss windows the summary reports.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::checkpoint;
use crate::TrainError;

/// One optimizer step's numbers, as written to `metrics.jsonl`.
#[derive(Debug, Clone, Serialize)]
pub struct StepMetrics {
    /// Optimizer steps completed.
    pub step: usize,
    /// Mean loss over the step's micro-batches (the reference's `training_loss` scalar).
    pub loss: f32,
    /// Learning rate.
    pub lr: f64,
    /// Global L2 norm of the gradients Adam took (averaged over the replicas, unscaled);
    /// absent with `[train] grad_norm = false`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grad_norm: Option<f32>,
    /// f16's loss scale after the step; absent in other precisions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loss_scale: Option<f64>,
    /// Optimizer steps per second over this session so far.
    pub steps_per_s: f64,
    /// Seconds of training in the whole run.
    pub elapsed_s: f64,
}

/// Steps averaged in [`super::TrainSummary::first_mean_loss`] and
/// [`super::TrainSummary::last_mean_loss`].
pub const LOSS_WINDOW: usize = 20;

/// The session's first loss and its first and last [`LOSS_WINDOW`] losses.
#[derive(Default)]
pub(super) struct LossWindows {
    pub first: Option<f32>,
    pub first_window: Vec<f32>,
    pub last_window: VecDeque<f32>,
}

impl LossWindows {
    pub fn push(&mut self, loss: f32) {
        self.first.get_or_insert(loss);
        if self.first_window.len() < LOSS_WINDOW {
            self.first_window.push(loss);
        }
        if self.last_window.len() == LOSS_WINDOW {
            self.last_window.pop_front();
        }
        self.last_window.push_back(loss);
    }
}

/// Mean of the values (NaN for none).
pub(super) fn mean<'a>(values: impl ExactSizeIterator<Item = &'a f32>) -> f32 {
    let n = values.len();
    values.map(|&v| v as f64).sum::<f64>() as f32 / n as f32
}

/// `metrics.jsonl`, open for appending.
pub(super) struct MetricsLog {
    file: std::fs::File,
    path: PathBuf,
}

impl MetricsLog {
    /// Opens the log for appending, first dropping lines past `step`: after a crash the steps
    /// since the last checkpoint are trained again and must not appear twice.
    pub fn open(path: &Path, step: usize) -> Result<Self, TrainError> {
        if let Ok(text) = std::fs::read_to_string(path) {
            let kept: Vec<&str> = text
                .lines()
                .filter(|l| {
                    serde_json::from_str::<serde_json::Value>(l)
                        .ok()
                        .and_then(|v| v["step"].as_u64())
                        .is_some_and(|s| s as usize <= step)
                })
                .collect();
            let mut body = kept.join("\n");
            if !body.is_empty() {
                body.push('\n');
            }
            checkpoint::atomic_write(path, body.as_bytes())?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| TrainError::io(path, e))?;
        Ok(Self {
            file,
            path: path.to_path_buf(),
        })
    }

    pub fn write(&mut self, m: &StepMetrics) -> Result<(), TrainError> {
        use std::io::Write;
        let line = serde_json::to_string(m).expect("metrics serialise");
        writeln!(self.file, "{line}").map_err(|e| TrainError::io(&self.path, e))
    }
}
