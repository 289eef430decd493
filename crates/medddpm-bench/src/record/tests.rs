use std::path::{Path, PathBuf};

use super::*;

/// The results files of `docs/benchmarks`: every benchmark record line, with its file.
fn recorded_lines() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path
                .extension()
                .is_some_and(|e| e == "jsonl" || e == "json")
            {
                out.push(path);
            }
        }
    }
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/benchmarks");
    let mut files = Vec::new();
    walk(&docs, &mut files);
    files.sort();
    let mut lines = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        // A pretty-printed record (a child's `cell-*.json`) is one record.
        let values: Vec<String> = if file.extension().is_some_and(|e| e == "json") {
            vec![text]
        } else {
            text.lines().map(str::to_string).collect()
        };
        for v in values {
            let Ok(serde_json::Value::Object(map)) = serde_json::from_str(&v) else {
                continue;
            };
            if map.contains_key("backend") && map.contains_key("breakdown_ms") {
                lines.push((file.clone(), v));
            }
        }
    }
    lines
}

/// JSON values equal, an absent field of an object counting as the same as an empty one
/// (null, "", {} or []): a record's optional parts written by builds before and after a field
/// was added, or before it was left out when empty.
fn same(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value;
    let empty = |v: &Value| match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    };
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            x.keys()
                .chain(y.keys())
                .all(|k| match (x.get(k), y.get(k)) {
                    (Some(a), Some(b)) => same(a, b),
                    (Some(v), None) | (None, Some(v)) => empty(v),
                    (None, None) => true,
                })
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        _ => a == b,
    }
}

#[test]
fn every_record_in_docs_benchmarks_reads_and_writes_back_the_same() {
    let lines = recorded_lines();
    assert!(lines.len() > 50, "{} records found", lines.len());
    let mut complete = 0;
    for (file, line) in &lines {
        let record: BenchRecord = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("{}: {e}\n{line}", file.display()));
        let original: serde_json::Value = serde_json::from_str(line).unwrap();
        let written: serde_json::Value = serde_json::to_value(&record).unwrap();
        // Every field the file has comes back unchanged (older files lack the newer fields).
        for (key, value) in original.as_object().unwrap() {
            assert!(
                same(&written[key], value),
                "{}: {key}\n{}\n{value}",
                file.display(),
                written[key]
            );
        }
        // A line of the current form (every field, nested ones too) comes back byte for byte.
        let current = written == original;
        if current && !line.contains('\n') {
            assert_eq!(serde_json::to_string(&record).unwrap(), line.trim_end());
            complete += 1;
        }
    }
    assert!(complete > 0, "{complete} records of the current form");
}

#[test]
fn log_tails_split_from_the_message_and_join_back() {
    let line = lines_with_tail();
    let record: BenchRecord = serde_json::from_str(&line).unwrap();
    assert_eq!(
        record.message.as_deref(),
        Some("timed out after 600 s (incomplete)")
    );
    assert_eq!(
        record.log_tail,
        Some(vec![
            "[tune] 3 tuned".to_string(),
            "building the model".to_string()
        ])
    );
    assert_eq!(serde_json::to_string(&record).unwrap(), line);
    // A run that printed nothing still says so.
    let mut quiet = record.clone();
    quiet.log_tail = Some(Vec::new());
    let text = serde_json::to_string(&quiet).unwrap();
    assert!(text.contains("\"timed out after 600 s (incomplete); last output: \""));
    let back: BenchRecord = serde_json::from_str(&text).unwrap();
    assert_eq!(back, quiet);
}

fn lines_with_tail() -> String {
    let mut r = BenchRecord::new(
        RecordBackend::Burn {
            backend: BackendKind::Cuda,
            conv: ConvEngine::Cudnn,
            norm_ops: true,
        },
        Precision::Bf16,
        Layout::Ndhwc,
        Workload {
            model: Model::Tiny,
            size: [8, 16, 32],
            batch: 2,
            activation_checkpointing: Default::default(),
        },
        RecordStatus::Failed,
    );
    r.message = Some("timed out after 600 s (incomplete)".to_string());
    r.log_tail = Some(vec![
        "[tune] 3 tuned".to_string(),
        "building the model".to_string(),
    ]);
    let text = serde_json::to_string(&r).unwrap();
    assert!(text.starts_with(
        "{\"backend\":\"cuda+cudnn+normops\",\"device\":\"\",\"precision\":\"bf16\",\"layout\":\"ndhwc\",\"model\":\"tiny\",\"size\":[8,16,32],\"batch\":2,\"status\":\"failed\",\"message\":\"timed out after 600 s (incomplete); last output: [tune] 3 tuned | building the model\""
    ), "{text}");
    assert!(!text.contains("\"source\""), "{text}");
    text
}

#[test]
fn quoted_rows_keep_their_source_and_cudnn_benchmark() {
    let mut r = BenchRecord::new(
        RecordBackend::PyTorch {
            cudnn_benchmark: true,
        },
        Precision::Tf32,
        Layout::Ncdhw,
        Workload {
            model: Model::WholeHead,
            size: [128; 3],
            batch: 1,
            activation_checkpointing: Default::default(),
        },
        RecordStatus::Ok,
    );
    r.source = Source::Quoted {
        from: "peer-baseline.md".to_string(),
    };
    assert_eq!(r.layout_label(), "ncdhw+cudnn.benchmark");
    let text = serde_json::to_string(&r).unwrap();
    assert!(text.contains("\"backend\":\"pytorch\""), "{text}");
    assert!(
        text.contains("\"layout\":\"ncdhw+cudnn.benchmark\""),
        "{text}"
    );
    let back: BenchRecord = serde_json::from_str(&text).unwrap();
    assert_eq!(back, r);
    // `+cudnn.benchmark` belongs to PyTorch rows only.
    let bad = text.replace("\"pytorch\"", "\"cuda\"");
    assert!(serde_json::from_str::<BenchRecord>(&bad).is_err());
}

#[test]
fn backend_labels_round_trip() {
    for label in [
        "cpu",
        "cuda",
        "wgpu",
        "cuda+cudnn",
        "cpu+normops",
        "cuda+cudnn+normops",
        "cuda+cubecl",
        "wgpu+cubecl+normops",
        "pytorch",
    ] {
        let backend: RecordBackend = label.parse().unwrap();
        assert_eq!(backend.to_string(), label);
    }
    assert!("other".parse::<RecordBackend>().is_err());
}
