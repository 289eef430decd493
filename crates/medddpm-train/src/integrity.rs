//! Is a checkpoint what was written? File checksums, parameter shapes and finite weights.
//!
//! A checkpoint folder carries `checksums.json` (size and CRC-32 of every other file, written
//! last before the folder is published), so flipped bytes, a truncated file or a file copied in
//! from another run are found before the weights are used. Loading then checks what a checksum
//! cannot: that the records fit the configured network (burn loads a record of another shape
//! without complaint) and that no weight is NaN or infinite.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::{backend::Backend, Tensor};
use serde::{Deserialize, Serialize};

use medddpm_kernels::panics::quiet_catch;

use crate::TrainError;

/// The checksum manifest inside a checkpoint folder.
pub use crate::layout::CHECKSUMS_FILE;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct FileSum {
    bytes: u64,
    crc32: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Manifest {
    files: BTreeMap<String, FileSum>,
}

fn sum_file(path: &Path) -> Result<FileSum, TrainError> {
    let mut file = std::fs::File::open(path).map_err(|e| TrainError::io(path, e))?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let n = file.read(&mut buf).map_err(|e| TrainError::io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        bytes += n as u64;
    }
    Ok(FileSum {
        bytes,
        crc32: hasher.finalize(),
    })
}

/// The size and CRC-32 of a file, as `crc32:<8 hex digits>:<bytes>` (what a checksum manifest
/// records per file): a cheap identity for weights a run was made with.
pub fn file_checksum(path: &Path) -> Result<String, TrainError> {
    let sum = sum_file(path)?;
    Ok(format!("crc32:{:08x}:{}", sum.crc32, sum.bytes))
}

/// The regular files of `dir` other than the manifest, by name.
fn listed_files(dir: &Path) -> Result<Vec<String>, TrainError> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| TrainError::io(dir, e))? {
        let entry = entry.map_err(|e| TrainError::io(dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name != CHECKSUMS_FILE && entry.path().is_file() {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// Writes `dir/checksums.json` for every other file in `dir`.
pub fn write_checksums(dir: &Path) -> Result<(), TrainError> {
    let mut files = BTreeMap::new();
    for name in listed_files(dir)? {
        files.insert(name.clone(), sum_file(&dir.join(&name))?);
    }
    let json = serde_json::to_string_pretty(&Manifest { files }).expect("manifest serialises");
    let path = dir.join(CHECKSUMS_FILE);
    medddpm_atomic::write(&path, json.as_bytes()).map_err(|e| TrainError::io(&path, e))
}

/// What [`verify_checkpoint`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verification {
    /// Every file listed in the manifest is there with its size and checksum.
    Verified {
        /// Files checked.
        files: usize,
    },
    /// No manifest: a checkpoint written before checksums existed (it loads, unverified).
    NoManifest,
}

/// The manifest of `dir`, or `None` for a checkpoint written before checksums existed.
fn read_manifest(dir: &Path) -> Result<Option<Manifest>, TrainError> {
    let path = dir.join(CHECKSUMS_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(TrainError::io(&path, e)),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| TrainError::checkpoint(dir, format!("{CHECKSUMS_FILE} is damaged: {e}")))
}

/// The error for file `name` of `dir` whose size or checksum is not what was written.
fn compare(dir: &Path, name: &str, got: &FileSum, want: &FileSum) -> Result<(), TrainError> {
    if got.bytes != want.bytes {
        return Err(TrainError::checkpoint(
            dir,
            format!(
                "{name} has {} bytes where {} were written (truncated or replaced)",
                got.bytes, want.bytes
            ),
        ));
    }
    if got.crc32 != want.crc32 {
        return Err(TrainError::checkpoint(
            dir,
            format!("{name} does not match its checksum (its bytes changed after writing)"),
        ));
    }
    Ok(())
}

/// Checks every file of a checkpoint folder against its manifest.
pub fn verify_checkpoint(dir: &Path) -> Result<Verification, TrainError> {
    let Some(manifest) = read_manifest(dir)? else {
        return Ok(Verification::NoManifest);
    };
    for (name, want) in &manifest.files {
        let file = dir.join(name);
        if !file.is_file() {
            return Err(TrainError::checkpoint(dir, format!("{name} is missing")));
        }
        compare(dir, name, &sum_file(&file)?, want)?;
    }
    Ok(Verification::Verified {
        files: manifest.files.len(),
    })
}

/// Reads file `name` of checkpoint folder `dir`, checked against the manifest in memory (each
/// byte read once: loading needs the bytes anyway). A mismatch names the intact checkpoint
/// before this one, as [`verify_or_offer`] does. Without a manifest the bytes come unchecked.
pub fn read_checked(dir: &Path, name: &str) -> Result<Vec<u8>, TrainError> {
    let path = dir.join(name);
    let bytes = std::fs::read(&path).map_err(|e| TrainError::io(&path, e))?;
    if let Some(want) = read_manifest(dir)?.and_then(|m| m.files.get(name).cloned()) {
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&bytes);
        let got = FileSum {
            bytes: bytes.len() as u64,
            crc32: hasher.finalize(),
        };
        compare(dir, name, &got, &want).map_err(|e| offer_previous(dir, e))?;
    }
    Ok(bytes)
}

/// The newest checkpoint before `damaged` in the same folder that verifies, for error messages
/// that offer it.
pub fn previous_intact(damaged: &Path) -> Option<PathBuf> {
    let parent = damaged.parent()?;
    let limit = crate::layout::step_of(damaged)?;
    let mut older: Vec<(usize, PathBuf)> = std::fs::read_dir(parent)
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| crate::layout::step_of(&e.path()).map(|s| (s, e.path())))
        .filter(|(s, p)| *s < limit && p.join(crate::layout::STATE_FILE).is_file())
        .collect();
    older.sort();
    older
        .into_iter()
        .rev()
        .find(|(_, p)| verify_checkpoint(p).is_ok())
        .map(|(_, p)| p)
}

/// [`verify_checkpoint`], with the error naming the newest older checkpoint that verifies.
pub fn verify_or_offer(dir: &Path) -> Result<Verification, TrainError> {
    verify_checkpoint(dir).map_err(|e| offer_previous(dir, e))
}

/// `e` (about damaged checkpoint `dir`) with the newest older checkpoint that verifies.
fn offer_previous(dir: &Path, e: TrainError) -> TrainError {
    match (&e, previous_intact(dir)) {
        (TrainError::Checkpoint { path, message }, Some(previous)) => TrainError::Checkpoint {
            path: path.clone(),
            message: format!(
                "{message}; the previous checkpoint {} is intact (`sample` and `inspect` take it by name; to resume from it, move this one out of checkpoints/)",
                previous.display()
            ),
        },
        _ => e,
    }
}

/// Walks a module's float parameters with their dotted paths and shapes; with `counts`, also
/// queues each parameter's count of non-finite values (read back together, not one device
/// round trip per parameter).
struct Walk<'a, B: Backend, F> {
    path: Vec<String>,
    counts: Option<Vec<Tensor<B, 1, burn::tensor::Int>>>,
    visit: &'a mut F,
}

