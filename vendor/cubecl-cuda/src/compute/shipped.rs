//! medddpm-rs patch: machine code compiled ahead of time, looked up by what it was compiled
//! from, and the switch that writes it out.
//!
//! A kernel's id names its type and compile-time configuration, not its code, so machine code
//! found by id could belong to another build's kernel. These are keyed by a hash of the NVRTC
//! architecture option and the generated CUDA source instead: a kernel whose code changed, or
//! another GPU architecture, finds nothing and is compiled as before.

use cubecl_common::hash::{StableHash, StableHasher};
use std::collections::HashMap;
use std::hash::Hasher;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// Opens the shipped table, once, at the first kernel the PTX cache lacks.
type Loader = Box<dyn FnOnce() -> HashMap<StableHash, Vec<u8>> + Send>;

static LOADER: Mutex<Option<Loader>> = Mutex::new(None);
static TABLE: OnceLock<HashMap<StableHash, Vec<u8>>> = OnceLock::new();
static EXPORT: OnceLock<PathBuf> = OnceLock::new();
static USED: AtomicUsize = AtomicUsize::new(0);
static COMPILED: AtomicUsize = AtomicUsize::new(0);

/// Machine code (CUBIN) for kernels, keyed by [`key`], from `loader`, which runs only if a
/// kernel is ever missing from the PTX cache (a warm cache never opens it). Returns false,
/// changing nothing, when a table was set before.
pub fn set_shipped_kernels(
    loader: impl FnOnce() -> HashMap<StableHash, Vec<u8>> + Send + 'static,
) -> bool {
    let mut slot = LOADER.lock().unwrap();
    if slot.is_some() || TABLE.get().is_some() {
        return false;
    }
    *slot = Some(Box::new(loader));
    true
}

/// Writes the CUBIN of every kernel compiled from here on into `dir`, as `<key>.cubin` (the
/// key in 32 hexadecimal digits), for a later build to ship. Returns false when set before.
pub fn export_kernels_to(dir: PathBuf) -> bool {
    EXPORT.set(dir).is_ok()
}

/// Kernels loaded from the shipped table, and kernels compiled with NVRTC, in this process.
pub fn shipped_kernel_counts() -> (usize, usize) {
    (USED.load(Ordering::Relaxed), COMPILED.load(Ordering::Relaxed))
}

/// What a kernel's machine code is found by: the architecture option and the source.
pub fn key(arch_option: &str, source: &str) -> StableHash {
    let mut hasher = StableHasher::new();
    hasher.write(arch_option.as_bytes());
    hasher.write(&[0]);
    hasher.write(source.as_bytes());
    hasher.finalize()
}

/// The shipped machine code for `key`, if any.
pub(crate) fn find(key: StableHash) -> Option<&'static [u8]> {
    let table = TABLE.get_or_init(|| match LOADER.lock().unwrap().take() {
        Some(loader) => loader(),
        None => HashMap::new(),
    });
    let found = table.get(&key).map(Vec::as_slice);
    if found.is_some() {
        USED.fetch_add(1, Ordering::Relaxed);
    }
    found
}

/// Counts a kernel NVRTC compiled; where exporting, the folder to write its CUBIN into.
pub(crate) fn compiled() -> Option<&'static PathBuf> {
    COMPILED.fetch_add(1, Ordering::Relaxed);
    EXPORT.get()
}

/// `<key>.cubin`.
pub(crate) fn file_name(key: StableHash) -> String {
    format!("{key:032x}.cubin")
}
