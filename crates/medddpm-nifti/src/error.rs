//! The crate's error type.

use std::path::PathBuf;

use crate::DataType;

/// Everything that can go wrong reading, writing or reshaping a volume.
///
/// Variants about a file carry its `path`, and their message starts with it, so a user with a
/// folder of hundreds of scans knows which one to fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NiftiError {
    /// The operating system refused a read, write or rename.
    #[error("{path}: {source}")]
    Io {
        /// File being read or written.
        path: PathBuf,
        /// Underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The gzip stream ends early (an interrupted download or copy).
    #[error("{path}: gzip stream is truncated (file cut short?)")]
    TruncatedGzip {
        /// File being read.
        path: PathBuf,
    },
    /// The gzip stream is damaged (bad checksum or invalid deflate data).
    #[error("{path}: gzip stream is corrupt: {source}")]
    CorruptGzip {
        /// File being read.
        path: PathBuf,
        /// Decoder error.
        #[source]
        source: std::io::Error,
    },
    /// The file has a NIfTI-2 header, which this crate does not read.
    #[error("{path}: NIfTI-2 files are unsupported (convert to NIfTI-1, e.g. with nibabel or fslchfiletype)")]
    UnsupportedNifti2 {
        /// File being read.
        path: PathBuf,
    },
    /// Voxel sizes (`pixdim[1..4]`) that are zero, negative or not numbers.
    #[error("{path}: voxel spacing {spacing:?} (pixdim[1..4]) must be positive numbers of mm")]
    BadSpacing {
        /// The file.
        path: PathBuf,
        /// pixdim[1], pixdim[2], pixdim[3].
        spacing: [f32; 3],
    },
    /// `sizeof_hdr` is neither 348 (NIfTI-1) nor 540 (NIfTI-2) in either byte order.
    #[error("{path}: not a NIfTI file (sizeof_hdr = {sizeof_hdr}, expected 348)")]
    NotNifti {
        /// File being read.
        path: PathBuf,
        /// The value found, read as little-endian.
        sizeof_hdr: i32,
    },
    /// The magic string is not `n+1\0` (single file) or `ni1\0` (header/image pair).
    #[error("{path}: bad NIfTI-1 magic {found:?} (expected \"n+1\\0\" or \"ni1\\0\")")]
    BadMagic {
        /// File being read.
        path: PathBuf,
        /// The four bytes found.
        found: [u8; 4],
    },
    /// The file is shorter than the 348-byte header.
    #[error("{path}: truncated header ({len} bytes, need 348)")]
    TruncatedHeader {
        /// File being read.
        path: PathBuf,
        /// Bytes available.
        len: usize,
    },
    /// The voxel data is shorter than the header's dimensions require.
    #[error("{path}: truncated voxel data ({found} bytes after offset {offset}, need {expected})")]
    TruncatedData {
        /// File being read.
        path: PathBuf,
        /// Byte offset of the voxel data.
        offset: usize,
        /// Bytes the header's dims and datatype require.
        expected: usize,
        /// Bytes present after the offset.
        found: usize,
    },
    /// The header claims more bytes than the compressed file could hold: refused before
    /// inflating, so that a huge claim over a stream of zeros costs nothing.
    #[error("{path}: the header claims {claimed} bytes of voxels, more than its {compressed} compressed bytes can hold (at most {possible}): the file is truncated or its header is wrong")]
    ClaimTooLarge {
        /// File being read.
        path: PathBuf,
        /// Voxel offset plus voxel bytes the header claims.
        claimed: u64,
        /// The file's size.
        compressed: u64,
        /// The most its gzip stream can inflate to.
        possible: u64,
    },
    /// The datatype code is not one this crate decodes (complex, RGB, float128, ...).
    #[error("{path}: unsupported NIfTI datatype code {code}")]
    UnsupportedDatatype {
        /// File being read.
        path: PathBuf,
        /// The `datatype` header field.
        code: i16,
    },
    /// `vox_offset` is negative, fractional, inside the header, or past the end of the file.
    #[error("{path}: vox_offset {vox_offset} is out of range (file has {file_len} bytes)")]
    BadVoxOffset {
        /// File being read.
        path: PathBuf,
        /// The `vox_offset` header field.
        vox_offset: f32,
        /// Length of the (decompressed) file holding the data.
        file_len: usize,
    },
    /// The image is not 3-D (a 4-D file is accepted only when its 4th dimension is 1).
    #[error("{path}: unsupported dimensions {dims:?} (need a 3-D volume, or 4-D with dim[4] = 1)")]
    UnsupportedDims {
        /// File being read.
        path: PathBuf,
        /// `dim[0..=dim[0]]` as stored.
        dims: Vec<i64>,
    },
    /// Output paths must end in `.nii` or `.nii.gz`; header/image pairs are read-only.
    #[error("{path}: cannot write this file type (use .nii or .nii.gz)")]
    UnsupportedExtension {
        /// File being written.
        path: PathBuf,
    },
    /// NIfTI-1 stores each dimension as an i16, so axes above 32767 voxels cannot be written.
    #[error("{path}: grid {dims:?} exceeds NIfTI-1's 32767 voxels per axis")]
    GridTooLarge {
        /// File being written.
        path: PathBuf,
        /// Dims of the volume.
        dims: [usize; 3],
    },
    /// A voxel value does not fit the integer datatype chosen for writing.
    #[error("{path}: value {value} does not fit datatype {dtype:?}")]
    ValueOutOfRange {
        /// File being written.
        path: PathBuf,
        /// First offending value.
        value: f32,
        /// Datatype requested.
        dtype: DataType,
    },
    /// Two volumes that must share a voxel grid (mask and image) do not.
    #[error(
        "{a_path} ({a_dims:?}) and {b_path} ({b_dims:?}) are not on the same voxel grid: {detail}"
    )]
    GridMismatch {
        /// First file.
        a_path: PathBuf,
        /// Its dims.
        a_dims: [usize; 3],
        /// Second file.
        b_path: PathBuf,
        /// Its dims.
        b_dims: [usize; 3],
        /// What differs.
        detail: String,
    },
    /// The voxel buffer length does not match the dims.
    #[error("data length {found} does not match dims {dims:?} ({expected} voxels)")]
    DataLength {
        /// Requested dims.
        dims: [usize; 3],
        /// Product of dims.
        expected: usize,
        /// Buffer length given.
        found: usize,
    },
    /// A target grid has a zero-sized axis.
    #[error("target grid {dims:?} has an empty axis")]
    EmptyGrid {
        /// Requested dims.
        dims: [usize; 3],
    },
    /// Percentile bounds must satisfy 0 <= low < high <= 100.
    #[error("invalid percentiles low = {low}, high = {high} (need 0 <= low < high <= 100)")]
    InvalidPercentile {
        /// Lower percentile.
        low: f64,
        /// Upper percentile.
        high: f64,
    },
}
