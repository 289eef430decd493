//! Report writers for the benchmark matrix: the JSON-lines record file (appended to as each
//! configuration finishes, so a crash loses at most the configuration that was running), and the
//! CSV, Markdown and PNG views a reader looks at.
//!
//! The PNG is drawn with plotters' bitmap backend and an embedded font (DejaVu Sans, see
//! `assets/DejaVuSans-LICENSE.txt`), so that charts render on a bare GPU machine with no
//! fontconfig or system fonts.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{bail, Context};
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::FontStyle;

use crate::record::{BenchRecord, RecordStatus, LOG_TAIL};
use medddpm_unet::OpClass;

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

// ---------------------------------------------------------------------------------------------
// JSON lines
// ---------------------------------------------------------------------------------------------

/// Reads every record of a JSON-lines file (blank lines are skipped).
///
/// A malformed line is an error naming the file and the 1-based line number, so a hand-edited or
/// truncated results file points at what to fix.
pub fn read_jsonl(path: &Path) -> anyhow::Result<Vec<BenchRecord>> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut records = Vec::new();
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line_no = i + 1;
        let line =
            line.with_context(|| format!("cannot read {}, line {line_no}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let record: BenchRecord = serde_json::from_str(&line).with_context(|| {
            format!(
                "{}, line {line_no}: not a valid benchmark record",
                path.display()
            )
        })?;
        records.push(record);
    }
    Ok(records)
}

/// Appends one record as a single line, creating the file if needed.
///
/// The line goes out in one `write_all` on a file opened for appending and is synced, so each
/// finished configuration survives a later crash of the benchmark. If a previous run died
/// mid-line, a newline is written first so the new record does not merge with the torn one.
/// Non-finite breakdown times are refused: JSON has no NaN (serde_json writes `null`), and the
/// line could then not be read back.
pub fn append_jsonl(path: &Path, record: &BenchRecord) -> anyhow::Result<()> {
    if let Some((class, v)) = record.breakdown_ms.iter().find(|(_, v)| !v.is_finite()) {
        bail!("breakdown time of `{class}` is {v}: not representable in JSON");
    }
    let mut line = serde_json::to_string(record).context("cannot serialise the record")?;
    line.push('\n');
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)
        .with_context(|| format!("cannot open {} for appending", path.display()))?;
    let len = file
        .metadata()
        .with_context(|| format!("cannot stat {}", path.display()))?
        .len();
    if len > 0 {
        let mut last = [0u8; 1];
        file.seek(SeekFrom::End(-1))
            .and_then(|_| file.read_exact(&mut last))
            .with_context(|| format!("cannot read the end of {}", path.display()))?;
        if last[0] != b'\n' {
            line.insert(0, '\n');
        }
    }
    file.write_all(line.as_bytes())
        .and_then(|_| file.sync_data())
        .with_context(|| format!("cannot append to {}", path.display()))
}

// ---------------------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------------------

fn status_name(status: RecordStatus) -> &'static str {
    match status {
        RecordStatus::Ok => "ok",
        RecordStatus::Disagrees => "disagrees",
        RecordStatus::Unsupported => "unsupported",
        RecordStatus::Failed => "failed",
    }
}

fn size_text(size: [usize; 3]) -> String {
    format!("{}x{}x{}", size[0], size[1], size[2])
}

