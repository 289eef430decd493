//! Writing an event file: records are collected in memory and appended to the file by
//! [`EventWriter::flush`], one write per call, so a killed process leaves whole records (at
//! worst a torn last one, which TensorBoard reads as not yet written) of every flush before it.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::event::{Data, Event, Image, Value, What, FILE_VERSION, RGB};
use crate::record::frame;
use crate::TensorBoardError;

/// An open event file. Each session of a run writes its own file into the run's folder;
/// TensorBoard reads every file of a folder, in name order, as one run.
#[derive(Debug)]
pub struct EventWriter {
    file: File,
    path: PathBuf,
    pending: Vec<u8>,
}

impl EventWriter {
    /// Starts a new event file in `dir` (created if missing), named as TensorFlow names them
    /// (`events.out.tfevents.<unix seconds>.<host>.<pid>.<n>.medddpm`: names sort by start
    /// time, which is the order TensorBoard reads them in), and writes its version record.
    /// An existing file is never appended to or replaced.
    pub fn create(dir: &Path) -> Result<Self, TensorBoardError> {
        std::fs::create_dir_all(dir).map_err(|e| TensorBoardError::io(dir, e))?;
        static SERIAL: AtomicU64 = AtomicU64::new(0);
        let secs = now().floor() as u64;
        let host = hostname();
        loop {
            let n = SERIAL.fetch_add(1, Ordering::Relaxed);
            let name = format!(
                "events.out.tfevents.{secs:010}.{host}.{}.{n}.medddpm",
                std::process::id()
            );
            let path = dir.join(name);
            match OpenOptions::new().append(true).create_new(true).open(&path) {
                Ok(file) => {
                    let mut writer = Self {
                        file,
                        path,
                        pending: Vec::new(),
                    };
                    writer.push(0, What::FileVersion(FILE_VERSION.into()));
                    writer.flush()?;
                    return Ok(writer);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(TensorBoardError::io(&path, e)),
            }
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Logs a number (Scalars tab).
    pub fn scalar(&mut self, tag: &str, step: u64, value: f32) {
        self.value(tag, step, Data::Scalar(value));
    }

    /// Logs an RGB picture given as PNG bytes (Images tab).
    pub fn image(&mut self, tag: &str, step: u64, png: Vec<u8>, height: u32, width: u32) {
        let image = Image {
            height,
            width,
            colorspace: RGB,
            png,
        };
        self.value(tag, step, Data::Image(image));
    }

    /// Logs markdown (Text tab).
    pub fn text(&mut self, tag: &str, step: u64, markdown: &str) {
        self.value(tag, step, Data::Text(markdown.into()));
    }

    /// Marks a session (re)starting at `step`: TensorBoard drops what earlier files logged at
    /// `step` and later, the steps a resumed run trains again.
    pub fn session_start(&mut self, step: u64) {
        self.push(step, What::SessionStart);
    }

    /// Appends everything logged since the last flush to the file, in one write.
    pub fn flush(&mut self) -> Result<(), TensorBoardError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let result = self
            .file
            .write_all(&self.pending)
            .and_then(|()| self.file.flush());
        self.pending.clear();
        result.map_err(|e| TensorBoardError::io(&self.path, e))
    }

    fn value(&mut self, tag: &str, step: u64, data: Data) {
        let value = Value {
            tag: tag.into(),
            data,
        };
        self.push(step, What::Summary(vec![value]));
    }

    fn push(&mut self, step: u64, what: What) {
        let event = Event {
            wall_time: now(),
            step: i64::try_from(step).unwrap_or(i64::MAX),
            what,
        };
        frame(&mut self.pending, &event.encode());
    }
}

impl Drop for EventWriter {
    /// Best effort: what was logged and not yet flushed (an error path) still reaches the file.
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The machine's name as the kernel has it, reduced to characters safe in a file name.
fn hostname() -> String {
    let raw = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default();
    let name: String = raw
        .trim()
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' | '.' => c,
            _ => '_',
        })
        .collect();
    if name.is_empty() {
        "localhost".into()
    } else {
        name
    }
}
