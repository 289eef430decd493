//! Reading and writing NIfTI-1 files (`.nii`, `.nii.gz`; `.hdr`/`.img` pairs read-only).
//!
//! - `read`: [`Volume::read`](crate::Volume::read) and
//!   [`Volume::from_bytes`](crate::Volume::from_bytes);
//! - `write`: [`Volume::write`](crate::Volume::write) and
//!   [`Volume::write_with`](crate::Volume::write_with) with [`WriteOptions`].

mod read;
mod write;

pub use write::WriteOptions;
