//! `prepare-report.json` and the summary printed at the end: cases done with their figures,
//! cases skipped with their reasons, and the settings used.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::{CaseProblem, PrepareError};

/// The report's file name inside the output folder.
pub const REPORT_FILE: &str = "prepare-report.json";

/// What a command records about a case it prepared.
pub trait CaseDetails: Serialize {
    /// The case id.
    fn case(&self) -> &str;
    /// A line for the printed summary (e.g. the thresholds found), if worth printing.
    fn summary(&self) -> Option<String> {
        None
    }
}

/// [`CaseDetails`] for records whose `case` field is the case id and that print no summary.
macro_rules! case_details_by_field {
    ($($record:ty),+) => {
        $(impl $crate::report::CaseDetails for $record {
            fn case(&self) -> &str {
                &self.case
            }
        })+
    };
}
pub(crate) use case_details_by_field;

/// A case that was skipped, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Skipped {
    /// The case id.
    pub case: String,
    /// The problem as a sentence (naming the file).
    pub reason: String,
    /// The problem with its values.
    pub problem: CaseProblem,
}

impl Skipped {
    pub(crate) fn new(case: impl Into<String>, problem: CaseProblem) -> Self {
        Self {
            case: case.into(),
            reason: problem.to_string(),
            problem,
        }
    }
}

/// The outcome of one `prepare` run.
#[derive(Debug, Clone, Serialize)]
pub struct Report<S, D> {
    /// The subcommand (`brats`, `whole-head`, `head-mask`, `real-demo`).
    pub command: String,
    /// Number of cases prepared.
    pub cases_done: usize,
    /// Number of cases skipped.
    pub cases_skipped: usize,
    /// The settings the run used (inputs, grid, options).
    pub settings: S,
    /// One entry per prepared case, in case order.
    pub done: Vec<D>,
    /// One entry per skipped case, in case order.
    pub skipped: Vec<Skipped>,
}

impl<S: Serialize, D: CaseDetails> Report<S, D> {
    pub(crate) fn new(command: &str, settings: S, done: Vec<D>, skipped: Vec<Skipped>) -> Self {
        Self {
            command: command.into(),
            cases_done: done.len(),
            cases_skipped: skipped.len(),
            settings,
            done,
            skipped,
        }
    }

    /// The report of a finished run, written to `out` (every command ends with it).
    pub(crate) fn written(self, out: &Path) -> Result<Self, PrepareError> {
        self.write(out)?;
        Ok(self)
    }

    /// Writes `out/prepare-report.json` (atomically) and returns its path.
    pub fn write(&self, out: &Path) -> Result<PathBuf, PrepareError> {
        let path = out.join(REPORT_FILE);
        let json = serde_json::to_vec_pretty(self).map_err(|e| PrepareError::Io {
            path: path.clone(),
            source: e.into(),
        })?;
        medddpm_atomic::write(&path, &json).map_err(PrepareError::io(&path))?;
        Ok(path)
    }

    /// The text printed at the end: per-case lines the command provides, every skipped case
    /// with its reason, and the counts.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        for d in &self.done {
            if let Some(line) = d.summary() {
                let _ = writeln!(s, "  {}: {line}", d.case());
            }
        }
        if !self.skipped.is_empty() {
            let _ = writeln!(s, "skipped:");
            for k in &self.skipped {
                let _ = writeln!(s, "  {}: {}", k.case, k.reason);
            }
        }
        let _ = write!(
            s,
            "prepare {}: {} case(s) prepared, {} skipped",
            self.command, self.cases_done, self.cases_skipped
        );
        s
    }
}
