//! Writing single-file NIfTI-1 (`.nii`, `.nii.gz`) atomically, with a rebuilt header.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use flate2::write::GzEncoder;
use flate2::Compression;

use crate::affine::affine_to_quaternion;
use crate::header::{NIFTI1_HEADER_SIZE, NIFTI1_VOX_OFFSET};
use crate::{DataType, Endian, NiftiError, NiftiHeader, Volume};

/// Settings for [`Volume::write_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOptions {
    /// Storage type. By default, F32 (what the network produces); U8/I16 suit label maps.
    pub dtype: DataType,
    /// Byte order. By default, little-endian; big-endian exists to exercise the reader.
    pub endian: Endian,
}

impl Default for WriteOptions {
    fn default() -> Self {
        Self {
            dtype: DataType::F32,
            endian: Endian::Little,
        }
    }
}

impl WriteOptions {
    /// Default options with another storage type.
    pub fn dtype(dtype: DataType) -> Self {
        Self {
            dtype,
            ..Self::default()
        }
    }
}

impl Volume {
    /// Writes `.nii` or `.nii.gz` (by extension) as float32 little-endian; see
    /// [`Volume::write_with`].
    pub fn write(&self, path: impl AsRef<Path>) -> Result<(), NiftiError> {
        self.write_with(path, WriteOptions::default())
    }

    /// Writes a single-file NIfTI-1. The original header's non-geometric fields are kept; dims,
    /// datatype, pixdim (= spacing), units (mm), sform (from the affine; code kept, else 2
    /// "aligned") and qform (the same affine when it has no shear; code kept, else 0) are
    /// rebuilt. Integer dtypes round values and reject ones out of range.
    ///
    /// The file is written under a temporary name in the same folder and renamed into place
    /// ([`medddpm_atomic::write_with`]), so an interrupted run never leaves a half-written
    /// output behind.
    pub fn write_with(&self, path: impl AsRef<Path>, opts: WriteOptions) -> Result<(), NiftiError> {
        let path = path.as_ref();
        let lower = path.to_string_lossy().to_ascii_lowercase();
        let gzip = if lower.ends_with(".nii.gz") {
            true
        } else if lower.ends_with(".nii") {
            false
        } else {
            return Err(NiftiError::UnsupportedExtension {
                path: path.to_path_buf(),
            });
        };
        if self.dims.iter().any(|&d| d > i16::MAX as usize) {
            return Err(NiftiError::GridTooLarge {
                path: path.to_path_buf(),
                dims: self.dims,
            });
        }
        let header = self.output_header(opts.dtype).to_bytes(opts.endian);
        let payload = encode(&self.data, opts.dtype, opts.endian).map_err(|value| {
            NiftiError::ValueOutOfRange {
                path: path.to_path_buf(),
                value,
                dtype: opts.dtype,
            }
        })?;
        let io_err = |source| NiftiError::Io {
            path: path.to_path_buf(),
            source,
        };
        medddpm_atomic::write_with(path, |file: &mut File| {
            let parts = [
                &header[..],
                &[0u8; NIFTI1_VOX_OFFSET - NIFTI1_HEADER_SIZE],
                &payload,
            ];
            if gzip {
                let mut w = GzEncoder::new(BufWriter::new(file), Compression::default());
                parts.iter().try_for_each(|p| w.write_all(p))?;
                w.finish()?.flush()
            } else {
                let mut w = BufWriter::new(file);
                parts.iter().try_for_each(|p| w.write_all(p))?;
                w.flush()
            }
        })
        .map_err(io_err)
    }

    /// The header written for this volume.
    fn output_header(&self, dtype: DataType) -> NiftiHeader {
        let mut h = self.header.clone();
        h.sizeof_hdr = NIFTI1_HEADER_SIZE as i32;
        h.magic = *b"n+1\0";
        h.dim = [3, 1, 1, 1, 1, 1, 1, 1];
        for a in 0..3 {
            h.dim[a + 1] = self.dims[a] as i16; // checked <= i16::MAX by the caller
            h.pixdim[a + 1] = self.spacing[a] as f32;
        }
        h.pixdim[4..].fill(0.0);
        h.datatype = dtype.code();
        h.bitpix = (dtype.size() * 8) as i16;
        h.vox_offset = NIFTI1_VOX_OFFSET as f32;
        h.scl_slope = 1.0;
        h.scl_inter = 0.0;
        h.cal_min = 0.0;
        h.cal_max = 0.0;
        h.glmin = 0;
        h.glmax = 0;
        h.xyzt_units = (h.xyzt_units & 0b0011_1000) | 2; // spatial mm, keep time units
        let a = &self.affine;
        let row = |r: usize| a[r].map(|x| x as f32);
        (h.srow_x, h.srow_y, h.srow_z) = (row(0), row(1), row(2));
        if h.sform_code <= 0 {
            h.sform_code = 2;
        }
        match affine_to_quaternion(a) {
            Some([b, c, d, qfac]) => {
                (h.quatern_b, h.quatern_c, h.quatern_d) = (b as f32, c as f32, d as f32);
                (h.qoffset_x, h.qoffset_y, h.qoffset_z) =
                    (a[0][3] as f32, a[1][3] as f32, a[2][3] as f32);
                h.pixdim[0] = qfac as f32;
                h.qform_code = h.qform_code.max(0);
            }
            None => {
                (h.quatern_b, h.quatern_c, h.quatern_d) = (0.0, 0.0, 0.0);
                h.pixdim[0] = 1.0;
                h.qform_code = 0;
            }
        }
        h
    }
}

/// Encodes values; `Err(value)` for the first one an integer type cannot hold.
fn encode(data: &[f32], dtype: DataType, endian: Endian) -> Result<Vec<u8>, f32> {
    let mut out = Vec::with_capacity(data.len() * dtype.size());
    macro_rules! put {
        ($x:expr) => {
            match endian {
                Endian::Little => out.extend_from_slice(&$x.to_le_bytes()),
                Endian::Big => out.extend_from_slice(&$x.to_be_bytes()),
            }
        };
    }
    let (lo, hi) = dtype.int_range();
    for &v in data {
        let r = v.round() as f64;
        if dtype.is_integer() && !(r >= lo && r <= hi) {
            return Err(v);
        }
        match dtype {
            DataType::U8 => out.push(r as u8),
            DataType::I8 => out.push(r as i8 as u8),
            DataType::I16 => put!(r as i16),
            DataType::U16 => put!(r as u16),
            DataType::I32 => put!(r as i32),
            DataType::U32 => put!(r as u32),
            DataType::I64 => put!(r as i64),
            DataType::U64 => put!(r as u64),
            DataType::F32 => put!(v),
            DataType::F64 => put!(v as f64),
        }
    }
    Ok(out)
}
