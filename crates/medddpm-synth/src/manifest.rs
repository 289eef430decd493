//! `manifest.jsonl`: one JSON line per finished pair, appended and flushed to disk only after
//! the pair's files are in place, so a listed pair is a whole pair.
//!
//! With several processes each appends to its own part, `manifest.rank-R.jsonl`, and the lead
//! merges the parts into `manifest.jsonl` (atomically) when it starts and when it ends. One
//! writer per file means a line is never interleaved with another process's, whatever the
//! file system makes of concurrent `O_APPEND` writes (NFS makes no promise), and a kill tears
//! at most the last line of its own part, which readers ignore.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::SynthError;

pub use crate::files::{part_name, MANIFEST_FILE};

/// One finished pair.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairRecord {
    /// Its place in the work list.
    pub pair: usize,
    /// The case its files are named after.
    pub case: String,
    /// The mask it was made from.
    pub source_mask: String,
    /// Which variant of that mask.
    pub variant: usize,
    /// What the augmentation did (`null`: nothing).
    pub augmentation: Option<Value>,
    /// The seed of its noise (and augmentation).
    pub seed: u64,
    /// The reverse process (`dpm-solver++`, `ddim`, `ddpm`).
    pub sampler: String,
    /// Its network calls.
    pub steps: usize,
    /// Size and CRC-32 of the weights file it was sampled with.
    pub checkpoint: String,
    /// Seconds it took: its share of its batch's sampling plus its own writing.
    pub seconds: f64,
    /// Its files, relative to the output folder: the images in channel order, then the label.
    pub files: Vec<String>,
}

/// Every record of a folder's manifest and parts.
#[derive(Debug, Default)]
pub struct Manifests {
    /// By pair; a pair listed twice (a merge interrupted before its parts were removed) once.
    pub records: BTreeMap<usize, PairRecord>,
    /// Torn last lines ignored.
    pub torn: usize,
    /// The parts found.
    pub parts: Vec<PathBuf>,
}

/// Reads `manifest.jsonl` and every `manifest.rank-R.jsonl` of `out` (missing ones are empty).
pub fn read_manifests(out: &Path) -> Result<Manifests, SynthError> {
    let mut found = Manifests {
        parts: parts_of(out)?,
        ..Default::default()
    };
    let files = std::iter::once(out.join(MANIFEST_FILE)).chain(found.parts.clone());
    for path in files {
        let (records, torn) = read_lines(&path)?;
        found.torn += torn as usize;
        for r in records {
            found.records.entry(r.pair).or_insert(r);
        }
    }
    Ok(found)
}

/// The manifest parts in `out`, sorted.
fn parts_of(out: &Path) -> Result<Vec<PathBuf>, SynthError> {
    let entries = match std::fs::read_dir(out) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(SynthError::io(out, e)),
    };
    let mut parts = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| SynthError::io(out, e))?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if name.starts_with("manifest.rank-") && name.ends_with(".jsonl") {
            parts.push(path);
        }
    }
    parts.sort();
    Ok(parts)
}

/// The records of one file, and whether its last line was torn (no newline: a write a kill
/// interrupted). A complete line that is not a record is an error naming it.
fn read_lines(path: &Path) -> Result<(Vec<PairRecord>, bool), SynthError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), false)),
        Err(e) => return Err(SynthError::io(path, e)),
    };
    let mut lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    // After the last newline: empty, or a torn line.
    let torn = !lines.pop().unwrap_or_default().is_empty();
    let mut records = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let record = serde_json::from_slice(line).map_err(|e| SynthError::DamagedManifest {
            path: path.to_path_buf(),
            line: i + 1,
            problem: e.to_string(),
        })?;
        records.push(record);
    }
    Ok((records, torn))
}

