//! Progress bars for training and sampling.

use std::path::Path;

use indicatif::{ProgressBar, ProgressStyle};
use medddpm_train::{StepMetrics, TrainObserver};

/// Draws a training bar with loss, steps/s and ETA, and a sub-bar while sampling.
pub struct TrainBar {
    bar: ProgressBar,
    sampling: Option<ProgressBar>,
}

impl TrainBar {
    pub fn new() -> Self {
        Self {
            bar: ProgressBar::hidden(),
            sampling: None,
        }
    }
}

impl TrainObserver for TrainBar {
    fn started(&mut self, start_step: usize, end_step: usize) {
        self.bar = ProgressBar::new(end_step as u64).with_position(start_step as u64);
        self.bar.set_style(
            ProgressStyle::with_template("train {bar:30} {pos}/{len} steps  loss {msg}  [{elapsed_precise} < {eta_precise}, {per_sec}]")
                .expect("valid template"),
        );
        self.bar.reset_eta();
    }

    fn step(&mut self, m: &StepMetrics) {
        self.bar.set_message(format!("{:.4}", m.loss));
        self.bar.set_position(m.step as u64);
    }

    fn sampling(&mut self, done: usize, total: usize) {
        let bar = self.sampling.get_or_insert_with(|| {
            let b = ProgressBar::new(total as u64);
            b.set_style(
                ProgressStyle::with_template(
                    "  EMA sample {bar:30} {pos}/{len} reverse steps [{eta_precise}]",
                )
                .expect("valid template"),
            );
            b
        });
        bar.set_position(done as u64);
        if done == total {
            bar.finish_and_clear();
            self.sampling = None;
        }
    }

    fn checkpoint(&mut self, path: &Path) {
        self.bar.println(format!("checkpoint {}", path.display()));
    }

    fn message(&mut self, text: &str) {
        self.bar.println(text);
    }
}

impl Drop for TrainBar {
    fn drop(&mut self) {
        self.bar.finish();
    }
}

/// A bar over every reverse step of every sample.
pub fn sampling_bar(total_steps: u64) -> ProgressBar {
    let bar = ProgressBar::new(total_steps);
    bar.set_style(
        ProgressStyle::with_template(
            "sample {bar:30} {pos}/{len} reverse steps  {msg}  [{elapsed_precise} < {eta_precise}]",
        )
        .expect("valid template"),
    );
    bar
}