/// The union of breakdown classes over `records`: known classes in [`CLASS_ORDER`], then the
/// others alphabetically (a `BTreeSet` already sorts them).
fn breakdown_classes(records: &[BenchRecord]) -> Vec<String> {
    let all: BTreeSet<&str> = records
        .iter()
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
fn uniform_workload(records: &[BenchRecord]) -> bool {
    records
        .windows(2)
        .all(|w| w[0].model == w[1].model && w[0].size == w[1].size && w[0].batch == w[1].batch)
}

fn config_label(r: &BenchRecord) -> String {
    format!("{}/{}/{}", r.backend, r.precision, r.layout)
}

fn is_reference(r: &BenchRecord) -> bool {
    r.backend == "pytorch"
}

// ---------------------------------------------------------------------------------------------
// CSV
// ---------------------------------------------------------------------------------------------

/// Quotes a CSV field per RFC 4180 when it holds a comma, a quote or a line break.
fn csv_field(s: &str) -> String {
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

/// One CSV row per record, with a header, for spreadsheets and pandas.
///
/// The breakdown gets one `fwd_<class>_ms` column per class present in any record (known
/// classes first, in a fixed order), so files from different runs line up. Empty cells mean
/// "not measured". Lines end in `\n`; fields are quoted per RFC 4180 where needed.
pub fn to_csv(records: &[BenchRecord]) -> String {
    let classes = breakdown_classes(records);
    let mut header: Vec<String> = [
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
        "peak_memory_mib",
        "memory_source",
        "tune_cache_warm",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    header.extend(classes.iter().map(|c| format!("fwd_{c}_ms")));
    header.push("message".to_string());

    let mut out = String::new();
    let fields: Vec<String> = header.iter().map(|h| csv_field(h)).collect();
    out.push_str(&fields.join(","));
    out.push('\n');
    for r in records {
        let mut row = vec![
            r.backend.clone(),
            r.device.clone(),
            r.precision.clone(),
            r.layout.clone(),
            r.model.clone(),
            size_text(r.size),
            r.batch.to_string(),
            status_name(r.status).to_string(),
            csv_f64(r.agreement_rel_l2),
            csv_f64(r.agreement_tolerance),
            csv_f64(r.first_sample_step_s),
            csv_f64(r.first_train_step_s),
            csv_f64(r.train_step_median_ms),
            csv_f64(r.train_issue_median_ms),
            csv_f64(r.sample_step_median_ms),
            csv_f64(r.peak_memory_mib),
            r.memory_source.clone().unwrap_or_default(),
            r.tune_cache_warm.map(|b| b.to_string()).unwrap_or_default(),
        ];
        row.extend(
            classes
                .iter()
                .map(|c| csv_f64(r.breakdown_ms.get(c).copied())),
        );
        row.push(r.message.clone().unwrap_or_default());
        let fields: Vec<String> = row.iter().map(|f| csv_field(f)).collect();
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Markdown
// ---------------------------------------------------------------------------------------------

/// Fixed-point with `min_decimals`, widened to two significant digits below 1 so small CPU
/// timings do not print as `0.0`.
fn fmt_fixed(v: f64, min_decimals: usize) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    let a = v.abs();
    if a >= 1.0 || a == 0.0 {
        return format!("{v:.min_decimals$}");
    }
    let decimals = ((-a.log10().floor()) as usize + 1).max(min_decimals);
    if decimals > 6 {
        format!("{v:.1e}")
    } else {
        format!("{v:.decimals$}")
    }
}

fn fmt_ms(v: f64) -> String {
    fmt_fixed(v, 1)
}

fn fmt_s(v: f64) -> String {
    fmt_fixed(v, 2)
}

fn fmt_mib(v: f64) -> String {
    if v.abs() >= 10.0 {
        format!("{v:.0}")
    } else {
        fmt_fixed(v, 1)
    }
}

/// Shortest scientific form that gives back the value (tolerances are round numbers: `1e-4`).
fn fmt_tolerance(v: f64) -> String {
    for p in 0..4 {
        let s = format!("{v:.p$e}");
        if s.parse::<f64>()
            .is_ok_and(|x| (x - v).abs() <= 1e-9 * v.abs())
        {
            return s;
        }
    }
    format!("{v:.3e}")
}

fn opt(v: Option<f64>, f: fn(f64) -> String) -> String {
    v.map(f).unwrap_or_else(|| DASH.to_string())
}

/// Makes free text safe in a table cell: pipes escaped, line breaks flattened.
fn md_cell(s: &str) -> String {
    s.replace('|', "\\|")
        .replace("\r\n", " ")
        .replace(['\n', '\r'], " ")
}

fn md_row(cells: &[String]) -> String {
    format!("| {} |\n", cells.join(" | "))
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
            md_cell(&r.model),
            size_text(r.size),
            r.batch
        );
    }

    let mut header = vec!["Configuration".to_string()];
    if !uniform {
        header.push("Workload".to_string());
    }
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
    out.push_str(&md_row(&header));
    let mut align = vec!["---".to_string()];
    if !uniform {
        align.push("---".to_string());
    }
    align.extend(["---", "---:", "---:", "---:", "---:", "---:", "---:", "---"].map(String::from));
    out.push_str(&md_row(&align));

    let mut warm_cache = false;
    for r in records {
        let ok = r.timings_verified();
        let mut row = vec![md_cell(&config_label(r))];
        if !uniform {
            row.push(md_cell(&workload(r)));
        }
        row.push(md_cell(&r.device));
        if ok {
            let warm = r.tune_cache_warm == Some(true);
            warm_cache |= warm;
            let first = |v: Option<f64>| {
                let s = opt(v, fmt_s);
                if warm && v.is_some() {
                    s + " †"
                } else {
                    s
                }
            };
            row.push(opt(r.train_step_median_ms, fmt_ms));
            row.push(opt(r.sample_step_median_ms, fmt_ms));
            row.push(first(r.first_sample_step_s));
            row.push(first(r.first_train_step_s));
            row.push(opt(r.peak_memory_mib, fmt_mib));
        } else {
            row.extend(std::iter::repeat_n(DASH.to_string(), 5));
        }
        row.push(match (r.agreement_rel_l2, r.agreement_tolerance) {
            (Some(e), Some(t)) => match &r.agreement_reference {
                Some(against) => format!("{e:.1e} ({}; vs {against})", fmt_tolerance(t)),
                None => format!("{e:.1e} ({})", fmt_tolerance(t)),
            },
            (Some(e), None) => format!("{e:.1e}"),
            (None, Some(t)) => format!("{DASH} ({})", fmt_tolerance(t)),
            (None, None) => DASH.to_string(),
        });
        let (status, message) = if ok && r.status == RecordStatus::Failed {
            // Cut short after a passed probe: say which phases are missing, not the log tail
            // (the JSON lines and CSV keep the whole message).
            let m = r.message.as_deref().unwrap_or("");
            ("partial", m.split(LOG_TAIL).next())
        } else {
            (status_name(r.status), r.message.as_deref())
        };
        row.push(match message {
            Some(m) if !m.trim().is_empty() => md_cell(&format!("{status}: {m}")),
            _ => status.to_string(),
        });
        out.push_str(&md_row(&row));
    }

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
    if !notes.is_empty() {
        out.push('\n');
        for n in notes {
            out.push_str(&n);
            out.push('\n');
        }
    }

    let with_breakdown: Vec<&BenchRecord> = records
        .iter()
        .filter(|r| r.timings_verified() && !r.breakdown_ms.is_empty())
        .collect();
    if with_breakdown.is_empty() {
        return out;
    }
    let owned: Vec<BenchRecord> = with_breakdown.iter().map(|r| (*r).clone()).collect();
    let classes = breakdown_classes(&owned);
    out.push_str(
        "\nForward pass by operation class, ms (% of the classes' sum); each operation is \
         synchronised on its own, so the sum exceeds a plain forward.\n\n",
    );
    let mut header = vec!["Configuration".to_string()];
    if !uniform {
        header.push("Workload".to_string());
    }
    header.extend(classes.iter().cloned());
    header.push("Sum (ms)".to_string());
    out.push_str(&md_row(&header));
    let mut align = vec!["---".to_string()];
    if !uniform {
        align.push("---".to_string());
    }
    align.extend(std::iter::repeat_n("---:".to_string(), classes.len() + 1));
    out.push_str(&md_row(&align));
    for r in with_breakdown {
        let mut row = vec![md_cell(&config_label(r))];
        if !uniform {
            row.push(md_cell(&workload(r)));
        }
        row.extend(share_cells(&r.breakdown_ms, &classes));
        out.push_str(&md_row(&row));
    }
    out.push_str(&train_breakdown_table(records));
    out.push_str(&burn_memory_table(records));
    out
}

/// burn's own memory statistics, for the records that read them.
fn burn_memory_table(records: &[BenchRecord]) -> String {
    use crate::single::{MEMORY_IN_USE, MEMORY_RESERVED};
    let rows: Vec<&BenchRecord> = records
        .iter()
        .filter(|r| !r.burn_memory_mib.is_empty())
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "\nburn's memory pools after the forward pass of the profiled training step, MiB (the \
         live tensors, saved activations among them; and what the pools hold from the device), \
         beside the nvidia-smi peak.\n\n",
    );
    out.push_str(&md_row(&[
        "Configuration".to_string(),
        "in use".to_string(),
        "reserved".to_string(),
        "nvidia-smi peak".to_string(),
    ]));
    out.push_str(&md_row(&[
        "---".to_string(),
        "---:".to_string(),
        "---:".to_string(),
        "---:".to_string(),
    ]));
    for r in rows {
        let get = |k: &str| opt(r.burn_memory_mib.get(k).copied(), fmt_mib);
        out.push_str(&md_row(&[
            md_cell(&config_label(r)),
            get(MEMORY_IN_USE),
            get(MEMORY_RESERVED),
            opt(r.peak_memory_mib, fmt_mib),
        ]));
    }
    out
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
    let rows: Vec<&BenchRecord> = records
        .iter()
        .filter(|r| !r.train_breakdown_ms.is_empty())
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "\nOne training micro-step by phase, ms (% of the sum); the phases, and in the backward \
         pass each convolution gradient, are synchronised on their own.\n\n",
    );
    let mut header = vec!["Configuration".to_string()];
    header.extend(PHASES.iter().map(|p| p.to_string()));
    header.push("Sum (ms)".to_string());
    out.push_str(&md_row(&header));
    let mut align = vec!["---".to_string()];
    align.extend(std::iter::repeat_n("---:".to_string(), PHASES.len() + 1));
    out.push_str(&md_row(&align));
    let phases: Vec<String> = PHASES.iter().map(|p| p.to_string()).collect();
    for r in rows {
        let mut row = vec![md_cell(&config_label(r))];
        row.extend(share_cells(&r.train_breakdown_ms, &phases));
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

// ---------------------------------------------------------------------------------------------
// PNG
// ---------------------------------------------------------------------------------------------

/// DejaVu Sans, subset to Latin, Greek, punctuation and common symbols (about 100 KB).
static FONT: &[u8] = include_bytes!("../assets/DejaVuSans-subset.ttf");
const FAMILY: &str = "sans-serif";

/// Registers the embedded font under the family plotters asks for by default, once per process.
fn ensure_font() -> anyhow::Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED
        .get_or_init(|| plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_ok());
    if ok {
        Ok(())
    } else {
        bail!("the embedded chart font could not be parsed")
    }
}

const WIDTH: u32 = 1200;
const TRAIN_COLOUR: RGBColor = RGBColor(31, 119, 180);
const SAMPLE_COLOUR: RGBColor = RGBColor(255, 127, 14);
const REF_TRAIN_COLOUR: RGBColor = RGBColor(80, 80, 80);
const REF_SAMPLE_COLOUR: RGBColor = RGBColor(170, 170, 170);
const CLASS_COLOURS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// Text style in the embedded font. Keep sizes even: plotters' ab_glyph renderer places each
/// glyph at `size / 2 + top` truncated to an integer, which lifts small glyphs such as `.` by
/// a pixel at odd sizes.
fn font(size: u32) -> TextStyle<'static> {
    TextStyle::from((FAMILY, size).into_font()).color(&BLACK)
}

