//! The benchmark matrix: every backend x precision x layout in its own child process.
//!
//! A child per configuration because the GPU precision switch is process-wide, because peak
//! memory and first-step (compilation and tuning) times must not carry over from one
//! configuration to the next, and because a configuration that crashes or runs out of memory
//! must not take the others with it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use crate::cell::Cell;
use crate::error::{Error, FileAction, Result};
use crate::record::{BenchRecord, RecordBackend, RecordStatus};
use crate::single::SingleConfig;

/// How to run the children.
pub struct ChildSpec {
    /// The program and the arguments that select the benchmark subcommand (e.g.
    /// `[medddpm, bench]`).
    pub command: Vec<String>,
    /// Kill a child after this long.
    pub timeout: Duration,
    /// Tuning-cache root passed on to children.
    pub tune_cache: Option<PathBuf>,
    /// False: children get `--no-shipped-tuning`.
    pub shipped_tuning: bool,
}

/// Lines of a child's output kept for a failed configuration's record.
const TAIL_LINES: usize = 12;

/// A record for a cell that never produced one.
pub fn placeholder(
    cell: Cell,
    config: &SingleConfig,
    status: RecordStatus,
    message: String,
) -> BenchRecord {
    let mut r = BenchRecord::new(
        RecordBackend::burn(cell.backend),
        cell.precision,
        cell.layout,
        config.workload,
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
    let files = CellFiles::new(scratch, cell);
    let _ = std::fs::remove_file(&files.record);
    let record = run_child(spec, cell, config, &files)
        .unwrap_or_else(|e| placeholder(cell, config, RecordStatus::Failed, e.chain()));
    let _ = std::fs::remove_file(&files.config);
    let _ = std::fs::remove_file(&files.record);
    record
}

/// The files a child reads its configuration from and writes its record to.
struct CellFiles {
    record: PathBuf,
    config: PathBuf,
}

impl CellFiles {
    fn new(scratch: &Path, cell: Cell) -> Self {
        let record = scratch.join(format!(
            "cell-{}-{}-{}.json",
            cell.backend, cell.precision, cell.layout
        ));
        let config = record.with_extension("config.json");
        Self { record, config }
    }

    /// The record the child wrote (complete, or as it stood after its last finished phase).
    fn read_record(&self) -> Result<BenchRecord> {
        let text = std::fs::read_to_string(&self.record)
            .map_err(Error::io(FileAction::Read, &self.record))?;
        serde_json::from_str(&text).map_err(|source| Error::Parse {
            path: self.record.clone(),
            source,
        })
    }
}

/// Starts the child, passes its output through, waits for it (killing it at the timeout) and
/// turns what it left into the cell's record.
fn run_child(
    spec: &ChildSpec,
    cell: Cell,
    config: &SingleConfig,
    files: &CellFiles,
) -> Result<BenchRecord> {
    medddpm_atomic::write(&files.config, &serde_json::to_vec(config)?)
        .map_err(Error::io(FileAction::Write, &files.config))?;
    let mut child = spawn(spec, cell, files)?;
    let output = pass_through(&mut child, cell.to_string());
    let status = wait_or_kill(&mut child, spec.timeout)?;
    let tail = output.finish();
    let secs = spec.timeout.as_secs();
    match status {
        // Killed: keep what it measured before (its partial record), marked as failed.
        None if files.record.is_file() => {
            let mut r = files.read_record()?;
            r.status = RecordStatus::Failed;
            r.message = Some(format!(
                "timed out after {secs} s ({})",
                r.message.unwrap_or_default()
            ));
            r.log_tail = Some(tail);
            Ok(r)
        }
        None => Ok(failed_with_tail(
            cell,
            config,
            format!("timed out after {secs} s"),
            tail,
        )),
        Some(_) if files.record.is_file() => files.read_record(),
        Some(status) => Ok(failed_with_tail(
            cell,
            config,
            format!("the run exited with {status} without a result"),
            tail,
        )),
    }
}

/// A failed cell's record: `message`, then the last lines the child printed.
fn failed_with_tail(
    cell: Cell,
    config: &SingleConfig,
    message: String,
    tail: Vec<String>,
) -> BenchRecord {
    let mut r = placeholder(cell, config, RecordStatus::Failed, message);
    r.log_tail = Some(tail);
    r
}

/// Starts `spec`'s command on `cell`, its record going to `files.record`.
fn spawn(spec: &ChildSpec, cell: Cell, files: &CellFiles) -> Result<Child> {
    let mut cmd = Command::new(&spec.command[0]);
    cmd.args(&spec.command[1..])
        .arg("--single-config")
        .arg(&files.config)
        .arg("--single-out")
        .arg(&files.record)
        .args(["--backends", cell.backend.name()])
        .args(["--precisions", cell.precision.name()])
        .args(["--layouts", &cell.layout.to_string()]);
    if let Some(dir) = &spec.tune_cache {
        cmd.arg("--tune-cache").arg(dir);
    }
    if !spec.shipped_tuning {
        cmd.arg("--no-shipped-tuning");
    }
    cmd.stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(Error::io(FileAction::Start, Path::new(&spec.command[0])))
}

/// A child's standard error, passed through with its label and its last lines kept.
struct PassThrough {
    reader: JoinHandle<()>,
    tail: Arc<Mutex<Vec<String>>>,
}

impl PassThrough {
    /// Waits for the child's output to end and returns its last lines.
    fn finish(self) -> Vec<String> {
        let _ = self.reader.join();
        let tail = self.tail.lock().unwrap();
        tail.clone()
    }
}

/// Reports `child`'s standard error (`log`) prefixed with `[label]`, keeping its last lines.
fn pass_through(child: &mut Child, label: String) -> PassThrough {
    let tail = Arc::new(Mutex::new(Vec::<String>::new()));
    let kept = tail.clone();
    let stderr = child.stderr.take().expect("piped stderr");
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            log::info!("[{label}] {line}");
            let mut t = kept.lock().unwrap();
            t.push(line);
            if t.len() > TAIL_LINES {
                t.remove(0);
            }
        }
    });
    PassThrough { reader, tail }
}

/// The child's exit status, or `None` when it ran past `timeout` and was killed.
fn wait_or_kill(child: &mut Child, timeout: Duration) -> Result<Option<ExitStatus>> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().map_err(Error::Wait)? {
            return Ok(Some(status));
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
