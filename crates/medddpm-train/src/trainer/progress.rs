//! A session's running record: each applied step logged to `metrics.jsonl` and the TensorBoard
//! events, the session's timing and loss windows, and what it wrote (for the summary).

use std::path::PathBuf;
use std::time::Instant;

use super::events::RunEvents;
use super::log::{mean, LossWindows, MetricsLog, StepMetrics};
use super::{TrainObserver, TrainSummary};
use crate::checkpoint::{RunDir, TrainState};
use crate::TrainError;

/// What an applied optimizer step adds to the log, besides its timing.
pub(super) struct Logged {
    pub loss: f32,
    pub lr: f64,
    pub grad_norm: Option<f32>,
    pub loss_scale: Option<f64>,
}

/// A session's running record: the metrics log and event file, timing, loss windows and what
/// it wrote.
pub(super) struct Progress {
    pub start_step: usize,
    metrics: MetricsLog,
    /// This session's TensorBoard event file (`[train] tensorboard`).
    pub events: Option<RunEvents>,
    session_start: Instant,
    elapsed_before: f64,
    losses: LossWindows,
    pub last_checkpoint: Option<PathBuf>,
    pub samples: Vec<PathBuf>,
}

impl Progress {
    pub fn start(
        run: &RunDir,
        state: &TrainState,
        events: Option<RunEvents>,
    ) -> Result<Self, TrainError> {
        Ok(Self {
            start_step: state.step,
            metrics: MetricsLog::open(&run.metrics_path(), state.step)?,
            events,
            session_start: Instant::now(),
            elapsed_before: state.elapsed_s,
            losses: LossWindows::default(),
            last_checkpoint: None,
            samples: Vec::new(),
        })
    }

    /// Logs the optimizer step just completed (and keeps the run's training time in `state`).
    pub fn record(
        &mut self,
        state: &mut TrainState,
        logged: Logged,
        observer: &mut dyn TrainObserver,
    ) -> Result<(), TrainError> {
        self.losses.push(logged.loss);
        let session_s = self.session_start.elapsed().as_secs_f64();
        state.elapsed_s = self.elapsed_before + session_s;
        let m = StepMetrics {
            step: state.step,
            loss: logged.loss,
            lr: logged.lr,
            grad_norm: logged.grad_norm,
            loss_scale: logged.loss_scale,
            steps_per_s: (state.step - self.start_step) as f64 / session_s.max(1e-9),
            elapsed_s: state.elapsed_s,
        };
        self.metrics.write(&m)?;
        if let Some(events) = &mut self.events {
            events.step(&m)?;
        }
        observer.step(&m);
        Ok(())
    }

    /// The session's numbers and its last checkpoint (the run's latest if it wrote none).
    pub fn summary(self, run: &RunDir, state: &TrainState) -> Result<TrainSummary, TrainError> {
        let checkpoint = match self.last_checkpoint {
            Some(p) => p,
            None => run.latest_checkpoint()?.ok_or_else(|| {
                TrainError::checkpoint(&run.checkpoints(), "no checkpoint was written")
            })?,
        };
        Ok(TrainSummary {
            start_step: self.start_step,
            end_step: state.step,
            first_loss: self.losses.first.unwrap_or(f32::NAN),
            last_loss: state.last_loss,
            first_mean_loss: mean(self.losses.first_window.iter()),
            last_mean_loss: mean(self.losses.last_window.iter()),
            loss_window: self.losses.first_window.len(),
            checkpoint,
            samples: self.samples,
        })
    }
}
