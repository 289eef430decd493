//! NIfTI-1 volumes for Med-DDPM: read/write `.nii`/`.nii.gz`, crop/pad/resize on a grid, and
//! normalise intensities to the network's [-1, 1].
//!
//! A [`Volume`] holds voxels as `f32` in file order, which is already the C-order `(k, j, i)`
//! array the reference network expects (see [`Volume::network_shape`]), together with the
//! affine, spacing, stored datatype and raw header.
//!
//! # Example
//! ```no_run
//! use medddpm_nifti::{Interpolation, Normalization, Volume, WriteOptions, DataType};
//!
//! # fn main() -> Result<(), medddpm_nifti::NiftiError> {
//! let image = Volume::read("t1.nii.gz")?;
//! let net_in = image
//!     .crop_or_pad([192, 192, 144], 0.0)?
//!     .resize([128, 128, 128], Interpolation::Linear)?
//!     .normalized(Normalization::ReferencePerSlice)?;
//! assert_eq!(net_in.network_shape(), [128, 128, 128]);
//! net_in.write("t1_prep.nii.gz")?;
//! let labels = Volume::read("seg.nii.gz")?;
//! labels.write_with("seg_u8.nii", WriteOptions::dtype(DataType::U8))?;
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]

mod affine;
mod error;
mod grid;
mod header;
mod io;
mod normalize;
mod volume;

pub use affine::{header_affine, Affine, IDENTITY};
pub use error::NiftiError;
pub use grid::Interpolation;
pub use header::{DataType, Endian, NiftiHeader, NIFTI1_HEADER_SIZE, NIFTI1_VOX_OFFSET};
pub use io::WriteOptions;
pub use normalize::Normalization;
pub use volume::{ensure_same_grid, file_name, nifti_stem, Volume};

/// The memory the system can give without swapping (`MemAvailable` of `/proc/meminfo`), in
/// bytes; `None` where it cannot be read. What the readers and writers of volumes check a
/// large allocation against before making it.
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}