/// Records the timing chart shows: measured ones, and PyTorch reference rows.
fn plotted(records: &[BenchRecord]) -> Vec<&BenchRecord> {
    records
        .iter()
        .filter(|r| r.timings_verified() || is_reference(r))
        .filter(|r| r.train_step_median_ms.is_some() || r.sample_step_median_ms.is_some())
        .collect()
}

fn chart_label(r: &BenchRecord, uniform: bool) -> String {
    let mut s = config_label(r);
    if is_reference(r) {
        s.push_str(" (ref.)");
    }
    if !uniform {
        s = format!("{s}, {}", workload(r));
    }
    s
}

/// Axis tick text for a millisecond axis of extent `max`.
fn tick(v: f64, max: f64) -> String {
    if max >= 20.0 {
        format!("{v:.0}")
    } else if max >= 2.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

/// A category axis of `n` rows centred on 0, 1, ... n-1, continuous in between so bars can sit
/// at fractional offsets inside a row. (plotters' `with_key_points` would do, but its mesh
/// needs a value formatter that combinator lacks.)
struct RowAxis(usize);

impl Ranged for RowAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let t = (value + 0.5) / self.0 as f64;
        limit.0 + (t * (limit.1 - limit.0) as f64).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            (0..self.0).map(|i| i as f64).collect()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        -0.5..self.0 as f64 - 0.5
    }
}

