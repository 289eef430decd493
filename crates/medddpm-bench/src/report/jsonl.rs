//! The JSON-lines record file: one record per line, appended as each configuration finishes.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::Path;

use crate::error::{Error, FileAction, Result};
use crate::record::BenchRecord;

/// Reads every record of a JSON-lines file (blank lines are skipped).
///
/// A malformed line is an error naming the file and the 1-based line number, so a hand-edited or
/// truncated results file points at what to fix.
pub fn read_jsonl(path: &Path) -> Result<Vec<BenchRecord>> {
    let file = File::open(path).map_err(Error::io(FileAction::Open, path))?;
    let mut records = Vec::new();
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line_no = i + 1;
        let line = line.map_err(Error::io(FileAction::ReadLine(line_no), path))?;
        if line.trim().is_empty() {
            continue;
        }
        let record: BenchRecord =
            serde_json::from_str(&line).map_err(|source| Error::BadRecord {
                path: path.to_path_buf(),
                line: line_no,
                source,
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
pub fn append_jsonl(path: &Path, record: &BenchRecord) -> Result<()> {
    if let Some((class, v)) = record.breakdown_ms.iter().find(|(_, v)| !v.is_finite()) {
        return Err(Error::NonFiniteBreakdown {
            class: class.clone(),
            value: *v,
        });
    }
    let mut line = serde_json::to_string(record).map_err(Error::SerialiseRecord)?;
    line.push('\n');
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)
        .map_err(Error::io(FileAction::OpenToAppend, path))?;
    let len = file
        .metadata()
        .map_err(Error::io(FileAction::Stat, path))?
        .len();
    if len > 0 {
        let mut last = [0u8; 1];
        file.seek(SeekFrom::End(-1))
            .and_then(|_| file.read_exact(&mut last))
            .map_err(Error::io(FileAction::ReadEnd, path))?;
        if last[0] != b'\n' {
            line.insert(0, '\n');
        }
    }
    file.write_all(line.as_bytes())
        .and_then(|_| file.sync_data())
        .map_err(Error::io(FileAction::Append, path))
}
