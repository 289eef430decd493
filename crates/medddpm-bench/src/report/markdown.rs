//! The Markdown view: the headline timings of every configuration, then the forward pass by
//! operation class, the training micro-step by phase and burn's memory pools where measured.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::cells::{fmt_mib, fmt_ms, fmt_s, fmt_tolerance, md_cell, md_row};
use super::{breakdown_classes, config_label, size_text, uniform_workload, workload, DASH};
use crate::record::{BenchRecord, RecordStatus};

fn opt(v: Option<f64>, f: fn(f64) -> String) -> String {
    v.map(f).unwrap_or_else(|| DASH.to_string())
}

/// A Markdown summary for the README or a PR: one table of the headline timings, then one of
/// the forward pass split by operation class (for Ok records that have a breakdown).
///
/// Rows that are not Ok show "—" for every timing and memory cell, with their status and
/// message, so a failed configuration is visible rather than silently absent. Agreement is
/// shown for every row that has it: it is why a `disagrees` row has no timings.
pub fn to_markdown(records: &[BenchRecord]) -> String {
    let mut out = String::new();
    if records.is_empty() {
        out.push_str("_No benchmark records._\n");
        return out;
    }
    let uniform = uniform_workload(records);
    if uniform {
        let r = &records[0];
        let _ = writeln!(
            out,
            "Model `{}`, volume {} (d x h x w), batch {}.\n",
            md_cell(r.model.name()),
            size_text(r.size),
            r.batch
        );
    }
    let (table, warm_cache) = headline_table(records, uniform);
    out.push_str(&table);
    out.push_str(&notes(records, warm_cache));
    out.push_str(&super::gpu::gpu_time_table(records));
    let with_breakdown: Vec<&BenchRecord> = records
        .iter()
        .filter(|r| r.timings_verified() && !r.breakdown_ms.is_empty())
        .collect();
    if with_breakdown.is_empty() {
        return out;
    }
    out.push_str(&forward_breakdown_table(&with_breakdown, uniform));
    out.push_str(&train_breakdown_table(records));
    out.push_str(&burn_memory_table(records));
    out
}

/// The first columns of a table: the configuration, and the workload when it varies.
fn label_columns(uniform: bool) -> (Vec<String>, Vec<String>) {
    let mut header = vec!["Configuration".to_string()];
    let mut align = vec!["---".to_string()];
    if !uniform {
        header.push("Workload".to_string());
        align.push("---".to_string());
    }
    (header, align)
}

/// The first cells of a row: its configuration, and its workload when the workload varies.
fn label_cells(r: &BenchRecord, uniform: bool) -> Vec<String> {
    let mut row = vec![md_cell(&config_label(r))];
    if !uniform {
        row.push(md_cell(&workload(r)));
    }
    row
}

/// The headline table, one row per record; and whether a row's first steps had a warm tuning
/// cache (a note then says what the dagger means).
fn headline_table(records: &[BenchRecord], uniform: bool) -> (String, bool) {
    let (mut header, mut align) = label_columns(uniform);
    header.extend(
        [
            "Device",
            "Train micro-step (ms)",
            "Sampling step (ms)",
            "First sampling step (s)",
            "First train step (s)",
            "Peak memory (MiB)",
            "Agreement rel. L2 (tolerance)",
            "Status",
        ]
        .map(String::from),
    );
    align.extend(["---", "---:", "---:", "---:", "---:", "---:", "---:", "---"].map(String::from));
    let mut out = md_row(&header) + &md_row(&align);
    let mut warm_cache = false;
    for r in records {
        let mut row = label_cells(r, uniform);
        row.push(md_cell(&r.device));
        if r.timings_verified() {
            let warm = r.tune_cache_warm == Some(true);
            warm_cache |= warm;
            row.extend(timing_cells(r, warm));
        } else {
            row.extend(std::iter::repeat_n(DASH.to_string(), 5));
        }
        row.push(agreement_cell(r));
        row.push(status_cell(r));
        out.push_str(&md_row(&row));
    }
    (out, warm_cache)
}

/// The step times and peak memory of a row whose timings are verified; `warm` marks the first
/// steps with a dagger.
fn timing_cells(r: &BenchRecord, warm: bool) -> [String; 5] {
    let first = |v: Option<f64>| {
        let s = opt(v, fmt_s);
        if warm && v.is_some() {
            s + " †"
        } else {
            s
        }
    };
    [
        opt(r.train_step_median_ms, fmt_ms),
        opt(r.sample_step_median_ms, fmt_ms),
        first(r.first_sample_step_s),
        first(r.first_train_step_s),
        opt(r.peak_memory_mib, fmt_mib),
    ]
}

/// The agreement error, its tolerance and what it was measured against.
fn agreement_cell(r: &BenchRecord) -> String {
    match (r.agreement_rel_l2, r.agreement_tolerance) {
        (Some(e), Some(t)) => match &r.agreement_reference {
            Some(against) => format!("{e:.1e} ({}; vs {against})", fmt_tolerance(t)),
            None => format!("{e:.1e} ({})", fmt_tolerance(t)),
        },
        (Some(e), None) => format!("{e:.1e}"),
        (None, Some(t)) => format!("{DASH} ({})", fmt_tolerance(t)),
        (None, None) => DASH.to_string(),
    }
}