/// A one-line legend of colour swatches, drawn in its own strip so it never hides a bar.
fn draw_legend(area: &Area, entries: &[(String, RGBColor)], x0: i32) -> anyhow::Result<()> {
    let style = font(16).pos(Pos::new(HPos::Left, VPos::Center));
    let (_, h) = area.dim_in_pixel();
    let y = h as i32 / 2;
    let mut x = x0;
    for (label, colour) in entries {
        area.draw(&Rectangle::new(
            [(x, y - 7), (x + 14, y + 7)],
            colour.filled(),
        ))?;
        area.draw(&Text::new(label.clone(), (x + 20, y), style.clone()))?;
        let (w, _) = area.estimate_text_size(label, &style)?;
        x += 20 + w as i32 + 28;
    }
    Ok(())
}

fn label_width(area: &Area, labels: &[String], style: &TextStyle) -> anyhow::Result<u32> {
    let mut max = 0;
    for l in labels {
        max = max.max(area.estimate_text_size(l, style)?.0);
    }
    Ok(max)
}

const TIMING_ROW: u32 = 56;
const BREAKDOWN_ROW: u32 = 34;
/// Caption, legend strip and x axis around a panel's rows.
const PANEL_EXTRA: u32 = 150;

/// Grouped horizontal bars: per configuration, the training micro-step above the sampling step.
fn draw_timings(area: &Area, rows: &[&BenchRecord], uniform: bool) -> anyhow::Result<()> {
    let (caption_area, rest) = area.split_vertically(36);
    caption_area.draw(&Text::new(
        "Median step time (lower is better)",
        (12, 18),
        font(20).pos(Pos::new(HPos::Left, VPos::Center)),
    ))?;
    if rows.is_empty() {
        rest.draw(&Text::new(
            "No configuration was measured (all failed, unsupported or disagreeing).",
            (12, 30),
            font(16).pos(Pos::new(HPos::Left, VPos::Center)),
        ))?;
        return Ok(());
    }
    let (legend_area, chart_area) = rest.split_vertically(30);
    let labels: Vec<String> = rows.iter().map(|r| chart_label(r, uniform)).collect();
    let label_style = font(16);
    let label_w = label_width(area, &labels, &label_style)?;

    let any_ref = rows.iter().any(|r| is_reference(r));
    let any_burn = rows.iter().any(|r| !is_reference(r));
    let mut legend = Vec::new();
    if any_burn {
        legend.push(("training micro-step".to_string(), TRAIN_COLOUR));
        legend.push(("sampling step".to_string(), SAMPLE_COLOUR));
    }
    if any_ref {
        legend.push((
            "training micro-step (PyTorch ref.)".to_string(),
            REF_TRAIN_COLOUR,
        ));
        legend.push((
            "sampling step (PyTorch ref.)".to_string(),
            REF_SAMPLE_COLOUR,
        ));
    }
    draw_legend(&legend_area, &legend, label_w as i32 + 30)?;

    let max = rows
        .iter()
        .flat_map(|r| [r.train_step_median_ms, r.sample_step_median_ms])
        .flatten()
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    let x_max = if max > 0.0 { max * 1.18 } else { 1.0 };
    let n = rows.len();
    // Row i (top to bottom) is centred on y = n - 1 - i; integer key points carry the labels.
    let y_of = |i: usize| (n - 1 - i) as f64;
    let y_label = |y: &f64| -> String {
        let k = y.round();
        if (0.0..n as f64).contains(&k) {
            labels[n - 1 - k as usize].clone()
        } else {
            String::new()
        }
    };
    let x_tick = |v: &f64| tick(*v, x_max);
    let mut chart = ChartBuilder::on(&chart_area)
        .margin_left(10)
        .margin_right(30)
        .margin_top(5)
        .x_label_area_size(50)
        .y_label_area_size(label_w + 15)
        .build_cartesian_2d(0.0..x_max, RowAxis(n))?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_label_formatter(&y_label)
        .x_label_formatter(&x_tick)
        .label_style(label_style.clone())
        .axis_desc_style(font(16))
        .x_desc("milliseconds (median of synchronised steps)")
        .draw()?;

    let value_style = font(14).pos(Pos::new(HPos::Left, VPos::Center));
    for (i, r) in rows.iter().enumerate() {
        let y = y_of(i);
        let (train_c, sample_c) = if is_reference(r) {
            (REF_TRAIN_COLOUR, REF_SAMPLE_COLOUR)
        } else {
            (TRAIN_COLOUR, SAMPLE_COLOUR)
        };
        let bars = [
            (r.train_step_median_ms, train_c, y + 0.03, y + 0.4),
            (r.sample_step_median_ms, sample_c, y - 0.4, y - 0.03),
        ];
        for (v, colour, y0, y1) in bars {
            let Some(v) = v.filter(|v| v.is_finite()) else {
                continue;
            };
            chart.draw_series(std::iter::once(Rectangle::new(
                [(0.0, y0), (v, y1)],
                colour.filled(),
            )))?;
            chart.draw_series(std::iter::once(Text::new(
                format!(" {}", fmt_ms(v)),
                (v, 0.5 * (y0 + y1)),
                value_style.clone(),
            )))?;
        }
    }
    Ok(())
}

