//! The parent's side of the measurement: one process per device count.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{record_path, ScalingOptions, ScalingRecord};
use crate::error::Error;

/// Runs `command --scaling-count k`, waits for it (at most `options.timeout_s`) and reads the
/// record it wrote. Its output goes to this process's stderr, as it comes.
pub(super) fn measure_count(
    options: &ScalingOptions,
    command: &[String],
    k: usize,
) -> Result<ScalingRecord, Error> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| Error::Scaling("no command to run a device count with".into()))?;
    let path = record_path(&options.out, k);
    remove_stale(&path)?;
    let mut child = Command::new(program)
        .args(args)
        .arg("--scaling-count")
        .arg(k.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| Error::Scaling(format!("starting {program}: {e}")))?;
    let start = Instant::now();
    let limit = Duration::from_secs(options.timeout_s);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Error::Scaling(format!(
                    "timed out after {} s (--timeout)",
                    options.timeout_s
                )));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(200)),
            Err(e) => return Err(Error::Scaling(format!("waiting for {program}: {e}"))),
        }
    };
    if !status.success() {
        return Err(Error::Scaling(format!("its process ended with {status}")));
    }
    let bytes =
        std::fs::read(&path).map_err(|e| Error::Scaling(format!("{}: {e}", path.display())))?;
    serde_json::from_slice(&bytes).map_err(|e| Error::Scaling(format!("{}: {e}", path.display())))
}

/// A record left by an earlier run must not pass for this one's.
fn remove_stale(path: &Path) -> Result<(), Error> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(Error::Scaling(format!("{}: {e}", path.display())))
        }
        _ => Ok(()),
    }
}
