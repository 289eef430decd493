//! Report writers for the benchmark matrix: the JSON-lines record file (appended to as each
//! configuration finishes, so a crash loses at most the configuration that was running), and the
//! CSV, Markdown and PNG views a reader looks at.
//!
//! The PNG is drawn with plotters' bitmap backend in `medddpm-render`'s embedded font (DejaVu
//! Sans), so that charts render on a bare GPU machine with no fontconfig or system fonts.

mod cells;
mod chart;
mod csv;
mod gpu;
mod jsonl;
mod markdown;

use std::collections::BTreeSet;

use medddpm_unet::OpClass;

use crate::record::BenchRecord;

pub use chart::write_png_chart;
pub use csv::to_csv;
pub use jsonl::{append_jsonl, read_jsonl};
pub use markdown::to_markdown;

/// Breakdown classes in the order every view lists them; unknown classes follow alphabetically.
const CLASS_ORDER: [&str; 5] = [
    OpClass::ALL[0].name(),
    OpClass::ALL[1].name(),
    OpClass::ALL[2].name(),
    OpClass::ALL[3].name(),
    OpClass::ALL[4].name(),
];

/// Placeholder for a value that was not measured (or is withheld because the run was not Ok).
const DASH: &str = "—";

fn size_text(size: [usize; 3]) -> String {
    format!("{}x{}x{}", size[0], size[1], size[2])
}

/// The union of breakdown classes over `records`: known classes in [`CLASS_ORDER`], then the
/// others alphabetically (a `BTreeSet` already sorts them).
fn breakdown_classes<'r>(records: impl IntoIterator<Item = &'r BenchRecord>) -> Vec<String> {
    let all: BTreeSet<&str> = records
        .into_iter()
        .flat_map(|r| r.breakdown_ms.keys().map(String::as_str))
        .collect();
    let known = CLASS_ORDER.iter().copied().filter(|c| all.contains(c));
    let others = all.iter().copied().filter(|c| !CLASS_ORDER.contains(c));
    known.chain(others).map(str::to_string).collect()
}

fn workload(r: &BenchRecord) -> String {
    format!("{} {} batch {}", r.model, size_text(r.size), r.batch)
}

/// Whether every record benchmarks the same model, volume and batch: then the configuration
/// label alone identifies a row, and the workload is said once.
fn uniform_workload<'r>(records: impl IntoIterator<Item = &'r BenchRecord>) -> bool {
    let mut records = records.into_iter();
    let Some(first) = records.next() else {
        return true;
    };
    records.all(|r| r.workload() == first.workload())
}

/// `backend/precision/layout`, as every view names a row.
fn config_label(r: &BenchRecord) -> String {
    format!("{}/{}/{}", r.backend, r.precision, r.layout_label())
}

/// Whether a row is a reference quoted from elsewhere (drawn in grey).
fn is_reference(r: &BenchRecord) -> bool {
    r.is_quoted()
}

#[cfg(test)]
mod tests;