/// Stacked horizontal bars of the forward pass split by operation class.
fn draw_breakdown(area: &Area, rows: &[&BenchRecord], uniform: bool) -> anyhow::Result<()> {
    let (caption_area, rest) = area.split_vertically(36);
    caption_area.draw(&Text::new(
        "Forward pass by operation class (each operation synchronised)",
        (12, 18),
        font(20).pos(Pos::new(HPos::Left, VPos::Center)),
    ))?;
    let (legend_area, chart_area) = rest.split_vertically(30);
    let owned: Vec<BenchRecord> = rows.iter().map(|r| (*r).clone()).collect();
    let classes = breakdown_classes(&owned);
    let colour = |i: usize| CLASS_COLOURS[i % CLASS_COLOURS.len()];
    let labels: Vec<String> = rows.iter().map(|r| chart_label(r, uniform)).collect();
    let label_style = font(16);
    let label_w = label_width(area, &labels, &label_style)?;
    let legend: Vec<(String, RGBColor)> = classes
        .iter()
        .enumerate()
        .map(|(i, c)| (c.clone(), colour(i)))
        .collect();
    draw_legend(&legend_area, &legend, label_w as i32 + 30)?;

    let sums: Vec<f64> = rows
        .iter()
        .map(|r| r.breakdown_ms.values().filter(|v| v.is_finite()).sum())
        .collect();
    let max = sums.iter().copied().fold(0.0f64, f64::max);
    let x_max = if max > 0.0 { max * 1.15 } else { 1.0 };
    let n = rows.len();
    let y_of = |i: usize| (n - 1 - i) as f64;
    let y_label = |y: &f64| -> String {
        let k = y.round();
        if (0.0..n as f64).contains(&k) {
            labels[n - 1 - k as usize].clone()
        } else {
            String::new()
        }
    };
    let x_tick = |v: &f64| tick(*v, x_max);
    let mut chart = ChartBuilder::on(&chart_area)
        .margin_left(10)
        .margin_right(30)
        .margin_top(5)
        .x_label_area_size(50)
        .y_label_area_size(label_w + 15)
        .build_cartesian_2d(0.0..x_max, RowAxis(n))?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_label_formatter(&y_label)
        .x_label_formatter(&x_tick)
        .label_style(label_style.clone())
        .axis_desc_style(font(16))
        .x_desc("milliseconds per forward pass")
        .draw()?;

    let value_style = font(14).pos(Pos::new(HPos::Left, VPos::Center));
    for (i, r) in rows.iter().enumerate() {
        let y = y_of(i);
        let mut x = 0.0;
        for (k, c) in classes.iter().enumerate() {
            let Some(&v) = r.breakdown_ms.get(c).filter(|v| v.is_finite()) else {
                continue;
            };
            chart.draw_series(std::iter::once(Rectangle::new(
                [(x, y - 0.35), (x + v, y + 0.35)],
                colour(k).filled(),
            )))?;
            x += v;
        }
        chart.draw_series(std::iter::once(Text::new(
            format!(" {} ms", fmt_ms(sums[i])),
            (x, y),
            value_style.clone(),
        )))?;
    }
    Ok(())
}

/// Draws the benchmark chart as a PNG: grouped bars of the median training micro-step and
/// sampling step per configuration (Ok rows, plus PyTorch reference rows in grey), and, when
/// an Ok row has a forward breakdown, a second panel of stacked bars by operation class.
///
/// Needs no system fonts (the font is embedded). The file is written to a temporary name beside
/// `path` and renamed, so a reader never sees a half-written image.
pub fn write_png_chart(records: &[BenchRecord], path: &Path, title: &str) -> anyhow::Result<()> {
    ensure_font()?;
    let rows = plotted(records);
    let breakdown_rows: Vec<&BenchRecord> = records
        .iter()
        .filter(|r| r.timings_verified() && !r.breakdown_ms.is_empty())
        .collect();
    // Labels only need to tell apart the rows drawn, not the failed ones.
    let drawn: Vec<BenchRecord> = records
        .iter()
        .filter(|r| r.timings_verified() || is_reference(r))
        .cloned()
        .collect();
    let uniform = uniform_workload(&drawn);

    let title_h = 50;
    let timing_h = if rows.is_empty() {
        90
    } else {
        PANEL_EXTRA + TIMING_ROW * rows.len() as u32
    };
    let breakdown_h = if breakdown_rows.is_empty() {
        0
    } else {
        PANEL_EXTRA + BREAKDOWN_ROW * breakdown_rows.len() as u32
    };
    let height = title_h + timing_h + breakdown_h;
    let mut pixels = vec![255u8; WIDTH as usize * height as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let (title_area, body) = root.split_vertically(title_h);
        title_area.draw(&Text::new(
            title.to_string(),
            (WIDTH as i32 / 2, title_h as i32 / 2),
            font(24).pos(Pos::new(HPos::Center, VPos::Center)),
        ))?;
        let (timing_area, breakdown_area) = body.split_vertically(timing_h);
        draw_timings(&timing_area, &rows, uniform)?;
        if !breakdown_rows.is_empty() {
            draw_breakdown(&breakdown_area, &breakdown_rows, uniform)?;
        }
        root.present()?;
    }

    let mut png_bytes = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut png_bytes, WIDTH, height);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().context("cannot encode the PNG")?;
        writer
            .write_image_data(&pixels)
            .context("cannot encode the PNG")?;
        writer.finish().context("cannot encode the PNG")?;
    }
    write_atomically(path, &png_bytes)
}

