//! One training process per run folder.
//!
//! Two sessions resuming the same run would read the same checkpoint and then overwrite each
//! other's. `train` holds an exclusive advisory lock (std's `File::try_lock`: `flock(2)` on
//! Linux) on `<run>/.lock` for the whole session; the kernel releases it when the process ends
//! in any way (kill -9 included), so a crash never leaves a stale lock behind. The file holds
//! the owner's process id, for the message; a session that ends removes it (while still
//! holding the lock), and one that takes a lock checks the file it locked is still the one in
//! the folder, so that a removal at that moment never lets two sessions hold it.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use crate::TrainError;

/// The lock file inside a run folder.
pub const LOCK_FILE: &str = ".lock";

/// Held while a process trains in a run folder; released on drop (or when the process ends).
#[derive(Debug)]
pub struct RunLock {
    _file: File,
    path: PathBuf,
}

impl RunLock {
    /// Takes the run folder's lock (creating the folder), or says which process holds it.
    pub fn acquire(run_root: &Path) -> Result<Self, TrainError> {
        std::fs::create_dir_all(run_root).map_err(|e| TrainError::io(run_root, e))?;
        let path = run_root.join(LOCK_FILE);
        // A holder that ended between our open and our lock removed the file we locked.
        for _ in 0..3 {
            let file = lock_file(run_root, &path)?;
            if same_file(&file, &path) {
                return Ok(Self { _file: file, path });
            }
        }
        Err(TrainError::Locked {
            run: run_root.to_path_buf(),
            owner: "other processes starting and ending".into(),
        })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// [`RunLock::acquire`]'s one attempt: the file opened (or created), locked and holding our
/// process id.
fn lock_file(run_root: &Path, path: &Path) -> Result<File, TrainError> {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| TrainError::io(path, e))?;
    if !try_lock(&file).map_err(|e| TrainError::io(path, e))? {
        let mut owner = String::new();
        let _ = file.read_to_string(&mut owner);
        let owner = owner.trim();
        return Err(TrainError::Locked {
            run: run_root.to_path_buf(),
            owner: if owner.is_empty() {
                "another process".into()
            } else {
                format!("process {owner}")
            },
        });
    }
    // Ours now: record who holds it.
    let write = |file: &mut File| -> std::io::Result<()> {
        file.set_len(0)?;
        file.rewind()?;
        write!(file, "{}", std::process::id())?;
        file.flush()
    };
    write(&mut file).map_err(|e| TrainError::io(path, e))?;
    Ok(file)
}

impl Drop for RunLock {
    /// Removes the file before the lock goes with it: a finished run leaves no `.lock`.
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Whether `file` is still the file at `path` (not removed or replaced since it was opened).
fn same_file(file: &File, path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (file.metadata(), std::fs::metadata(path)) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (file, path);
        true
    }
}

/// std's advisory exclusive lock (flock(2) on Linux), without waiting.
fn try_lock(file: &File) -> std::io::Result<bool> {
    match file.try_lock() {
        Ok(()) => Ok(true),
        Err(std::fs::TryLockError::WouldBlock) => Ok(false),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}
