//! Progress bars for training and sampling; plain progress lines instead when stderr is not a
//! terminal (a log file, a pipe, a batch job), where the bars would draw nothing.

use std::io::IsTerminal;
use std::path::Path;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use medddpm_train::{StepMetrics, TrainObserver};

/// A plain progress line is printed each time this share of the work (in percent) is done.
const PLAIN_EVERY_PERCENT: u64 = 5;

/// Progress as text lines, one per [`PLAIN_EVERY_PERCENT`] of `total`, with elapsed time and an
/// estimate of the time left.
struct PlainLines {
    what: &'static str,
    unit: &'static str,
    first: u64,
    total: u64,
    next: u64,
    start: Instant,
}

impl PlainLines {
    /// Lines when stderr is not a terminal, else `None` (the bar draws).
    fn if_not_terminal(
        what: &'static str,
        unit: &'static str,
        first: u64,
        total: u64,
    ) -> Option<Self> {
        (!std::io::stderr().is_terminal()).then(|| Self::new(what, unit, first, total))
    }

    fn new(what: &'static str, unit: &'static str, first: u64, total: u64) -> Self {
        let mut lines = Self {
            what,
            unit,
            first,
            total,
            next: 0,
            start: Instant::now(),
        };
        lines.next = lines.threshold_after(first);
        lines
    }

    /// The first position past `pos` at a multiple of the step (and never past the end).
    fn threshold_after(&self, pos: u64) -> u64 {
        let k = pos * 100 / self.total.max(1) / PLAIN_EVERY_PERCENT + 1;
        (k * PLAIN_EVERY_PERCENT * self.total)
            .div_ceil(100)
            .clamp(pos + 1, self.total.max(pos + 1))
    }

    /// The line to print at position `pos`, if it crossed the next threshold.
    fn update(&mut self, pos: u64, msg: &str) -> Option<String> {
        if self.total == 0 || pos < self.next {
            return None;
        }
        self.next = self.threshold_after(pos);
        let elapsed = self.start.elapsed().as_secs_f64();
        let done = pos.saturating_sub(self.first);
        let left = if done > 0 {
            format!(
                ", {:.0} s left",
                elapsed / done as f64 * (self.total - pos.min(self.total)) as f64
            )
        } else {
            String::new()
        };
        Some(format!(
            "{} {pos}/{} {} ({}%){}  [{elapsed:.0} s{left}]",
            self.what,
            self.total,
            self.unit,
            pos * 100 / self.total,
            if msg.is_empty() {
                String::new()
            } else {
                format!("  {msg}")
            },
        ))
    }
}

/// Draws a training bar with loss, steps/s and ETA, and a sub-bar while sampling; or prints
/// progress lines when stderr is not a terminal.
pub struct TrainBar {
    bar: ProgressBar,
    sampling: Option<ProgressBar>,
    plain: Option<PlainLines>,
    plain_sampling: Option<PlainLines>,
}

impl TrainBar {
    pub fn new() -> Self {
        Self {
            bar: ProgressBar::hidden(),
            sampling: None,
            plain: None,
            plain_sampling: None,
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
        self.plain =
            PlainLines::if_not_terminal("train", "steps", start_step as u64, end_step as u64);
    }

    fn step(&mut self, m: &StepMetrics) {
        self.bar.set_message(format!("{:.4}", m.loss));
        self.bar.set_position(m.step as u64);
        if let Some(line) = self
            .plain
            .as_mut()
            .and_then(|p| p.update(m.step as u64, &format!("loss {:.4}", m.loss)))
        {
            eprintln!("{line}");
        }
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
        if self.plain.is_some() {
            let plain = self.plain_sampling.get_or_insert_with(|| {
                PlainLines::new("  EMA sample", "reverse steps", 0, total as u64)
            });
            if let Some(line) = plain.update(done as u64, "") {
                eprintln!("{line}");
            }
        }
        if done == total {
            bar.finish_and_clear();
            self.sampling = None;
            self.plain_sampling = None;
        }
    }

    fn checkpoint(&mut self, path: &Path) {
        self.message(&format!("checkpoint {}", path.display()));
    }

    /// Above the bar on a terminal; a line of its own otherwise (a hidden bar prints nothing,
    /// and a log file is where a scheduler's job keeps what the run said).
    fn message(&mut self, text: &str) {
        if !std::io::stderr().is_terminal() {
            eprintln!("{text}");
        } else {
            self.bar.println(text);
        }
    }

    fn stop_requested(&mut self) -> bool {
        crate::signals::received().is_some()
    }
}

impl Drop for TrainBar {
    fn drop(&mut self) {
        self.bar.finish();
    }
}

/// Progress over every reverse step of every sample: a bar, or lines when stderr is not a
/// terminal.
pub struct SamplingProgress {
    bar: ProgressBar,
    plain: Option<PlainLines>,
}

impl SamplingProgress {
    pub fn new(total_steps: u64) -> Self {
        let bar = ProgressBar::new(total_steps);
        bar.set_style(
            ProgressStyle::with_template(
                "sample {bar:30} {pos}/{len} reverse steps  {msg}  [{elapsed_precise} < {eta_precise}]",
            )
            .expect("valid template"),
        );
        Self {
            bar,
            plain: PlainLines::if_not_terminal("sample", "reverse steps", 0, total_steps),
        }
    }

    /// `pos` reverse steps done in all, `msg` saying which mask and sample.
    pub fn update(&mut self, pos: u64, msg: String) {
        if let Some(line) = self.plain.as_mut().and_then(|p| p.update(pos, &msg)) {
            eprintln!("{line}");
        }
        self.bar.set_message(msg);
        self.bar.set_position(pos);
    }