/// The status and the message.
fn status_cell(r: &BenchRecord) -> String {
    let (status, message) = if r.timings_verified() && r.status == RecordStatus::Failed {
        // Cut short after a passed probe: say which phases are missing, not the log tail
        // (the JSON lines and CSV keep the whole message).
        ("partial", Some(r.message.clone().unwrap_or_default()))
    } else {
        (r.status.name(), r.full_message())
    };
    match message {
        Some(m) if !m.trim().is_empty() => md_cell(&format!("{status}: {m}")),
        _ => status.to_string(),
    }
}

/// Notes under the headline table: how peak memory was measured, and what the dagger means.
fn notes(records: &[BenchRecord], warm_cache: bool) -> String {
    let sources: BTreeSet<&str> = records
        .iter()
        .filter(|r| r.timings_verified() && r.peak_memory_mib.is_some())
        .filter_map(|r| r.memory_source.as_deref())
        .collect();
    let mut notes = Vec::new();
    if !sources.is_empty() {
        let list: Vec<String> = sources.iter().map(|s| md_cell(s)).collect();
        notes.push(format!("Peak memory: {}.", list.join("; ")));
    }
    if warm_cache {
        notes
            .push("† The tuning cache of this backend and precision already held results when the run started: the first steps include the tuning of only the kernels it lacked (none if an earlier run of the same configuration finished; the run's log lists each kernel tuned).".to_string());
    }
    let mut out = String::new();
    if !notes.is_empty() {
        out.push('\n');
        for n in notes {
            out.push_str(&n);
            out.push('\n');
        }
    }
    out
}

/// The forward pass by operation class, for the verified records with a breakdown.
fn forward_breakdown_table(rows: &[&BenchRecord], uniform: bool) -> String {
    let classes = breakdown_classes(rows.iter().copied());
    let mut out = String::from(
        "\nForward pass by operation class, ms (% of the classes' sum); each operation is \
         synchronised on its own, so the sum exceeds a plain forward.\n\n",
    );
    let (mut header, mut align) = label_columns(uniform);
    header.extend(classes.iter().cloned());
    header.push("Sum (ms)".to_string());
    out.push_str(&md_row(&header));
    align.extend(std::iter::repeat_n("---:".to_string(), classes.len() + 1));
    out.push_str(&md_row(&align));
    for r in rows {
        let mut row = label_cells(r, uniform);
        row.extend(share_cells(&r.breakdown_ms, &classes));
        out.push_str(&md_row(&row));
    }
    out
}

/// burn's own memory statistics, for the records that read them.
fn burn_memory_table(records: &[BenchRecord]) -> String {
    use crate::single::{MEMORY_IN_USE, MEMORY_RESERVED};
    records_table(
        records,
        |r| !r.burn_memory_mib.is_empty(),
        "\nburn's memory pools after the forward pass of the profiled training step, MiB (the \
         live tensors, saved activations among them; and what the pools hold from the device), \
         beside the nvidia-smi peak.\n\n",
        &["in use", "reserved", "nvidia-smi peak"],
        |r| {
            let get = |k: &str| opt(r.burn_memory_mib.get(k).copied(), fmt_mib);
            vec![
                get(MEMORY_IN_USE),
                get(MEMORY_RESERVED),
                opt(r.peak_memory_mib, fmt_mib),
            ]
        },
    )
}

/// The training micro-step by phase, for the records that measured it.
fn train_breakdown_table(records: &[BenchRecord]) -> String {
    const PHASES: [&str; 6] = [
        "forward and loss",
        "backward: convolution data gradients",
        "backward: convolution weight gradients",
        "backward: everything else",
        "gradients to the optimizer",
        "Adam step",
    ];
    let mut columns = PHASES.to_vec();
    columns.push("Sum (ms)");
    let phases: Vec<String> = PHASES.iter().map(|p| p.to_string()).collect();
    records_table(
        records,
        |r| !r.train_breakdown_ms.is_empty(),
        "\nOne training micro-step by phase, ms (% of the sum); the phases, and in the backward \
         pass each convolution gradient, are synchronised on their own.\n\n",
        &columns,
        |r| share_cells(&r.train_breakdown_ms, &phases),
    )
}

/// A table of the records `has` is true of, after `intro`: the configuration, then `columns`
/// (right-aligned) filled by `cells`; nothing when no record has it.
fn records_table(
    records: &[BenchRecord],
    has: impl Fn(&BenchRecord) -> bool,
    intro: &str,
    columns: &[&str],
    cells: impl Fn(&BenchRecord) -> Vec<String>,
) -> String {
    let rows: Vec<&BenchRecord> = records.iter().filter(|r| has(r)).collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut out = String::from(intro);
    let mut header = vec!["Configuration".to_string()];
    header.extend(columns.iter().map(|c| c.to_string()));
    out.push_str(&md_row(&header));
    let mut align = vec!["---".to_string()];
    align.extend(std::iter::repeat_n("---:".to_string(), columns.len()));
    out.push_str(&md_row(&align));
    for r in rows {
        let mut row = vec![md_cell(&config_label(r))];
        row.extend(cells(r));
        out.push_str(&md_row(&row));
    }
    out
}

/// `ms (share%)` for each of `keys` in `ms`, then the sum of all of `ms`.
fn share_cells(ms: &BTreeMap<String, f64>, keys: &[String]) -> Vec<String> {
    let sum: f64 = ms.values().sum();
    let mut cells: Vec<String> = keys
        .iter()
        .map(|k| match ms.get(k) {
            Some(&v) if sum > 0.0 => format!("{} ({:.1}%)", fmt_ms(v), 100.0 * v / sum),
            Some(&v) => fmt_ms(v),
            None => DASH.to_string(),
        })
        .collect();
    cells.push(fmt_ms(sum));
    cells
}