impl<B: Backend, F: FnMut(&str, Vec<usize>)> ModuleVisitor<B> for Walk<'_, B, F> {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let tensor = param.val();
        (self.visit)(&self.path.join("."), tensor.dims().to_vec());
        if let Some(counts) = &mut self.counts {
            // x - x is 0 for finite x and NaN otherwise.
            counts.push(tensor.clone().sub(tensor).is_nan().int().sum());
        }
    }
}

/// Names and shapes of `module`'s float parameters, in visiting order.
fn shapes<B: Backend, M: Module<B>>(module: &M) -> Vec<(String, Vec<usize>)> {
    let mut out = Vec::new();
    let mut visit = |name: &str, shape: Vec<usize>| out.push((name.to_string(), shape));
    module.visit(&mut Walk::<B, _> {
        path: Vec::new(),
        counts: None,
        visit: &mut visit,
    });
    out
}

/// Each float parameter's name and its number of NaN or infinite values, in visiting order.
fn non_finite_counts<B: Backend, M: Module<B>>(module: &M) -> Vec<(String, usize)> {
    let mut names = Vec::new();
    let mut visit = |name: &str, _: Vec<usize>| names.push(name.to_string());
    let mut walk = Walk::<B, _> {
        path: Vec::new(),
        counts: Some(Vec::new()),
        visit: &mut visit,
    };
    module.visit(&mut walk);
    let counts = walk.counts.take().unwrap_or_default();
    if counts.is_empty() {
        return Vec::new();
    }
    let counts: Vec<i64> = Tensor::cat(counts, 0)
        .into_data()
        .convert::<i64>()
        .to_vec()
        .expect("integer counts");
    names
        .into_iter()
        .zip(counts.into_iter().map(|c| c as usize))
        .collect()
}