/// Writes `bytes` to a temporary file beside `path`, syncs it, then renames it over `path`.
fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let name = path
        .file_name()
        .with_context(|| format!("{} names no file", path.display()))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp: PathBuf = path.with_file_name(tmp_name);
    let result = (|| {
        let mut f =
            File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
        f.write_all(bytes)
            .and_then(|_| f.sync_all())
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, path)
            .with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn breakdown_sums(records: &[BenchRecord]) -> BTreeMap<String, f64> {
        records
            .iter()
            .map(|r| (config_label(r), r.breakdown_ms.values().sum()))
            .collect()
    }

    /// A scratch directory under the system temp dir, removed on drop (no tempfile dependency).
    struct TestDir(PathBuf);

    impl TestDir {
        fn new(name: &str) -> Self {
            let dir = std::env::temp_dir().join(format!(
                "medddpm-bench-report-{}-{name}",
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            TestDir(dir)
        }
    }

    impl Drop for TestDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn record(backend: &str, precision: &str, status: RecordStatus) -> BenchRecord {
        let ok = status == RecordStatus::Ok;
        BenchRecord {
            backend: backend.to_string(),
            device: "NVIDIA H100 80GB HBM3".to_string(),
            precision: precision.to_string(),
            layout: "ncdhw".to_string(),
            model: "whole-head".to_string(),
            size: [64, 128, 128],
            batch: 1,
            status,
            message: None,
            agreement_rel_l2: Some(3.2e-6),
            agreement_tolerance: Some(1e-4),
            first_sample_step_s: ok.then_some(12.5),
            first_train_step_s: ok.then_some(40.25),
            train_step_median_ms: ok.then_some(812.3),
            train_issue_median_ms: ok.then_some(640.0),
            sample_step_median_ms: ok.then_some(201.7),
            peak_memory_mib: ok.then_some(30512.0),
            memory_source: ok.then(|| "nvidia-smi used_memory".to_string()),
            breakdown_ms: BTreeMap::new(),
            train_breakdown_ms: BTreeMap::new(),
            train_optimizer_issue_ms: None,
            train_threads_ms: BTreeMap::new(),
            agreement_reference: None,
            tune_cache_warm: ok.then_some(false),
            burn_memory_mib: BTreeMap::new(),
        }
    }

    fn matrix() -> Vec<BenchRecord> {
        let mut cuda = record("cuda", "bf16", RecordStatus::Ok);
        cuda.breakdown_ms = BTreeMap::from([
            ("upsample".to_string(), 5.0),
            ("convolution".to_string(), 120.0),
            ("zeta_misc".to_string(), 1.5),
            ("attention".to_string(), 30.0),
            ("elementwise".to_string(), 20.0),
            ("normalisation".to_string(), 25.0),
        ]);
        cuda.burn_memory_mib = BTreeMap::from([
            (crate::single::MEMORY_IN_USE.to_string(), 12000.0),
            (crate::single::MEMORY_RESERVED.to_string(), 20480.0),
        ]);
        let mut wgpu = record("wgpu", "fp32", RecordStatus::Ok);
        wgpu.train_step_median_ms = Some(1500.0);
        wgpu.sample_step_median_ms = Some(400.0);
        wgpu.breakdown_ms = BTreeMap::from([
            ("convolution".to_string(), 250.0),
            ("alpha_misc".to_string(), 3.0),
        ]);
        let mut failed = record("cuda", "tf32", RecordStatus::Failed);
        failed.message = Some("out of memory, \"CUDA_ERROR\"\nat step 2".to_string());
        failed.agreement_rel_l2 = None;
        let mut disagrees = record("wgpu", "bf16", RecordStatus::Disagrees);
        disagrees.agreement_rel_l2 = Some(0.031);
        disagrees.agreement_tolerance = Some(5e-3);
        disagrees.message = Some("rel. L2 | above tolerance".to_string());
        let mut torch = record("pytorch", "fp32", RecordStatus::Ok);
        torch.train_step_median_ms = Some(700.0);
        torch.sample_step_median_ms = Some(180.0);
        torch.message = Some("quoted from the reference run".to_string());
        vec![cuda, wgpu, failed, disagrees, torch]
    }

    /// Splits CSV text into records of fields, honouring RFC 4180 quoting (the test's oracle).
    fn parse_csv(text: &str) -> Vec<Vec<String>> {
        let mut rows = Vec::new();
        let mut row = Vec::new();
        let mut field = String::new();
        let mut quoted = false;
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match (quoted, c) {
                (true, '"') if chars.peek() == Some(&'"') => {
                    field.push('"');
                    chars.next();
                }
                (true, '"') => quoted = false,
                (true, c) => field.push(c),
                (false, '"') => quoted = true,
                (false, ',') => row.push(std::mem::take(&mut field)),
                (false, '\n') => {
                    row.push(std::mem::take(&mut field));
                    rows.push(std::mem::take(&mut row));
                }
                (false, c) => field.push(c),
            }
        }
        assert!(
            field.is_empty() && row.is_empty(),
            "CSV must end in a newline"
        );
        rows
    }

    #[test]
    fn csv_has_the_columns_and_quotes_fields() {
        let records = matrix();
        let csv = to_csv(&records);
        let rows = parse_csv(&csv);
        assert_eq!(rows.len(), records.len() + 1);
        let header = &rows[0];
        let expected: Vec<&str> = vec![
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
            "peak_memory_mib",
            "memory_source",
            "tune_cache_warm",
            "fwd_convolution_ms",
            "fwd_normalisation_ms",
            "fwd_attention_ms",
            "fwd_elementwise_ms",
            "fwd_upsample_ms",
            "fwd_alpha_misc_ms",
            "fwd_zeta_misc_ms",
            "message",
        ];
        assert_eq!(header, &expected);
        assert!(rows.iter().all(|r| r.len() == expected.len()));
        let col = |name: &str| expected.iter().position(|c| *c == name).unwrap();

        let cuda = &rows[1];
        assert_eq!(cuda[col("size")], "64x128x128");
        assert_eq!(cuda[col("status")], "ok");
        assert_eq!(cuda[col("agreement_rel_l2")], "3.2e-6");
        assert_eq!(cuda[col("train_step_median_ms")], "812.3");
        assert_eq!(cuda[col("tune_cache_warm")], "false");
        assert_eq!(cuda[col("fwd_zeta_misc_ms")], "1.5");
        assert_eq!(cuda[col("fwd_alpha_misc_ms")], "");
        assert_eq!(cuda[col("message")], "");

        let failed = &rows[3];
        assert_eq!(failed[col("status")], "failed");
        assert_eq!(failed[col("train_step_median_ms")], "");
        assert_eq!(failed[col("tune_cache_warm")], "");
        assert_eq!(
            failed[col("message")],
            "out of memory, \"CUDA_ERROR\"\nat step 2"
        );
        // The raw text quotes exactly the fields that need it.
        assert!(csv.contains("\"out of memory, \"\"CUDA_ERROR\"\"\nat step 2\""));
        assert!(csv.contains(",NVIDIA H100 80GB HBM3,"));
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }

    #[test]
    fn a_run_cut_short_after_its_probe_passed_keeps_its_timings() {
        let mut partial = record("cuda", "fp32", RecordStatus::Failed);
        partial.sample_step_median_ms = Some(2714.0);
        partial.first_sample_step_s = Some(54.6);
        partial.breakdown_ms = BTreeMap::from([("convolution".to_string(), 2657.4)]);
        partial.message = Some(
            "timed out after 265 s (incomplete: the last phase finished was the agreement probe); \
             last output: [tune] 101 tuned"
                .to_string(),
        );
        let mut unprobed = partial.clone();
        unprobed.backend = "wgpu".to_string();
        unprobed.agreement_rel_l2 = None;
        let mut wrong = partial.clone();
        wrong.backend = "other".to_string();
        wrong.agreement_rel_l2 = Some(1.0);
        assert!(partial.timings_verified());
        assert!(!unprobed.timings_verified());
        assert!(!wrong.timings_verified());

        let md = to_markdown(&[partial.clone(), unprobed, wrong]);
        let row = md.lines().find(|l| l.starts_with("| cuda/fp32")).unwrap();
        assert!(row.contains("| 2714.0 | 54.60 |"), "{row}");
        assert!(row.contains("partial: timed out after 265 s"), "{row}");
        assert!(!row.contains("last output"), "{row}");
        let row = md.lines().find(|l| l.starts_with("| wgpu/fp32")).unwrap();
        assert!(
            !row.contains("2714.0") && row.contains("failed: timed out"),
            "{row}"
        );
        let row = md.lines().find(|l| l.starts_with("| other/fp32")).unwrap();
        assert!(!row.contains("2714.0"), "{row}");
        // The breakdown table has the verified partial row only.
        assert_eq!(md.matches("| cuda/fp32/ncdhw |").count(), 2, "{md}");
        assert_eq!(md.matches("| wgpu/fp32/ncdhw |").count(), 1, "{md}");
        assert_eq!(md.matches("| other/fp32/ncdhw |").count(), 1, "{md}");
        assert_eq!(plotted(&[partial]).len(), 1);
    }

    #[test]
    fn csv_without_breakdown_has_no_breakdown_columns() {
        let csv = to_csv(&[record("cuda", "fp32", RecordStatus::Ok)]);
        assert!(!csv.contains("fwd_"));
        assert_eq!(csv.lines().count(), 2);
    }

    #[test]
    fn markdown_has_rows_dashes_and_breakdown() {
        let md = to_markdown(&matrix());
        assert!(md.contains("Model `whole-head`, volume 64x128x128"));
        let line = |prefix: &str| {
            md.lines()
                .find(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("no row {prefix} in\n{md}"))
                .to_string()
        };
        let cuda = line("| cuda/bf16/ncdhw |");
        assert!(cuda.contains("| 812.3 | 201.7 | 12.50 | 40.25 | 30512 |"));
        assert!(cuda.contains("3.2e-6 (1e-4)"));
        let failed = line("| cuda/tf32/ncdhw |");
        // Five timing cells and the agreement it never measured.
        assert_eq!(failed.matches(DASH).count(), 6, "{failed}");
        assert!(failed.contains("failed: out of memory, \"CUDA_ERROR\" at step 2"));
        let disagrees = line("| wgpu/bf16/ncdhw |");
        assert!(disagrees.contains("3.1e-2 (5e-3)"));
        assert!(disagrees.contains("disagrees: rel. L2 \\| above tolerance"));
        assert!(md.contains("| pytorch/fp32/ncdhw |"));
        assert!(md.contains("Peak memory: nvidia-smi used_memory."));
        // Every table row of the first table has the same number of cells.
        let first_table: Vec<&str> = md
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .collect();
        assert_eq!(first_table.len(), 2 + 5);
        assert!(first_table
            .iter()
            .all(|l| l.matches(" | ").count() == first_table[0].matches(" | ").count()));

        // Breakdown table: Ok rows with a breakdown only, known classes first.
        let header = line("| Configuration | convolution |");
        assert!(header.contains(
            "| convolution | normalisation | attention | elementwise | upsample | alpha_misc | zeta_misc | Sum (ms) |"
        ));
        let sums = breakdown_sums(&matrix());
        assert_eq!(sums["cuda/bf16/ncdhw"], 201.5);
        let rows: Vec<&str> = md
            .lines()
            .skip_while(|l| !l.starts_with("| Configuration | convolution"))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .collect();
        assert_eq!(rows.len(), 2, "{md}");
        assert!(rows[0].starts_with("| cuda/bf16/ncdhw | 120.0 (59.6%) |"));
        assert!(rows[0].ends_with("| 201.5 |"));
        assert!(rows[1].contains(DASH));

        // burn's memory statistics beside the nvidia-smi peak, for the record that read them.
        assert!(
            md.contains("| cuda/bf16/ncdhw | 12000 | 20480 | 30512 |"),
            "{md}"
        );
        assert!(!md.contains("| wgpu/fp32/ncdhw | 1"), "{md}");
    }

    #[test]
    fn markdown_names_the_workload_per_row_when_it_varies() {
        let mut records = matrix();
        records[1].size = [32, 64, 64];
        let md = to_markdown(&records);
        assert!(md.contains("| Configuration | Workload | Device |"));
        assert!(md.contains("whole-head 32x64x64 batch 1"));
        assert_eq!(to_markdown(&[]), "_No benchmark records._\n");
    }

    #[test]
    fn number_formats() {
        assert_eq!(fmt_ms(812.34), "812.3");
        assert_eq!(fmt_ms(0.01234), "0.012");
        assert_eq!(fmt_ms(0.0), "0.0");
        assert_eq!(fmt_mib(812.6), "813");
        assert_eq!(fmt_s(0.5), "0.50");
        assert_eq!(fmt_tolerance(1e-4), "1e-4");
        assert_eq!(fmt_tolerance(2.5e-2), "2.5e-2");
        assert_eq!(format!("{:.1e}", 3.2e-6), "3.2e-6");
    }

    fn assert_png(path: &Path) {
        let bytes = std::fs::read(path).unwrap();
        assert!(bytes.len() > 1000, "{} bytes", bytes.len());
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        // The encoder's output decodes, and the chart is not blank.
        let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!(info.width, WIDTH);
        let data = &buf[..info.buffer_size()];
        let dark = data
            .chunks(3)
            .filter(|p| p.iter().all(|&c| c < 100))
            .count();
        assert!(dark > 500, "only {dark} dark pixels: no text drawn?");
    }

    #[test]
    fn png_is_written_atomically_and_valid() {
        let dir = TestDir::new("png");
        let path = dir.0.join("chart.png");
        write_png_chart(&matrix(), &path, "Med-DDPM U-Net: whole-head, 64x128x128").unwrap();
        assert_png(&path);
        let leftovers: Vec<_> = std::fs::read_dir(&dir.0)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers, vec![std::ffi::OsString::from("chart.png")]);

        // Nothing measured: still a valid image saying so; overwriting works.
        let failed = vec![record("cuda", "fp32", RecordStatus::Failed)];
        write_png_chart(&failed, &path, "all failed").unwrap();
        assert_png(&path);
    }

    #[test]
    fn jsonl_round_trip_and_bad_line_names_the_line() {
        let dir = TestDir::new("jsonl");
        let path = dir.0.join("results.jsonl");
        let records = matrix();
        for r in &records {
            append_jsonl(&path, r).unwrap();
        }
        let back = read_jsonl(&path).unwrap();
        assert_eq!(back.len(), records.len());
        for (a, b) in records.iter().zip(&back) {
            assert_eq!(
                serde_json::to_string(a).unwrap(),
                serde_json::to_string(b).unwrap()
            );
        }
        assert_eq!(back[2].message, records[2].message);

        // A torn last line (a crash mid-write) is not merged with the next record...
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("{\"backend\":");
        std::fs::write(&path, &text).unwrap();
        append_jsonl(&path, &records[0]).unwrap();
        // ...but it is reported, with its line number.
        let err = read_jsonl(&path).unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("results.jsonl, line 6"), "{msg}");

        // Blank lines are fine.
        std::fs::write(&path, "\n").unwrap();
        append_jsonl(&path, &records[1]).unwrap();
        assert_eq!(read_jsonl(&path).unwrap().len(), 1);

        let mut nan = records[0].clone();
        nan.breakdown_ms.insert("attention".to_string(), f64::NAN);
        assert!(append_jsonl(&path, &nan).is_err());
        assert!(read_jsonl(&dir.0.join("missing.jsonl")).is_err());
    }
}