/// Complete lines in the parts of `out`: pairs finished by the processes running now.
pub fn count_part_lines(out: &Path) -> usize {
    let Ok(parts) = parts_of(out) else {
        return 0;
    };
    parts
        .iter()
        .filter_map(|p| std::fs::read(p).ok())
        .map(|b| b.iter().filter(|&&c| c == b'\n').count())
        .sum()
}

/// Replaces `manifest.jsonl` with `records` (atomically), then removes `parts`.
pub fn write_merged<'a>(
    out: &Path,
    records: impl IntoIterator<Item = &'a PairRecord>,
    parts: &[PathBuf],
) -> Result<(), SynthError> {
    let mut text = Vec::new();
    for r in records {
        serde_json::to_writer(&mut text, r).expect("records serialise");
        text.push(b'\n');
    }
    let path = out.join(MANIFEST_FILE);
    medddpm_atomic::write(&path, &text).map_err(|e| SynthError::io(&path, e))?;
    for part in parts {
        std::fs::remove_file(part).map_err(|e| SynthError::io(part, e))?;
    }
    medddpm_atomic::sync_dir(out);
    Ok(())
}

/// Appends records to one manifest file, each flushed to disk before `append` returns.
pub struct Appender {
    file: File,
    path: PathBuf,
}

impl Appender {
    /// Opens (or creates) `path` for appending.
    pub fn open(path: PathBuf) -> Result<Self, SynthError> {
        let file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&path)
            .map_err(|e| SynthError::io(&path, e))?;
        Ok(Self { file, path })
    }

    /// Appends `record` as one line in one write, and waits for the disk.
    pub fn append(&mut self, record: &PairRecord) -> Result<(), SynthError> {
        let mut line = serde_json::to_vec(record).expect("records serialise");
        line.push(b'\n');
        self.file
            .write_all(&line)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| SynthError::io(&self.path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn record(pair: usize) -> PairRecord {
        PairRecord {
            pair,
            case: format!("a_syn{pair:03}"),
            source_mask: "masks/a.nii.gz".into(),
            variant: pair,
            augmentation: None,
            seed: 9,
            sampler: "dpm-solver++".into(),
            steps: 25,
            checkpoint: "crc32:00000001:10".into(),
            seconds: 1.5,
            files: vec![format!("image/a_syn{pair:03}.nii.gz")],
        }
    }

    #[test]
    fn parts_merge_once_each_and_torn_lines_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path();
        let mut a = Appender::open(out.join(MANIFEST_FILE)).unwrap();
        a.append(&record(0)).unwrap();
        let mut p = Appender::open(out.join(part_name(1))).unwrap();
        p.append(&record(1)).unwrap();
        p.append(&record(0)).unwrap();
        // A kill in the middle of a line.
        let line = serde_json::to_string(&record(3)).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(out.join(part_name(1)))
            .unwrap()
            .write_all(&line.as_bytes()[..20])
            .unwrap();
        assert_eq!(count_part_lines(out), 2);
        let m = read_manifests(out).unwrap();
        assert_eq!(m.records.keys().copied().collect::<Vec<_>>(), [0, 1]);
        assert_eq!((m.torn, m.parts.len()), (1, 1));
        write_merged(out, m.records.values(), &m.parts).unwrap();
        let m = read_manifests(out).unwrap();
        assert_eq!((m.records.len(), m.torn, m.parts.len()), (2, 0, 0));
        let text = std::fs::read_to_string(out.join(MANIFEST_FILE)).unwrap();
        assert_eq!(text.lines().count(), 2);
        assert_eq!(
            serde_json::from_str::<PairRecord>(text.lines().last().unwrap()).unwrap(),
            record(1)
        );
    }

    #[test]
    fn a_damaged_complete_line_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(MANIFEST_FILE);
        let good = serde_json::to_string(&record(0)).unwrap();
        std::fs::write(&path, format!("{good}\nnot json\n{good}\n")).unwrap();
        let err = read_manifests(dir.path()).unwrap_err().to_string();
        assert!(err.contains("manifest.jsonl, line 2"), "{err}");
    }
}
