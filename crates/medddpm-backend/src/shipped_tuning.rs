//! Tuning results shipped in the binary for the GPU model the project measures on (compute
//! capability 9.0: H100, H200), written into a tuning cache that lacks them.
//!
//! On a fresh machine the first bf16 steps of the whole-head model spend about half their time
//! tuning: burn's kernels time their candidates (each compiled first) and cuDNN times its
//! algorithms. On one fresh H200 the first sampling step and training micro-step took 21.4 /
//! 31.3 s tuning, 11.9 / 12.6 s starting from these results (docs/benchmarks/README.md).
//! The results are choices, not code: a wrong one is only slower, and cubecl re-tunes any whose candidates changed (each entry carries
//! their checksum). They are written only where the cache has no such file, so a user's own
//! results always win, and only on the GPU model they were measured on (another model's timings
//! would choose badly, and kernels it lacks could be chosen).

use std::io::Read;
use std::path::Path;

use crate::Error;

/// The compute capability the shipped results were measured on.
const CAPABILITY: (i32, i32) = (9, 0);

/// Per tuning-cache folder (backend and precision): a gzipped tar of cubecl's autotune logs of
/// device 0 (`autotune/<cubecl>/device-0-0-cuda/*.json.log`) and the cuDNN engine's choices
/// (`cudnn-algorithms.json`, `cudnn-plans.json`). Made by `scripts/ship-tuning.sh`.
const SHIPPED: [(&str, &[u8]); 3] = [
    (
        "cuda-bf16",
        include_bytes!("../tuning/sm90-cuda-bf16.tar.gz"),
    ),
    (
        "cuda-tf32",
        include_bytes!("../tuning/sm90-cuda-tf32.tar.gz"),
    ),
    (
        "cuda-fp32",
        include_bytes!("../tuning/sm90-cuda-fp32.tar.gz"),
    ),
];

/// The folder of device 0's autotune logs in the archives.
const DEVICE_ZERO: &str = "device-0-0-cuda";

/// What [`seed`] wrote.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Seeded {
    /// Files written.
    pub files: usize,
    /// Their non-empty lines (autotune entries) and cuDNN choices together.
    pub entries: usize,
}

/// Writes the results shipped for `root`'s folder (e.g. `cuda-bf16`) into `root` for each of
/// `devices` whose compute capability is [`CAPABILITY`], skipping every file that exists.
pub(crate) fn seed(
    root: &Path,
    devices: &[usize],
    capability: impl Fn(usize) -> Option<(i32, i32)>,
) -> Result<Seeded, Error> {
    let folder = root.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let Some((_, archive)) = SHIPPED.iter().find(|(name, _)| *name == folder) else {
        return Ok(Seeded::default());
    };
    let devices: Vec<usize> = devices
        .iter()
        .copied()
        .filter(|&d| capability(d) == Some(CAPABILITY))
        .collect();
    if devices.is_empty() {
        return Ok(Seeded::default());
    }
    let mut seeded = Seeded::default();
    for (path, bytes) in unpack(archive)? {
        for target in targets(&path, &devices) {
            let target = root.join(target);
            if write_new(&target, &bytes)? {
                seeded.files += 1;
                seeded.entries += entries(&target, &bytes);
            }
        }
    }
    Ok(seeded)
}

/// The archive's files, path and contents.
fn unpack(archive: &[u8]) -> Result<Vec<(String, Vec<u8>)>, Error> {
    let broken = |source: std::io::Error| Error::ShippedTuning { source };
    let mut files = Vec::new();
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(archive));
    for entry in tar.entries().map_err(broken)? {
        let mut entry = entry.map_err(broken)?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let path = entry.path().map_err(broken)?;
        let path = path.to_string_lossy().trim_start_matches("./").to_string();
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).map_err(broken)?;
        files.push((path, bytes));
    }
    Ok(files)
}

