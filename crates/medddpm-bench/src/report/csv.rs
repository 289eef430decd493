//! The CSV view: one row per record, for spreadsheets and pandas.

use super::{breakdown_classes, size_text};
use crate::record::BenchRecord;

/// Quotes a CSV field per RFC 4180 when it holds a comma, a quote or a line break.
pub(super) fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Shortest round-tripping text; `Debug` rather than `Display` so tiny errors read `3.2e-6`.
fn csv_f64(v: Option<f64>) -> String {
    v.map(|v| format!("{v:?}")).unwrap_or_default()
}

/// The columns before the breakdown's (`fwd_<class>_ms`) and the message.
pub(super) const COLUMNS: [&str; 20] = [
    "backend",
    "device",
    "precision",
    "layout",
    "model",
    "size",
    "batch",
    "status",
    "agreement_rel_l2",
    "agreement_tolerance",
    "first_sample_step_s",
    "first_train_step_s",
    "train_step_median_ms",
    "train_issue_median_ms",
    "sample_step_median_ms",
    "train_back_to_back_ms",
    "sample_back_to_back_ms",
    "peak_memory_mib",
    "memory_source",
    "tune_cache_warm",
];

/// One CSV row per record, with a header, for spreadsheets and pandas.
///
/// The breakdown gets one `fwd_<class>_ms` column per class present in any record (known
/// classes first, in a fixed order), so files from different runs line up. Empty cells mean
/// "not measured". Lines end in `\n`; fields are quoted per RFC 4180 where needed.
pub fn to_csv(records: &[BenchRecord]) -> String {
    let classes = breakdown_classes(records);
    let mut header: Vec<String> = COLUMNS.iter().map(|s| s.to_string()).collect();
    header.extend(classes.iter().map(|c| format!("fwd_{c}_ms")));
    header.push("message".to_string());

    let mut out = String::new();
    let fields: Vec<String> = header.iter().map(|h| csv_field(h)).collect();
    out.push_str(&fields.join(","));
    out.push('\n');
    for r in records {
        let mut row = vec![
            r.backend.to_string(),
            r.device.clone(),
            r.precision.to_string(),
            r.layout_label(),
            r.model.to_string(),
            size_text(r.size),
            r.batch.to_string(),
            r.status.name().to_string(),
            csv_f64(r.agreement_rel_l2),
            csv_f64(r.agreement_tolerance),
            csv_f64(r.first_sample_step_s),
            csv_f64(r.first_train_step_s),
            csv_f64(r.train_step_median_ms),
            csv_f64(r.train_issue_median_ms),
            csv_f64(r.sample_step_median_ms),
            csv_f64(r.train_back_to_back_ms),
            csv_f64(r.sample_back_to_back_ms),
            csv_f64(r.peak_memory_mib),
            r.memory_source.clone().unwrap_or_default(),
            r.tune_cache_warm.map(|b| b.to_string()).unwrap_or_default(),
        ];
        row.extend(
            classes
                .iter()
                .map(|c| csv_f64(r.breakdown_ms.get(c).copied())),
        );
        row.push(r.full_message().unwrap_or_default());
        let fields: Vec<String> = row.iter().map(|f| csv_field(f)).collect();
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    out
}
