//! `medddpm train --gpu-trace N`: the GPU's time over N optimizer steps of a real run (CUPTI,
//! CUDA only), beside their wall time: whether the GPU or the host holds the trainer's step.
//! Tracing starts after the first few steps (compilation, tuning, the first reads of the data)
//! and ends N steps later; the result goes to `gpu-trace.json` in the run folder. Each traced
//! step is marked where the observer hears of it (its loss read), so the host's side says how
//! long the GPU waited from there for the next step's first work (the next batch, logging).

use std::path::{Path, PathBuf};
use std::time::Instant;

use medddpm_bench::gpu_trace::{
    mark, summarise_recording, GpuTime, Tracer, STEP_START, SYNCHRONISED,
};
use medddpm_train::{StepMetrics, TrainObserver};

/// Optimizer steps run before tracing starts.
const SETTLE_STEPS: usize = 5;

/// Wraps the progress observer; traces `steps` optimizer steps.
pub struct TracingObserver<'a> {
    inner: &'a mut dyn TrainObserver,
    steps: usize,
    out: PathBuf,
    /// The step after which tracing starts (set when training starts).
    start_at: usize,
    running: Option<(Tracer, Instant, usize)>,
    done: bool,
}

impl<'a> TracingObserver<'a> {
    pub fn new(inner: &'a mut dyn TrainObserver, steps: usize, run_dir: &Path) -> Self {
        Self {
            inner,
            steps,
            out: run_dir.join("gpu-trace.json"),
            start_at: usize::MAX,
            running: None,
            done: steps == 0,
        }
    }

    /// Called after each optimizer step, when its work has finished on the device (the
    /// trainer has read its loss).
    fn after_step(&mut self, step: usize) {
        if self.done {
            return;
        }
        match self.running.take() {
            None if step >= self.start_at => match Tracer::start() {
                Ok(t) => {
                    mark(STEP_START);
                    self.running = Some((t, Instant::now(), step));
                }
                Err(why) => self.finish_with(format!("no GPU trace: {why}")),
            },
            None => {}
            Some((tracer, start, from)) if step >= from + self.steps => {
                mark(SYNCHRONISED);
                let wall_ms = start.elapsed().as_secs_f64() * 1e3 / self.steps as f64;
                let text = match tracer.finish() {
                    Ok(recording) => {
                        self.report(summarise_recording(&recording, self.steps, wall_ms), from)
                    }
                    Err(why) => format!("no GPU trace: {why}"),
                };
                self.finish_with(text);
            }
            Some(running) => {
                mark(SYNCHRONISED);
                mark(STEP_START);
                self.running = Some(running);
            }
        }
    }

    fn report(&self, t: GpuTime, from: usize) -> String {
        let written = serde_json::to_vec_pretty(&t)
            .map_err(|e| e.to_string())
            .and_then(|bytes| medddpm_atomic::write(&self.out, &bytes).map_err(|e| e.to_string()));
        format!(
            "GPU trace of optimizer steps {}..{}: {:.1} ms a step, the GPU busy {:.1} ms ({:.0}%), {:.0} launches; kernels (ms): {}; {}; {}; {}",
            from + 1,
            from + self.steps,
            t.wall_ms,
            t.busy_ms,
            100.0 * t.busy_ms / t.wall_ms,
            t.launches,
            t.classes_text(),
            t.idle_text(),
            t.host_text().unwrap_or_else(|| "host not traced".into()),
            match written {
                Ok(()) => format!("written to {}", self.out.display()),
                Err(e) => format!("cannot write {}: {e}", self.out.display()),
            }
        )
    }

    fn finish_with(&mut self, text: String) {
        self.done = true;
        self.inner.message(&text);
    }
}

impl TrainObserver for TracingObserver<'_> {
    fn started(&mut self, start_step: usize, end_step: usize) {
        self.start_at = start_step + SETTLE_STEPS;
        if start_step + SETTLE_STEPS + self.steps > end_step {
            self.finish_with(format!(
                "no GPU trace: the session runs {} steps, fewer than the {SETTLE_STEPS} before tracing and the {} traced",
                end_step.saturating_sub(start_step),
                self.steps
            ));
        }
        self.inner.started(start_step, end_step);
    }

    fn step(&mut self, metrics: &StepMetrics) {
        self.inner.step(metrics);
        self.after_step(metrics.step);
    }

    fn sampling(&mut self, done: usize, total: usize) {
        self.inner.sampling(done, total);
    }

    fn checkpoint(&mut self, path: &Path) {
        self.inner.checkpoint(path);
    }

    fn message(&mut self, text: &str) {
        self.inner.message(text);
    }

    fn stop_requested(&mut self) -> bool {
        self.inner.stop_requested()
    }
}

#[cfg(all(test, not(feature = "cuda")))]
mod tests {
    use super::*;

    /// What the wrapped observer heard.
    #[derive(Default)]
    struct Heard {
        steps: Vec<usize>,
        messages: Vec<String>,
    }

    impl TrainObserver for Heard {
        fn step(&mut self, m: &StepMetrics) {
            self.steps.push(m.step);
        }
        fn message(&mut self, text: &str) {
            self.messages.push(text.to_string());
        }
    }

    fn metrics(step: usize) -> StepMetrics {
        StepMetrics {
            step,
            loss: 0.5,
            lr: 1e-5,
            grad_norm: None,
            loss_scale: None,
            steps_per_s: 1.0,
            elapsed_s: step as f64,
        }
    }

    /// What the observer wrapped by a tracer of `trace_steps` hears over a session from `start`
    /// to `end` that reports `steps`; and the session's folder.
    fn heard_over(
        trace_steps: usize,
        (start, end): (usize, usize),
        steps: impl IntoIterator<Item = usize>,
    ) -> (Heard, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let mut heard = Heard::default();
        let mut traced = TracingObserver::new(&mut heard, trace_steps, dir.path());
        traced.started(start, end);
        for step in steps {
            traced.step(&metrics(step));
        }
        drop(traced);
        (heard, dir)
    }

    #[test]
    fn the_wrapped_observer_hears_every_step_and_why_no_trace_was_taken() {
        let (heard, dir) = heard_over(3, (0, 20), 1..=20);
        assert_eq!(heard.steps, (1..=20).collect::<Vec<_>>());
        // Without CUDA the tracer cannot start: said once, when tracing was due.
        assert_eq!(heard.messages.len(), 1, "{:?}", heard.messages);
        assert!(
            heard.messages[0].starts_with("no GPU trace: "),
            "{:?}",
            heard.messages
        );
        assert!(!dir.path().join("gpu-trace.json").exists());
    }

    #[test]
    fn a_session_too_short_to_trace_says_so_at_its_start() {
        let (heard, _dir) = heard_over(10, (100, 110), [101]);
        assert_eq!(heard.messages.len(), 1, "{:?}", heard.messages);
        assert!(
            heard.messages[0]
                .contains("runs 10 steps, fewer than the 5 before tracing and the 10 traced"),
            "{:?}",
            heard.messages
        );
    }
}