/// Where an archive file goes: once per device for device 0's autotune logs, once otherwise.
fn targets(path: &str, devices: &[usize]) -> Vec<String> {
    let parts: Vec<&str> = path.split('/').collect();
    match parts.iter().position(|p| *p == DEVICE_ZERO) {
        Some(at) => devices
            .iter()
            .map(|d| {
                let mut parts = parts.clone();
                let device = format!("device-0-{d}-cuda");
                parts[at] = &device;
                parts.join("/")
            })
            .collect(),
        None => vec![path.to_string()],
    }
}

/// Writes `bytes` to `path` unless something of that name exists; true when written. Atomic
/// (`medddpm-atomic`), so a run reading the cache never sees half a file; two replicas seeding
/// the same file at once write the same bytes.
fn write_new(path: &Path, bytes: &[u8]) -> Result<bool, Error> {
    if path.symlink_metadata().is_ok() {
        return Ok(false);
    }
    let failed = |source| Error::TuneCache {
        path: path.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(path.parent().unwrap_or(Path::new("."))).map_err(failed)?;
    medddpm_atomic::write(path, bytes).map_err(failed)?;
    Ok(true)
}

/// Entries in a written file: lines of an autotune log, keys of a cuDNN table.
fn entries(path: &Path, bytes: &[u8]) -> usize {
    if path.extension().is_some_and(|e| e == "json") {
        serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(bytes)
            .map(|m| m.len())
            .unwrap_or(0)
    } else {
        bytes
            .split(|&b| b == b'\n')
            .filter(|l| !l.trim_ascii().is_empty())
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hopper(_: usize) -> Option<(i32, i32)> {
        Some(CAPABILITY)
    }

    #[test]
    fn seeds_each_device_of_the_model_once_and_never_over_a_users_file() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("cuda-bf16");
        let first = seed(&root, &[0, 2], hopper).unwrap();
        assert!(first.files > 0 && first.entries > 0, "{first:?}");
        let logs = |d: usize| {
            let folder = root.join(format!("autotune/0.10.0/device-0-{d}-cuda"));
            std::fs::read_dir(folder).map(|f| f.count()).unwrap_or(0)
        };
        assert!(logs(0) > 0);
        assert_eq!(logs(0), logs(2));
        assert_eq!(logs(1), 0);
        assert!(root.join("cudnn-algorithms.json").is_file());

        let again = seed(&root, &[0, 2], hopper).unwrap();
        assert_eq!(
            again,
            Seeded::default(),
            "an existing file is never written over"
        );

        let mine = root.join("cudnn-algorithms.json");
        std::fs::write(&mine, "{}").unwrap();
        std::fs::remove_dir_all(root.join("autotune")).unwrap();
        let third = seed(&root, &[0], hopper).unwrap();
        assert!(third.files > 0);
        assert_eq!(std::fs::read_to_string(&mine).unwrap(), "{}");
    }

    #[test]
    fn seeds_nothing_on_another_model_or_precision() {
        let dir = tempfile::tempdir().unwrap();
        let ampere = |_| Some((8, 0));
        let root = dir.path().join("cuda-bf16");
        assert_eq!(seed(&root, &[0], ampere).unwrap(), Seeded::default());
        assert!(!root.exists());
        let wgpu = dir.path().join("wgpu-fp32");
        assert_eq!(seed(&wgpu, &[0], hopper).unwrap(), Seeded::default());
        let unknown = |_| None;
        assert_eq!(
            seed(&dir.path().join("cuda-tf32"), &[0], unknown).unwrap(),
            Seeded::default()
        );
    }

    #[test]
    fn every_shipped_archive_unpacks_to_autotune_logs_and_cudnn_choices() {
        for (folder, archive) in SHIPPED {
            let files = unpack(archive).unwrap();
            assert!(
                files
                    .iter()
                    .any(|(p, _)| p.contains(DEVICE_ZERO) && p.ends_with(".json.log")),
                "{folder}"
            );
            assert!(
                files.iter().any(|(p, _)| p == "cudnn-algorithms.json"),
                "{folder}"
            );
        }
    }
}