    pub fn finish(self) {
        self.bar.finish_and_clear();
    }
}

/// Progress of a synthesis run in pairs, with volumes per hour and the time left: a bar, or
/// lines when stderr is not a terminal. Positions count reverse steps (`steps` per pair), so
/// the estimate moves within a pair; pairs done before this run count as done, not as speed.
pub struct SynthProgress {
    bar: ProgressBar,
    plain: Option<PlainLines>,
    steps: u64,
    before: u64,
    made: u64,
    start: Instant,
}

impl SynthProgress {
    /// `count` pairs, `before` of them done already, `steps` reverse steps each (1 to count
    /// whole pairs only).
    pub fn new(count: u64, before: u64, steps: u64) -> Self {
        let steps = steps.max(1);
        let bar = ProgressBar::new(count * steps).with_position(before * steps);
        bar.set_style(
            ProgressStyle::with_template(
                "synthesize {bar:30} {msg}  [{elapsed_precise} < {eta_precise}]",
            )
            .expect("valid template"),
        );
        bar.reset_eta();
        let mut progress = Self {
            bar,
            plain: PlainLines::if_not_terminal("synthesize", "pairs", before, count),
            steps,
            before,
            made: 0,
            start: Instant::now(),
        };
        progress.show(before * steps);
        progress
    }

    /// The pair being made is `done` reverse steps in, `batch` pairs at once.
    pub fn step(&mut self, batch: usize, done: usize) {
        self.show((self.before + self.made) * self.steps + batch as u64 * done as u64);
    }

    /// One more pair finished.
    pub fn pair(&mut self) {
        self.made += 1;
        self.show((self.before + self.made) * self.steps);
    }

    /// `pairs` finished in all (when counted from the manifests).
    pub fn set_pairs(&mut self, pairs: u64) {
        self.made = pairs.saturating_sub(self.before);
        self.show(pairs * self.steps);
    }

    fn show(&mut self, pos: u64) {
        let count = self.bar.length().unwrap_or(0) / self.steps;
        let hours = self.start.elapsed().as_secs_f64() / 3600.0;
        let done_now = pos.saturating_sub(self.before * self.steps) as f64 / self.steps as f64;
        let rate = match done_now > 0.0 && hours > 0.0 {
            true => format!("{:.1} volumes/h", done_now / hours),
            false => "- volumes/h".into(),
        };
        let pairs = self.before + self.made;
        self.bar
            .set_message(format!("{pairs}/{count} pairs  {rate}"));
        self.bar.set_position(pos.min(count * self.steps));
        if let Some(line) = self.plain.as_mut().and_then(|p| p.update(pairs, &rate)) {
            eprintln!("{line}");
        }
    }

    pub fn finish(self) {
        self.bar.finish_and_clear();
    }
}

/// One bar per pass of a computation made of passes (`eval`'s memorisation check: prefilter,
/// then SSIM), each replacing the last; plain lines when stderr is not a terminal.
pub struct StageProgress {
    what: &'static str,
    bar: Option<ProgressBar>,
    plain: Option<PlainLines>,
}

impl StageProgress {
    pub fn new() -> Self {
        Self {
            what: "",
            bar: None,
            plain: None,
        }
    }

    /// `done` of `total` `unit` of the pass `what`; a new `what` starts a new bar.
    pub fn update(&mut self, what: &'static str, unit: &'static str, done: u64, total: u64) {
        if self.what != what || self.bar.is_none() {
            if let Some(old) = self.bar.take() {
                old.finish_and_clear();
            }
            let bar = ProgressBar::new(total);
            bar.set_style(
                ProgressStyle::with_template(&format!(
                    "{what} {{bar:30}} {{pos}}/{{len}} {unit}  [{{elapsed_precise}} < {{eta_precise}}]"
                ))
                .expect("valid template"),
            );
            self.what = what;
            self.bar = Some(bar);
            self.plain = PlainLines::if_not_terminal(what, unit, 0, total);
        }
        if let Some(line) = self.plain.as_mut().and_then(|p| p.update(done, "")) {
            eprintln!("{line}");
        }
        if let Some(bar) = &self.bar {
            bar.set_position(done);
        }
    }

    pub fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::PlainLines;

    fn lines(first: u64, total: u64) -> Vec<(u64, String)> {
        let mut p = PlainLines::new("train", "steps", first, total);
        (first..=total)
            .filter_map(|pos| p.update(pos, "loss 0.5").map(|l| (pos, l)))
            .collect()
    }

    #[test]
    fn one_line_every_five_percent_and_one_at_the_end() {
        let got = lines(0, 200);
        assert_eq!(got.len(), 20);
        assert_eq!(got[0].0, 10);
        assert!(
            got[0].1.starts_with("train 10/200 steps (5%)  loss 0.5  ["),
            "{}",
            got[0].1
        );
        assert_eq!(got.last().unwrap().0, 200);
        assert!(got.last().unwrap().1.contains("(100%)"));
    }

    #[test]
    fn short_and_resumed_runs_still_report() {
        // Fewer positions than lines: one per position.
        assert_eq!(
            lines(0, 3).iter().map(|l| l.0).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        // Resumed at step 150 of 200: lines from 160 on, the first after the resume point.
        let got = lines(150, 200);
        assert_eq!(got.first().unwrap().0, 160);
        assert_eq!(got.last().unwrap().0, 200);
        assert_eq!(got.len(), 5);
        // Nothing to do: no line, no division by zero.
        assert!(lines(0, 0).is_empty());
    }
}
