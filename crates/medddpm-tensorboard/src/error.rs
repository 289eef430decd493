//! The crate's error type.

use std::path::PathBuf;

/// Why an event file could not be written or read; every variant names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TensorBoardError {
    /// Creating, writing or reading the file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The event file (or its folder).
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// A record's frame or message is damaged.
    #[error("{}: record at byte {offset}: {problem}", path.display())]
    Corrupt {
        /// The event file.
        path: PathBuf,
        /// Where the record starts.
        offset: u64,
        /// What is wrong with it.
        problem: &'static str,
    },
}

impl TensorBoardError {
    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
