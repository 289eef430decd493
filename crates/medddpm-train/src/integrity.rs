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

use crate::TrainError;

/// The checksum manifest inside a checkpoint folder.
pub const CHECKSUMS_FILE: &str = "checksums.json";

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
    crate::checkpoint::atomic_write(&dir.join(CHECKSUMS_FILE), json.as_bytes())
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

/// Checks every file of a checkpoint folder against its manifest.
pub fn verify_checkpoint(dir: &Path) -> Result<Verification, TrainError> {
    let path = dir.join(CHECKSUMS_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Verification::NoManifest),
        Err(e) => return Err(TrainError::io(&path, e)),
    };
    let manifest: Manifest = serde_json::from_str(&text)
        .map_err(|e| TrainError::checkpoint(dir, format!("{CHECKSUMS_FILE} is damaged: {e}")))?;
    for (name, want) in &manifest.files {
        let file = dir.join(name);
        if !file.is_file() {
            return Err(TrainError::checkpoint(dir, format!("{name} is missing")));
        }
        let got = sum_file(&file)?;
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
    }
    Ok(Verification::Verified {
        files: manifest.files.len(),
    })
}

/// The newest checkpoint before `damaged` in the same folder that verifies, for error messages
/// that offer it.
pub fn previous_intact(damaged: &Path) -> Option<PathBuf> {
    let parent = damaged.parent()?;
    let step_of = |p: &Path| {
        p.file_name()?
            .to_str()?
            .strip_prefix("step-")?
            .parse::<usize>()
            .ok()
    };
    let limit = step_of(damaged)?;
    let mut older: Vec<(usize, PathBuf)> = std::fs::read_dir(parent)
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| step_of(&e.path()).map(|s| (s, e.path())))
        .filter(|(s, p)| *s < limit && p.join(crate::checkpoint::STATE_FILE).is_file())
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
    verify_checkpoint(dir).map_err(|e| match (&e, previous_intact(dir)) {
        (TrainError::Checkpoint { path, message }, Some(previous)) => TrainError::Checkpoint {
            path: path.clone(),
            message: format!(
                "{message}; the previous checkpoint {} is intact (remove this one to fall back to it, or name it directly)",
                previous.display()
            ),
        },
        _ => e,
    })
}

/// Walks a module's float parameters with their dotted paths.
struct Walk<'a, F> {
    path: Vec<String>,
    /// Count each parameter's non-finite values (reads every weight).
    count_non_finite: bool,
    visit: &'a mut F,
}

impl<B: Backend, F: FnMut(&str, Vec<usize>, Option<usize>)> ModuleVisitor<B> for Walk<'_, F> {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let tensor = param.val();
        let shape = tensor.dims().to_vec();
        let bad = self.count_non_finite.then(|| {
            // x - x is 0 for finite x and NaN otherwise.
            let bad = tensor
                .clone()
                .sub(tensor)
                .is_nan()
                .int()
                .sum()
                .into_scalar();
            burn::tensor::ElementConversion::elem::<i64>(bad) as usize
        });
        (self.visit)(&self.path.join("."), shape, bad);
    }
}

fn walk<B: Backend, M: Module<B>>(
    module: &M,
    count_non_finite: bool,
    mut visit: impl FnMut(&str, Vec<usize>, Option<usize>),
) {
    module.visit(&mut Walk {
        path: Vec::new(),
        count_non_finite,
        visit: &mut visit,
    });
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
    let mut want = Vec::new();
    walk(configured, false, |name, shape, _| {
        want.push((name.to_string(), shape))
    });
    let mut index = 0;
    let mut mismatch = None;
    let mut non_finite = 0usize;
    let mut first_bad = None;
    walk(loaded, true, |name, shape, bad| {
        match want.get(index) {
            Some((n, s)) if *s != shape && mismatch.is_none() => {
                mismatch = Some(format!(
                    "{n} is {shape:?} in the file, {s:?} in the configured network"
                ))
            }
            None if mismatch.is_none() => {
                mismatch = Some(format!("{name} is not in the configured network"))
            }
            _ => {}
        }
        index += 1;
        if let Some(bad) = bad.filter(|&b| b > 0) {
            non_finite += bad;
            first_bad.get_or_insert_with(|| name.to_string());
        }
    });
    let file_name = file.display();
    if let Some(m) = mismatch {
        return Err(TrainError::checkpoint(
            file,
            format!("{what} in {file_name} are not of the configured network ({m}): a record of another architecture"),
        ));
    }
    if let Some(first) = first_bad {
        return Err(TrainError::checkpoint(
            file,
            format!(
                "{what} in {file_name} hold {non_finite} NaN or infinite values (first in {first})"
            ),
        ));
    }
    Ok(())
}
