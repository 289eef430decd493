//! Atomic file writes: a reader sees the old file or the new one, never half of one.
//!
//! One rule for every writer in the workspace: the bytes go to a temporary file in the target's
//! own folder (a rename is atomic only within one file system), are flushed with `fsync` (a
//! rename can reach the disk before the data it names), and the temporary is renamed over the
//! target; the folder is then synced so the rename itself survives a power cut. On any error the
//! temporary is removed and the target is untouched.
//!
//! Errors are plain [`std::io::Error`]s: each caller wraps them in its own typed error with the
//! path, as it does for every other I/O failure.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes `bytes` to `path` atomically.
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_with(path, |file| file.write_all(bytes))
}

/// Writes `path` atomically through `fill`, which streams into the temporary file (for writers
/// that encode as they go: gzip, PNG, GIF).
pub fn write_with(path: &Path, fill: impl FnOnce(&mut File) -> io::Result<()>) -> io::Result<()> {
    let tmp = temporary_beside(path)?;
    let result = (|| {
        let mut file = File::create(&tmp)?;
        fill(&mut file)?;
        file.flush()?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
        return result;
    }
    sync_dir(folder_of(path));
    Ok(())
}

/// Writes `bytes` to `path` in place and flushes them to disk: for files inside a temporary
/// folder that is itself published by one rename (checkpoints), where a temporary per file
/// would add nothing. Followed by [`sync_dir`] on that folder before it is renamed.
pub fn write_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = File::create(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// Flushes a folder's entries (renames, new files) to disk. Best effort: some file systems
/// refuse to open folders for syncing, and the data itself is already safe by then.
pub fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// `.<name>.<pid>.<n>.tmp` in the target's folder: hidden, unique per process and call, and
/// recognisable as ours if a kill ever leaves one behind.
fn temporary_beside(path: &Path) -> io::Result<PathBuf> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?;
    let mut tmp = OsString::from(".");
    tmp.push(name);
    tmp.push(format!(
        ".{}.{}.tmp",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    Ok(folder_of(path).join(tmp))
}

fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn writes_and_replaces_leaving_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.json");
        write(&path, b"first").unwrap();
        write(&path, b"second").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        assert_eq!(entries(dir.path()), ["a.json"]);
    }

    #[test]
    fn a_failing_writer_keeps_the_old_file_and_removes_its_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.nii");
        write(&path, b"old").unwrap();
        let err = write_with(&path, |f| {
            f.write_all(b"half")?;
            Err(io::Error::other("encoder failed"))
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "encoder failed");
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        assert_eq!(entries(dir.path()), ["a.nii"]);
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_full_disk_is_reported_as_such() {
        // /dev/full fails every write with ENOSPC, as a full disk does.
        let err = write_synced(Path::new("/dev/full"), b"x").unwrap_err();
        assert_eq!(err.raw_os_error(), Some(28), "{err}");
    }

    #[test]
    fn a_missing_folder_is_an_error_and_a_bare_name_resolves_to_the_working_folder() {
        let dir = tempfile::tempdir().unwrap();
        let err = write(&dir.path().join("no/such/a.json"), b"x").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(write(Path::new(""), b"x").is_err());
        assert_eq!(folder_of(Path::new("a.json")), Path::new("."));
    }
}
