//! Watches cubecl's autotune cache while kernels are tuned, to say what is happening during
//! the minutes-long first steps on a GPU.
//!
//! cubecl appends one JSON line per tuned kernel to `<root>/autotune/<version>/<device>/
//! <operation>-tune.json.log`, with every candidate's timing and the index of the fastest. The
//! watcher polls those files and reports each new entry as a `log` record of target
//! [`TUNE_NOTES`] (the binary shows them as a spinner on a terminal, as lines elsewhere).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Serialize;

/// The `log` target of the kernels being tuned, one record each.
pub const TUNE_NOTES: &str = "medddpm::tune";

/// One tuned kernel, as read from the cache.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TunedKernel {
    /// The tuned operation (`conv-forward`, `conv-backward_weight`, `matmul`, ...).
    pub operation: String,
    /// The candidate that won.
    pub fastest: String,
    /// Its median time, milliseconds.
    pub median_ms: Option<f64>,
    /// Candidates that ran (the rest were skipped as unavailable or failed).
    pub candidates_ok: usize,
}

/// Parses one cache line; `None` for lines that are not tuning results.
pub fn parse_entry(operation: &str, line: &str) -> Option<TunedKernel> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let value = v.get("value")?;
    let fastest_index = value.get("fastest_index")?.as_u64()?;
    let results = value.get("results")?.as_array()?;
    let mut fastest = None;
    let mut ok = 0;
    for r in results {
        if let Some(o) = r.get("outcome").and_then(|o| o.get("Ok")) {
            ok += 1;
            if o.get("index").and_then(|i| i.as_u64()) == Some(fastest_index) {
                let median = o
                    .get("computation")
                    .and_then(|c| c.get("median"))
                    .and_then(|m| {
                        Some(m.get("secs")?.as_f64()? * 1e3 + m.get("nanos")?.as_f64()? / 1e6)
                    });
                fastest = Some((o.get("name")?.as_str()?.to_string(), median));
            }
        }
    }
    let (name, median_ms) = fastest.unwrap_or_else(|| (format!("#{fastest_index}"), None));
    Some(TunedKernel {
        operation: operation.to_string(),
        fastest: name,
        median_ms,
        candidates_ok: ok,
    })
}

/// `burn_cubecl-kernel-conv-backward_weight-tune.json.log` -> `conv-backward_weight`.
pub fn operation_name(file: &Path) -> String {
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("?");
    let name = name.strip_suffix(".json.log").unwrap_or(name);
    let name = name.strip_suffix("-tune").unwrap_or(name);
    let name = name.replace("-tune-", "-");
    let name = name
        .strip_prefix("burn_cubecl-kernel-")
        .map(str::to_string)
        .or_else(|| {
            name.strip_prefix("burn_cubecl_fusion-")
                .map(|s| format!("fused-{s}"))
        })
        .unwrap_or(name.clone());
    name
}

fn cache_files(root: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            cache_files(&p, out);
        } else if p.to_str().is_some_and(|s| s.ends_with(".json.log")) {
            out.push(p);
        }
    }
}

/// Tuning results already stored under `root`.
pub fn count_entries(root: &Path) -> usize {
    let mut files = Vec::new();
    cache_files(root, &mut files);
    files
        .iter()
        .filter_map(|f| std::fs::File::open(f).ok())
        .map(|f| {
            BufReader::new(f)
                .lines()
                .map_while(Result::ok)
                .filter(|l| !l.trim().is_empty())
                .count()
        })
        .sum()
}

/// Reads complete new lines of every cache file since the last call.
struct Tail {
    root: PathBuf,
    offsets: HashMap<PathBuf, u64>,
}

impl Tail {
    fn new(root: PathBuf) -> Self {
        let mut files = Vec::new();
        cache_files(&root, &mut files);
        let offsets = files
            .into_iter()
            .filter_map(|f| std::fs::metadata(&f).ok().map(|m| (f, m.len())))
            .collect();
        Self { root, offsets }
    }

    fn poll(&mut self) -> Vec<TunedKernel> {
        let mut files = Vec::new();
        cache_files(&self.root, &mut files);
        let mut found = Vec::new();
        for f in files {
            let offset = self.offsets.get(&f).copied().unwrap_or(0);
            let Ok(mut file) = std::fs::File::open(&f) else {
                continue;
            };
            if file.seek(SeekFrom::Start(offset)).is_err() {
                continue;
            }
            let mut reader = BufReader::new(file);
            let mut consumed = offset;
            let mut line = String::new();
            while let Ok(n) = reader.read_line(&mut line) {
                if n == 0 || !line.ends_with('\n') {
                    break; // partial line: read it whole next time
                }
                consumed += n as u64;
                if let Some(k) = parse_entry(&operation_name(&f), line.trim()) {
                    found.push(k);
                }
                line.clear();
            }
            self.offsets.insert(f, consumed);
        }
        found
    }
}

