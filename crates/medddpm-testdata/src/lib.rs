//! Test-only helper: where the shared real data and the reference's golden fixtures live.
//!
//! Tests read them from `../shared` beside the checkout (CI has the same folder), or from
//! `MEDDDPM_SHARED_DIR`. They are never copied into the repository.
#![warn(missing_docs)]

use std::path::PathBuf;

/// The shared folder: `$MEDDDPM_SHARED_DIR`, else `<workspace>/../shared`.
///
/// # Panics
/// If the folder has no `datasets/`, with a message saying where it looked.
pub fn shared_dir() -> PathBuf {
    let dir = std::env::var_os("MEDDDPM_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"));
    assert!(
        dir.join("datasets").is_dir(),
        "shared data folder not found at {} (set MEDDDPM_SHARED_DIR)",
        dir.display()
    );
    dir
}

/// A file or folder under `shared/datasets`.
pub fn dataset(relative: &str) -> PathBuf {
    shared_dir().join("datasets").join(relative)
}

/// A file under `shared/fixtures`.
pub fn fixture(relative: &str) -> PathBuf {
    shared_dir().join("fixtures").join(relative)
}