/// Checks that `loaded` (a record loaded into the configured network) has the shapes of
/// `configured` (the network the config builds) and only finite weights. `what` names the
/// weights (e.g. "the EMA weights") and `file` the record, for the error.
pub fn check_weights<B: Backend, M: Module<B>>(
    configured: &M,
    loaded: &M,
    what: &str,
    file: &Path,
) -> Result<(), TrainError> {
    // Shapes first, without touching the data: a record claiming a huge shape must not make
    // the finiteness check allocate it.
    let want = shapes(configured);
    let got = shapes(loaded);
    let mismatch = got
        .iter()
        .enumerate()
        .find_map(|(i, (name, shape))| match want.get(i) {
            Some((n, s)) if s != shape => Some(format!(
                "{n} is {shape:?} in the file, {s:?} in the configured network"
            )),
            None => Some(format!("{name} is not in the configured network")),
            _ => None,
        });
    if let Some(m) = mismatch {
        return Err(TrainError::checkpoint(
            file,
            format!(
                "{what} are not of the configured network ({m}): a record of another architecture"
            ),
        ));
    }
    let counts = non_finite_counts(loaded);
    let non_finite: usize = counts.iter().map(|(_, c)| c).sum();
    if let Some((first, _)) = counts.iter().find(|(_, c)| *c > 0) {
        return Err(TrainError::checkpoint(
            file,
            format!("{what} hold {non_finite} NaN or infinite values (first in {first})"),
        ));
    }
    Ok(())
}

/// Decodes a record file's `bytes` (`NamedMpkFileRecorder`'s format) onto `device`. Every
/// failure is a checkpoint error naming `file`.
pub fn decode_record<B: Backend, R: burn::record::Record<B>>(
    bytes: Vec<u8>,
    file: &Path,
    device: &B::Device,
) -> Result<R, TrainError> {
    use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Recorder};
    let unreadable =
        |why: String| TrainError::checkpoint(file, format!("not a readable record: {why}"));
    // The decoder allocates what a length prefix claims before it finds the bytes missing (a
    // flipped bit made it reserve 2 GiB for a 30 kB file): every claim is checked first.
    msgpack_lengths_fit(&bytes).map_err(|e| unreadable(e.0))?;
    // burn panics on some malformed records instead of returning an error (a parameter id
    // that does not parse: "Invalid id."), found by the fuzz test.
    quiet_catch(|| {
        Recorder::<B>::load(
            &NamedMpkBytesRecorder::<FullPrecisionSettings>::new(),
            bytes,
            device,
        )
    })
    .map_err(|p| unreadable(p.0))?
    .map_err(|e| unreadable(e.to_string()))
}

/// Loads the network record `bytes` (the contents of `file`) into a copy of `configured` on
/// `device` and checks it with [`check_weights`]. Every failure, including bytes that are not
/// a record of this network at all, is a checkpoint error naming `file`.
pub fn load_record_bytes<B: Backend, M: Module<B>>(
    configured: &M,
    bytes: Vec<u8>,
    file: &Path,
    device: &B::Device,
) -> Result<M, TrainError> {
    let record: M::Record = decode_record::<B, M::Record>(bytes, file, device)?;
    let unreadable =
        |why: String| TrainError::checkpoint(file, format!("not a readable record: {why}"));
    let loaded =
        quiet_catch(|| configured.clone().load_record(record)).map_err(|p| unreadable(p.0))?;
    // A record whose data disagrees with its shape panics where the data is first read.
    quiet_catch(|| check_weights(configured, &loaded, "the weights", file))
        .map_err(|p| unreadable(p.0))??;
    Ok(loaded)
}

/// Where a MessagePack document claims more than it holds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct MalformedRecord(pub String);

