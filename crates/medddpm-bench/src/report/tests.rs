use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use medddpm_backend::BackendKind;
use medddpm_unet::Layout;

use super::cells::{fmt_mib, fmt_ms, fmt_s, fmt_tolerance};
use super::chart::{plotted, WIDTH};
use super::csv::csv_field;
use super::*;
use crate::options::Model;
use crate::record::{RecordBackend, RecordStatus, Source};

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

/// A record of `backend` (a label: `cuda`, `pytorch`) in `precision`.
fn record(backend: &str, precision: &str, status: RecordStatus) -> BenchRecord {
    let ok = status == RecordStatus::Ok;
    BenchRecord {
        backend: backend.parse().unwrap(),
        device: "NVIDIA H100 80GB HBM3".to_string(),
        precision: precision.parse().unwrap(),
        layout: Layout::Ncdhw,
        model: Model::WholeHead,
        size: [64, 128, 128],
        batch: 1,
        activation_checkpointing: Default::default(),
        status,
        message: None,
        log_tail: None,
        source: Source::Measured,
        agreement_rel_l2: Some(3.2e-6),
        agreement_tolerance: Some(1e-4),
        first_sample_step_s: ok.then_some(12.5),
        first_train_step_s: ok.then_some(40.25),
        train_step_median_ms: ok.then_some(812.3),
        train_issue_median_ms: ok.then_some(640.0),
        sample_step_median_ms: ok.then_some(201.7),
        train_back_to_back_ms: ok.then_some(630.0),
        sample_back_to_back_ms: ok.then_some(200.9),
        peak_memory_mib: ok.then_some(30512.0),
        memory_source: ok.then(|| "nvidia-smi used_memory".to_string()),
        breakdown_ms: BTreeMap::new(),
        train_breakdown_ms: BTreeMap::new(),
        train_optimizer_issue_ms: None,
        train_threads_ms: BTreeMap::new(),
        agreement_reference: None,
        tune_cache_warm: ok.then_some(false),
        burn_memory_mib: BTreeMap::new(),
        train_gpu: None,
        sample_gpu: None,
        sample_graph: None,
        train_graph: None,
    }
}

/// What a CUPTI trace of `wall_ms` steps reports.
fn gpu_time(wall_ms: f64, busy_ms: f64) -> crate::gpu_trace::GpuTime {
    crate::gpu_trace::GpuTime {
        steps: 3,
        wall_ms,
        busy_ms,
        kernel_ms: busy_ms + 1.0,
        launches: 1236.0,
        by_class_ms: BTreeMap::from([
            ("convolution".to_string(), 35.8),
            ("normalisation".to_string(), 15.1),
        ]),
        top: vec![crate::gpu_trace::KernelTime {
            name: "sm90_xmma_fprop".to_string(),
            calls: 18.0,
            ms: 10.8,
        }],
        idle: None,
        host: None,
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
    cuda.train_gpu = Some(gpu_time(104.3, 82.1));
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
    torch.source = Source::Quoted {
        from: "the reference run".to_string(),
    };
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
    // The fixed columns, then the breakdown's (known classes in their order, the others by name),
    // then the message.
    let expected: Vec<&str> = concat!(
        "backend,device,precision,layout,model,size,batch,status,",
        "agreement_rel_l2,agreement_tolerance,first_sample_step_s,first_train_step_s,",
        "train_step_median_ms,train_issue_median_ms,sample_step_median_ms,",
        "train_back_to_back_ms,sample_back_to_back_ms,peak_memory_mib,memory_source,",
        "tune_cache_warm,fwd_convolution_ms,fwd_normalisation_ms,fwd_attention_ms,",
        "fwd_elementwise_ms,fwd_upsample_ms,fwd_alpha_misc_ms,fwd_zeta_misc_ms,message",
    )
    .split(',')
    .collect();
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
        "timed out after 265 s (incomplete: the last phase finished was the agreement probe)"
            .to_string(),
    );
    partial.log_tail = Some(vec!["[tune] 101 tuned".to_string()]);
    let mut unprobed = partial.clone();
    unprobed.backend = RecordBackend::burn(BackendKind::Wgpu);
    unprobed.agreement_rel_l2 = None;
    let mut wrong = partial.clone();
    wrong.backend = RecordBackend::burn(BackendKind::Cpu);
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
    let row = md.lines().find(|l| l.starts_with("| cpu/fp32")).unwrap();
    assert!(!row.contains("2714.0"), "{row}");
    // The breakdown table has the verified partial row only.
    assert_eq!(md.matches("| cuda/fp32/ncdhw |").count(), 2, "{md}");
    assert_eq!(md.matches("| wgpu/fp32/ncdhw |").count(), 1, "{md}");
    assert_eq!(md.matches("| cpu/fp32/ncdhw |").count(), 1, "{md}");
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

#[test]
fn markdown_has_the_gpu_time_beside_the_median_step() {
    let md = to_markdown(&matrix());
    assert!(md.contains("The GPU's time per step"), "{md}");
    let row = md
        .lines()
        .find(|l| l.contains("training micro-step") && l.contains("82.1"))
        .expect("a row for the traced training step");
    // The busy share is of the untraced median step (812.3 ms), not of the traced one.
    assert!(row.contains("812.3"), "{row}");
    assert!(row.contains("10%"), "{row}");
    assert!(row.contains("35.8") && row.contains("1236"), "{row}");
    // Records without a trace add no table.
    let plain = vec![record("cuda", "tf32", RecordStatus::Ok)];
    assert!(!to_markdown(&plain).contains("The GPU's time per step"));
}
