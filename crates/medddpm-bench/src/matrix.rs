//! The benchmark matrix: every backend x precision x layout in its own child process.
//!
//! A child per configuration because the GPU precision switch is process-wide, because peak
//! memory and first-step (compilation and tuning) times must not carry over from one
//! configuration to the next, and because a configuration that crashes or runs out of memory
//! must not take the others with it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use medddpm_backend::{BackendKind, Precision};
use medddpm_unet::Layout;

use crate::record::{BenchRecord, RecordStatus, LOG_TAIL};
use crate::single::SingleConfig;

/// One cell of the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cell {
    /// Backend.
    pub backend: BackendKind,
    /// Precision.
    pub precision: Precision,
    /// Layout.
    pub layout: Layout,
}

/// How to run the children.
pub struct ChildSpec {
    /// The program and the arguments that select the benchmark subcommand (e.g.
    /// `[medddpm, bench]`).
    pub command: Vec<String>,
    /// Kill a child after this long.
    pub timeout: Duration,
    /// Tuning-cache root passed on to children.
    pub tune_cache: Option<PathBuf>,
}

/// A record for a cell that never produced one.
pub fn placeholder(
    cell: Cell,
    config: &SingleConfig,
    status: RecordStatus,
    message: String,
) -> BenchRecord {
    let mut r = BenchRecord::new(
        cell.backend.name(),
        "",
        cell.precision.name(),
        &cell.layout.to_string(),
        &config.model,
        config.size,
        config.batch,
        status,
    );
    r.message = Some(message);
    r
}

/// Runs one cell in a child process and returns its record (a `Failed` one if the child died
/// without writing it). The child's output is passed through, prefixed with the cell.
pub fn run_cell(
    spec: &ChildSpec,
    cell: Cell,
    config: &SingleConfig,
    scratch: &Path,
) -> BenchRecord {
    let label = format!("{}/{}/{}", cell.backend, cell.precision, cell.layout);
    let record_path = scratch.join(format!(
        "cell-{}-{}-{}.json",
        cell.backend, cell.precision, cell.layout
    ));
    let config_path = record_path.with_extension("config.json");
    let _ = std::fs::remove_file(&record_path);
    let run = || -> anyhow::Result<BenchRecord> {
        std::fs::write(&config_path, serde_json::to_vec(config)?)
            .with_context(|| format!("writing {}", config_path.display()))?;
        let mut cmd = Command::new(&spec.command[0]);
        cmd.args(&spec.command[1..])
            .arg("--single-config")
            .arg(&config_path)
            .arg("--single-out")
            .arg(&record_path)
            .args(["--backends", cell.backend.name()])
            .args(["--precisions", cell.precision.name()])
            .args(["--layouts", &cell.layout.to_string()]);
        if let Some(dir) = &spec.tune_cache {
            cmd.arg("--tune-cache").arg(dir);
        }
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", spec.command[0]))?;
        let tail = Arc::new(Mutex::new(Vec::<String>::new()));
        let reader = {
            let tail = tail.clone();
            let stderr = child.stderr.take().expect("piped stderr");
            let label = label.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    eprintln!("[{label}] {line}");
                    let mut t = tail.lock().unwrap();
                    t.push(line);
                    if t.len() > 12 {
                        t.remove(0);
                    }
                }
            })
        };
        let start = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break Some(status);
            }
            if start.elapsed() > spec.timeout {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        let _ = reader.join();
        let tail = tail.lock().unwrap().join(" | ");
        let read = || -> anyhow::Result<BenchRecord> {
            let text = std::fs::read_to_string(&record_path)
                .with_context(|| format!("reading {}", record_path.display()))?;
            serde_json::from_str(&text)
                .with_context(|| format!("parsing {}", record_path.display()))
        };
        match status {
            // Killed: keep what it measured before (its partial record), marked as failed.
            None if record_path.is_file() => {
                let mut r = read()?;
                r.status = RecordStatus::Failed;
                r.message = Some(format!(
                    "timed out after {} s ({}){LOG_TAIL}{tail}",
                    spec.timeout.as_secs(),
                    r.message.unwrap_or_default()
                ));
                Ok(r)
            }
            None => Ok(placeholder(
                cell,
                config,
                RecordStatus::Failed,
                format!(
                    "timed out after {} s{LOG_TAIL}{tail}",
                    spec.timeout.as_secs()
                ),
            )),
            Some(_) if record_path.is_file() => read(),
            Some(status) => Ok(placeholder(
                cell,
                config,
                RecordStatus::Failed,
                format!("the run exited with {status} without a result{LOG_TAIL}{tail}"),
            )),
        }
    };
    let record =
        run().unwrap_or_else(|e| placeholder(cell, config, RecordStatus::Failed, format!("{e:#}")));
    let _ = std::fs::remove_file(&config_path);
    let _ = std::fs::remove_file(&record_path);
    record
}