/// Walks a MessagePack document without decoding it and checks that every length it claims
/// (strings, binaries, extensions, array and map counts) fits in the bytes that remain, so a
/// decoder that trusts those lengths cannot allocate more than a few times the input.
pub fn msgpack_lengths_fit(bytes: &[u8]) -> Result<(), MalformedRecord> {
    let mut at = 0usize;
    // Values still to read: the document is one value; containers add their elements.
    let mut pending: u64 = 1;
    let read = |at: usize, n: usize| -> Result<u64, MalformedRecord> {
        let b = bytes.get(at..at + n).ok_or_else(|| {
            MalformedRecord(format!("the record ends inside a value at byte {at}"))
        })?;
        Ok(b.iter().fold(0u64, |acc, &x| (acc << 8) | x as u64))
    };
    while pending > 0 {
        let marker = *bytes.get(at).ok_or_else(|| {
            MalformedRecord(format!("the record ends at byte {at} with values missing"))
        })?;
        at += 1;
        pending -= 1;
        // (bytes of the length field, payload bytes known now, extra values it holds)
        let (len_bytes, fixed, values): (usize, u64, u64) = match marker {
            0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => (0, 0, 0),
            0x80..=0x8f => (0, 0, 2 * (marker & 0x0f) as u64),
            0x90..=0x9f => (0, 0, (marker & 0x0f) as u64),
            0xa0..=0xbf => (0, (marker & 0x1f) as u64, 0),
            // bin and str 8, 16, 32: a length of 1, 2 or 4 bytes.
            0xc4..=0xc6 => (1 << (marker - 0xc4), 0, 0),
            0xd9..=0xdb => (1 << (marker - 0xd9), 0, 0),
            // ext 8, 16, 32: the length, then a type byte.
            0xc7..=0xc9 => (1 << (marker - 0xc7), 1, 0),
            // float 32 and 64.
            0xca | 0xcb => (0, 4 << (marker - 0xca), 0),
            // uint, then int, of 8 to 64 bits.
            0xcc..=0xd3 => (0, 1 << (marker & 3), 0),
            // fixext 1 to 16: a type byte, then the data.
            0xd4..=0xd8 => (0, 1 + (1 << (marker - 0xd4)), 0),
            // array and map 16 and 32: a count of 2 or 4 bytes.
            0xdc | 0xde => (2, 0, 0),
            0xdd | 0xdf => (4, 0, 0),
            0xc1 => {
                return Err(MalformedRecord(format!(
                    "byte {}: 0xc1 is not a MessagePack value",
                    at - 1
                )))
            }
        };
        let claimed = if len_bytes > 0 {
            let n = read(at, len_bytes)?;
            at += len_bytes;
            n
        } else {
            0
        };
        let remaining = (bytes.len() - at) as u64;
        let (payload, values) = match marker {
            0xdc | 0xdd => (0, claimed),
            0xde | 0xdf => (0, claimed.saturating_mul(2)),
            _ => (fixed.saturating_add(claimed), values),
        };
        if payload > remaining || values > remaining.saturating_sub(payload) + 1 {
            return Err(MalformedRecord(format!(
                "a length at byte {} claims {} where {remaining} bytes remain",
                at - len_bytes - 1,
                payload.max(values)
            )));
        }
        at += payload as usize;
        pending = pending.saturating_add(values);
        if pending > remaining.saturating_sub(payload) + 1 {
            return Err(MalformedRecord(format!(
                "the record claims {pending} more values than its {remaining} remaining bytes can hold"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::msgpack_lengths_fit;

    #[test]
    fn lengths_that_do_not_fit_are_found_before_decoding() {
        // {"a": [1, 2.5, bin(3)]}
        let doc = [
            0x81, 0xa1, b'a', 0x93, 0x01, 0xcb, 0, 0, 0, 0, 0, 0, 0x04, 0x40, 0xc4, 3, 7, 8, 9,
        ];
        msgpack_lengths_fit(&doc).unwrap();
        // The binary claims 2^31 bytes.
        let mut huge = doc.to_vec();
        huge.splice(14..16, [0xc6, 0x80, 0, 0, 0]);
        assert!(msgpack_lengths_fit(&huge)
            .unwrap_err()
            .0
            .contains("claims 2147483648"));
        // An array of 65,535 values in 19 bytes.
        let mut many = doc.to_vec();
        many.splice(3..4, [0xdc, 0xff, 0xff]);
        assert!(msgpack_lengths_fit(&many).is_err());
        // Cut short.
        assert!(msgpack_lengths_fit(&doc[..10]).is_err());
    }
}