/// Shows kernels as they are tuned until [`TuneWatcher::finish`].
pub struct TuneWatcher {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Vec<TunedKernel>>>,
}

impl TuneWatcher {
    /// Starts polling `root` (every 250 ms); `show` false records without reporting.
    pub fn start(root: PathBuf, show: bool) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut tail = Tail::new(root);
            let mut all = Vec::new();
            loop {
                let stopping = flag.load(Ordering::SeqCst);
                for k in tail.poll() {
                    if show {
                        let time = k
                            .median_ms
                            .map(|m| format!(" {m:.2} ms"))
                            .unwrap_or_default();
                        log::info!(
                            target: TUNE_NOTES,
                            "{} tuned; last: {} -> {}{} ({} candidates ran)",
                            all.len() + 1,
                            k.operation,
                            k.fastest,
                            time,
                            k.candidates_ok
                        );
                    }
                    all.push(k);
                }
                if stopping {
                    break;
                }
                std::thread::sleep(Duration::from_millis(250));
            }
            all
        });
        Self {
            stop,
            handle: Some(handle),
        }
    }

    /// Stops watching and returns every kernel tuned meanwhile.
    pub fn finish(mut self) -> Vec<TunedKernel> {
        self.stop.store(true, Ordering::SeqCst);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for TuneWatcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const LINE: &str = r#"{"key":{"key":{"x":1},"checksum":"e0"},"value":{"fastest_index":3,"results":[{"outcome":{"Ok":{"name":"fused_cube","index":3,"computation":{"median":{"secs":0,"nanos":57783}}}}},{"outcome":{"Ok":{"name":"fused_plane","index":2,"computation":{"median":{"secs":1,"nanos":0}}}}},{"outcome":{"Err":{"Skip":{"name":"fused_unit"}}}}]}}"#;

    #[test]
    fn parses_a_cubecl_cache_line() {
        let k = parse_entry("fused-optim-reduce", LINE).unwrap();
        assert_eq!(k.fastest, "fused_cube");
        assert!((k.median_ms.unwrap() - 0.057783).abs() < 1e-9);
        assert_eq!(k.candidates_ok, 2);
        assert!(parse_entry("x", "not json").is_none());
    }

    #[test]
    fn names_operations_from_cache_files() {
        let p = Path::new("/a/burn_cubecl-kernel-conv-backward_weight-tune.json.log");
        assert_eq!(operation_name(p), "conv-backward_weight");
        let p = Path::new("/a/burn_cubecl-kernel-matmul-tune-base.json.log");
        assert_eq!(operation_name(p), "matmul-base");
        let p = Path::new("/a/burn_cubecl_fusion-optim-reduce-tune.json.log");
        assert_eq!(operation_name(p), "fused-optim-reduce");
    }

    #[test]
    fn sees_entries_appended_while_watching_and_only_whole_lines() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("autotune/0.10.0/device-0-0-cuda");
        std::fs::create_dir_all(&sub).unwrap();
        let file = sub.join("burn_cubecl-kernel-conv-forward-tune.json.log");
        std::fs::write(&file, format!("{LINE}\n")).unwrap();
        assert_eq!(count_entries(dir.path()), 1);

        let mut tail = Tail::new(dir.path().to_path_buf());
        assert!(
            tail.poll().is_empty(),
            "entries present at start are not new"
        );
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .unwrap();
        write!(f, "{LINE}\n{}", &LINE[..20]).unwrap();
        let new = tail.poll();
        assert_eq!(new.len(), 1);
        assert_eq!(new[0].operation, "conv-forward");
        writeln!(f, "{}", &LINE[20..]).unwrap();
        assert_eq!(tail.poll().len(), 1, "the completed line is read once");
        assert_eq!(count_entries(dir.path()), 3);

        let watcher = TuneWatcher::start(dir.path().to_path_buf(), false);
        std::thread::sleep(Duration::from_millis(400));
        writeln!(f, "{LINE}").unwrap();
        std::thread::sleep(Duration::from_millis(600));
        let seen = watcher.finish();
        assert_eq!(seen.len(), 1);
    }
}
