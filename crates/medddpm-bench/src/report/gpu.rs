//! The GPU's time per step (CUPTI trace) beside the step's wall time: the table that says
//! whether the GPU or the host holds a step, and which operation classes take the GPU's time.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use super::cells::{fmt_ms, md_cell, md_row};
use super::{config_label, DASH};
use crate::gpu_trace::GpuTime;
use crate::record::BenchRecord;

/// The traced steps of `records`, one row per record and step kind; empty without traces.
pub(super) fn gpu_time_table(records: &[BenchRecord]) -> String {
    let rows: Vec<(&BenchRecord, &str, &GpuTime, Option<f64>)> = records
        .iter()
        .flat_map(|r| {
            [
                (
                    "training micro-step",
                    r.train_gpu.as_ref(),
                    r.train_step_median_ms,
                ),
                (
                    "sampling step",
                    r.sample_gpu.as_ref(),
                    r.sample_step_median_ms,
                ),
            ]
            .into_iter()
            .filter_map(move |(what, t, wall)| t.map(|t| (r, what, t, wall)))
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let classes: BTreeSet<&String> = rows.iter().flat_map(|r| r.2.by_class_ms.keys()).collect();
    let mut out = String::from(
        "\nThe GPU's time per step (CUPTI, traced steps): busy = the union of its kernels, \
         copies and memsets; its share of the untraced median step; then kernel time by \
         class, ms.\n\n",
    );
    let mut header: Vec<String> = [
        "Configuration",
        "step",
        "median step (ms)",
        "GPU busy (ms)",
        "busy share",
        "launches",
    ]
    .map(String::from)
    .to_vec();
    header.extend(classes.iter().map(|c| md_cell(c)));
    out.push_str(&md_row(&header));
    let mut align = vec!["---".to_string(), "---".to_string()];
    align.extend(std::iter::repeat_n("---:".to_string(), header.len() - 2));
    out.push_str(&md_row(&align));
    for (r, what, t, wall) in rows {
        let mut row = vec![md_cell(&config_label(r)), what.to_string()];
        row.push(wall.map_or(DASH.to_string(), fmt_ms));
        row.push(fmt_ms(t.busy_ms));
        row.push(wall.map_or(DASH.to_string(), |w| {
            format!("{:.0}%", 100.0 * t.busy_ms / w)
        }));
        row.push(format!("{:.0}", t.launches));
        row.extend(classes.iter().map(|c| {
            t.by_class_ms
                .get(*c)
                .map_or(DASH.to_string(), |v| fmt_ms(*v))
        }));
        out.push_str(&md_row(&row));
    }
    let _ = writeln!(out);
    out
}
