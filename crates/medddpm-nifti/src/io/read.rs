//! Reading NIfTI-1: inflating gzip within the header's claim, parsing the header, finding the
//! `.img` of a pair, and decoding and scaling the voxels.

use std::io::Read;
use std::path::{Path, PathBuf};

use flate2::read::MultiGzDecoder;

use crate::header::{detect, SizeofHdr, NIFTI1_HEADER_SIZE};
use crate::{DataType, Endian, NiftiError, NiftiHeader, Volume};

/// Reads a whole file, inflating it when it starts with the gzip magic (whatever its name).
/// Inflation stops after `limit(first bytes)` bytes, the length the file's own header claims
/// (`limit` sees the first [`NIFTI1_HEADER_SIZE`] inflated bytes, or fewer if the stream is
/// shorter): a small volume followed by gigabytes of compressed zeros (a gzip bomb) costs only
/// what the header says.
fn read_bytes(path: &Path, limit: impl Fn(&[u8]) -> Option<u64>) -> Result<Vec<u8>, NiftiError> {
    let raw = std::fs::read(path).map_err(|source| NiftiError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    inflate(raw, path, limit)
}

/// The most bytes one compressed byte of a deflate stream inflates to (its longest match, 258
/// bytes, in under 2 bits; 1032:1 is the format's known bound).
const MAX_DEFLATE_RATIO: u64 = 1032;

/// [`read_bytes`] after the file is read: `raw` itself, or inflated when gzip.
fn inflate(
    raw: Vec<u8>,
    path: &Path,
    limit: impl Fn(&[u8]) -> Option<u64>,
) -> Result<Vec<u8>, NiftiError> {
    if raw.len() < 2 || raw[..2] != [0x1f, 0x8b] {
        return Ok(raw);
    }
    let gzip_error = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => NiftiError::TruncatedGzip {
            path: path.to_path_buf(),
        },
        _ => NiftiError::CorruptGzip {
            path: path.to_path_buf(),
            source: e,
        },
    };
    let mut decoder = MultiGzDecoder::new(&raw[..]);
    let mut out = Vec::with_capacity(raw.len().saturating_mul(4).min(1 << 30));
    (&mut decoder)
        .take(NIFTI1_HEADER_SIZE as u64)
        .read_to_end(&mut out)
        .map_err(gzip_error)?;
    // Deflate gives at most 1032 bytes for one compressed byte: a claim beyond that is refused
    // before anything more is inflated (a 32767^3 claim over 512 MiB of zeros inflated 596 MB
    // before the data ran out).
    let claim = limit(&out).unwrap_or(u64::MAX);
    let possible = (raw.len() as u64).saturating_mul(MAX_DEFLATE_RATIO);
    if claim != u64::MAX && claim > possible {
        return Err(NiftiError::ClaimTooLarge {
            path: path.to_path_buf(),
            claimed: claim,
            compressed: raw.len() as u64,
            possible,
        });
    }
    // One byte past the claim: a stream of exactly the claimed length is then read to its end,
    // so its CRC is checked.
    let rest = claim.saturating_sub(out.len() as u64).saturating_add(1);
    decoder
        .take(rest)
        .read_to_end(&mut out)
        .map_err(gzip_error)?;
    Ok(out)
}

/// The bytes a single-file NIfTI-1 claims (voxel offset and voxel data), or only its header for
/// the header of a pair; `None` when the header cannot say (the reader then reports why).
fn claimed_len(prefix: &[u8]) -> Option<u64> {
    let first4: [u8; 4] = prefix.get(..4)?.try_into().ok()?;
    let SizeofHdr::Nifti1(endian) = detect(&first4) else {
        return None;
    };
    if prefix.len() < NIFTI1_HEADER_SIZE {
        return None;
    }
    let h = NiftiHeader::parse(prefix, endian);
    if &h.magic == b"ni1\0" {
        return Some(NIFTI1_HEADER_SIZE as u64);
    }
    image_len(&h)
}

/// Voxel offset plus voxel bytes that a header claims.
fn image_len(h: &NiftiHeader) -> Option<u64> {
    let size = DataType::from_code(h.datatype)?.size() as u64;
    let voxels = h.dim[1..4]
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(u64::try_from(d).ok()?))?;
    let offset = h.vox_offset;
    let offset = if offset.is_finite() && offset >= 0.0 {
        offset as u64
    } else {
        0
    };
    offset.checked_add(voxels.checked_mul(size)?)
}

/// `path` without its NIfTI/Analyze suffix, for finding the other half of a pair.
fn stem(path: &Path) -> Option<String> {
    let s = path.to_str()?;
    let lower = s.to_ascii_lowercase();
    [".nii.gz", ".hdr.gz", ".img.gz", ".nii", ".hdr", ".img"]
        .iter()
        .find(|suf| lower.ends_with(*suf))
        .map(|suf| s[..s.len() - suf.len()].to_string())
}

/// The file holding the header: the `.hdr` partner when given an `.img`.
fn header_path(path: &Path) -> PathBuf {
    let lower = path.to_string_lossy().to_ascii_lowercase();
    if lower.ends_with(".img") || lower.ends_with(".img.gz") {
        if let Some(s) = stem(path) {
            for cand in [format!("{s}.hdr"), format!("{s}.hdr.gz")] {
                if Path::new(&cand).exists() {
                    return cand.into();
                }
            }
        }
    }
    path.to_path_buf()
}

impl Volume {
    /// Reads a NIfTI-1 file: `.nii`, gzip-compressed (detected by content, not name), either
    /// byte order, or the header of a `.hdr`/`.img` pair. Scaling (`scl_slope`, `scl_inter`)
    /// is applied. Every malformed input is a [`NiftiError`] naming the file, never a panic.
    pub fn read(path: impl AsRef<Path>) -> Result<Self, NiftiError> {
        let path = header_path(path.as_ref());
        let path = path.as_path();
        let bytes = read_bytes(path, claimed_len)?;
        Self::parse(bytes, path, |header| {
            let img = find_image(path)?;
            let b = read_bytes(&img, |_| image_len(header))?;
            Ok((img, b))
        })
    }

    /// Reads a single-file NIfTI-1 (`.nii`, or gzip-compressed) from memory, as
    /// [`Volume::read`] reads a file; `name` stands for the file in errors. The header of a
    /// `.hdr`/`.img` pair is an error here (its voxels live in another file).
    pub fn from_bytes(raw: Vec<u8>, name: &Path) -> Result<Self, NiftiError> {
        let bytes = inflate(raw, name, claimed_len)?;
        Self::parse(bytes, name, |_| {
            Err(NiftiError::Io {
                path: name.to_path_buf(),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "the header of a .hdr/.img pair: read it from its file, beside its .img",
                ),
            })
        })
    }

    /// The header and voxels in `bytes` (inflated); `pair_image` gives the `.img` partner's
    /// path and bytes when the header says the voxels live there.
    fn parse(
        bytes: Vec<u8>,
        path: &Path,
        pair_image: impl FnOnce(&NiftiHeader) -> Result<(PathBuf, Vec<u8>), NiftiError>,
    ) -> Result<Self, NiftiError> {
        let (header, endian, pair) = parse_header(&bytes, path)?;
        let dims = volume_dims(path, &header)?;
        let dtype =
            DataType::from_code(header.datatype).ok_or(NiftiError::UnsupportedDatatype {
                path: path.to_path_buf(),
                code: header.datatype,
            })?;

        // Voxel bytes live after vox_offset in this file, or in the .img partner.
        let (data_path, data_bytes, min_offset) = if pair {
            let (img, b) = pair_image(&header)?;
            (img, b, 0.0)
        } else {
            (path.to_path_buf(), bytes, NIFTI1_HEADER_SIZE as f32)
        };
        let vo = header.vox_offset;
        if !(vo.is_finite() && vo >= min_offset && vo.fract() == 0.0)
            || vo as usize > data_bytes.len()
        {
            return Err(NiftiError::BadVoxOffset {
                path: data_path,
                vox_offset: vo,
                file_len: data_bytes.len(),
            });
        }
        let offset = vo as usize;
        let n = dims[0] * dims[1] * dims[2];
        let expected = n.saturating_mul(dtype.size());
        let found = data_bytes.len() - offset;
        if found < expected {
            return Err(NiftiError::TruncatedData {
                path: data_path,
                offset,
                expected,
                found,
            });
        }
        let mut data = decode(&data_bytes[offset..offset + expected], dtype, endian);
        apply_scaling(&mut data, header.scl_slope, header.scl_inter);
        Ok(Volume::from_header(header, dims, data, dtype, endian))
    }
}

/// The header at the start of `bytes`, its byte order, and whether it is the header of a
/// `.hdr`/`.img` pair (magic `ni1`) rather than a single file (`n+1`).
fn parse_header(bytes: &[u8], path: &Path) -> Result<(NiftiHeader, Endian, bool), NiftiError> {
    let truncated = || NiftiError::TruncatedHeader {
        path: path.to_path_buf(),
        len: bytes.len(),
    };
    let first4: [u8; 4] = bytes
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(truncated)?;
    let endian = match detect(&first4) {
        SizeofHdr::Nifti1(e) => e,
        SizeofHdr::Nifti2 => {
            return Err(NiftiError::UnsupportedNifti2 {
                path: path.to_path_buf(),
            })
        }
        SizeofHdr::Unknown(sizeof_hdr) => {
            return Err(NiftiError::NotNifti {
                path: path.to_path_buf(),
                sizeof_hdr,
            })
        }
    };
    if bytes.len() < NIFTI1_HEADER_SIZE {
        return Err(truncated());
    }
    let header = NiftiHeader::parse(bytes, endian);
    let pair = match &header.magic {
        b"n+1\0" => false,
        b"ni1\0" => true,
        found => {
            return Err(NiftiError::BadMagic {
                path: path.to_path_buf(),
                found: *found,
            })
        }
    };
    Ok((header, endian, pair))
}

/// dims of a 3-D volume (or 4-D with one frame), validated.
fn volume_dims(path: &Path, h: &NiftiHeader) -> Result<[usize; 3], NiftiError> {
    let nd = h.dim[0];
    let stored = || {
        let n = (nd.clamp(0, 7) as usize) + 1;
        h.dim[..n].iter().map(|&d| d as i64).collect()
    };
    let ok = (nd == 3 || (nd == 4 && h.dim[4] == 1)) && h.dim[1..4].iter().all(|&d| d > 0);
    if !ok {
        return Err(NiftiError::UnsupportedDims {
            path: path.to_path_buf(),
            dims: stored(),
        });
    }
    // Voxel sizes end up in every output written on this grid and in the pictures' aspect.
    let spacing = [h.pixdim[1], h.pixdim[2], h.pixdim[3]];
    if !spacing.iter().all(|s| s.is_finite() && *s > 0.0) {
        return Err(NiftiError::BadSpacing {
            path: path.to_path_buf(),
            spacing,
        });
    }
    Ok([h.dim[1] as usize, h.dim[2] as usize, h.dim[3] as usize])
}

/// The `.img` (or `.img.gz`) half of a header/image pair.
fn find_image(hdr: &Path) -> Result<PathBuf, NiftiError> {
    let s = stem(hdr).unwrap_or_else(|| hdr.to_string_lossy().into_owned());
    for cand in [format!("{s}.img"), format!("{s}.img.gz")] {
        if Path::new(&cand).exists() {
            return Ok(cand.into());
        }
    }
    Err(NiftiError::Io {
        path: format!("{s}.img").into(),
        source: std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!(
                "image file of header/image pair {} not found",
                hdr.display()
            ),
        ),
    })
}

fn decode(b: &[u8], dtype: DataType, endian: Endian) -> Vec<f32> {
    macro_rules! conv {
        ($t:ty, $n:expr) => {
            b.chunks_exact($n)
                .map(|c| {
                    let a: [u8; $n] = c.try_into().expect("chunk size");
                    (match endian {
                        Endian::Little => <$t>::from_le_bytes(a),
                        Endian::Big => <$t>::from_be_bytes(a),
                    }) as f32
                })
                .collect()
        };
    }
    match dtype {
        DataType::U8 => b.iter().map(|&x| x as f32).collect(),
        DataType::I8 => b.iter().map(|&x| x as i8 as f32).collect(),
        DataType::I16 => conv!(i16, 2),
        DataType::U16 => conv!(u16, 2),
        DataType::I32 => conv!(i32, 4),
        DataType::U32 => conv!(u32, 4),
        DataType::I64 => conv!(i64, 8),
        DataType::U64 => conv!(u64, 8),
        DataType::F32 => conv!(f32, 4),
        DataType::F64 => conv!(f64, 8),
    }
}

/// Applies `x * slope + inter` unless the slope is 0/NaN (NIfTI: "no scaling") or the pair is
/// the identity (skipped so float data round-trips bit for bit).
fn apply_scaling(data: &mut [f32], slope: f32, inter: f32) {
    if slope == 0.0 || !slope.is_finite() {
        return;
    }
    let inter = if inter.is_finite() { inter } else { 0.0 };
    if slope == 1.0 && inter == 0.0 {
        return;
    }
    let (s, c) = (slope as f64, inter as f64);
    data.iter_mut()
        .for_each(|x| *x = (*x as f64 * s + c) as f32);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bound itself (the integration test `a_gzip_bomb_...` shows the volume still reads):
    /// a 4x3x2 float volume (352-byte offset, 96 voxel bytes) followed by 64 MiB of zeros in one
    /// gzip stream is inflated to one byte past what its header claims.
    #[test]
    fn inflation_stops_one_byte_past_the_headers_claim() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.nii");
        let affine = [
            [1.0, 0.0, 0.0, 0.0],
            [0.0, 1.0, 0.0, 0.0],
            [0.0, 0.0, 1.0, 0.0],
            [0.0, 0.0, 0.0, 1.0],
        ];
        Volume::new([4, 3, 2], (0..24).map(|x| x as f32).collect(), affine)
            .unwrap()
            .write(&path)
            .unwrap();
        let raw = std::fs::read(&path).unwrap();
        assert_eq!(raw.len(), 352 + 96);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&raw).unwrap();
        gz.write_all(&vec![0u8; 64 << 20]).unwrap();
        let bomb = gz.finish().unwrap();
        let inflated = inflate(bomb, &path, claimed_len).unwrap();
        assert_eq!(inflated.len(), 352 + 96 + 1);
        assert_eq!(&inflated[..raw.len()], &raw[..]);
    }

    /// A header that claims far more than its compressed stream can hold (32767^3 float voxels
    /// over 16 MiB of zeros) is refused before the zeros are inflated: bytes that are no gzip
    /// follow them, which inflating would have met and reported as a corrupt stream.
    #[test]
    fn a_claim_beyond_what_the_stream_can_hold_is_refused_before_inflating() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.nii");
        Volume::new([2, 2, 2], vec![0.0; 8], crate::IDENTITY)
            .unwrap()
            .write(&path)
            .unwrap();
        let mut raw = std::fs::read(&path).unwrap();
        for (i, d) in [32767i16, 32767, 32767].iter().enumerate() {
            let at = 42 + 2 * i; // dim[1..4], little-endian
            raw[at..at + 2].copy_from_slice(&d.to_le_bytes());
        }
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&raw[..352]).unwrap();
        gz.write_all(&vec![0u8; 16 << 20]).unwrap();
        let mut bomb = gz.finish().unwrap();
        bomb.extend_from_slice(b"not gzip: inflating this far would fail here");
        let compressed = bomb.len() as u64;
        match inflate(bomb, &path, claimed_len) {
            Err(NiftiError::ClaimTooLarge {
                claimed, possible, ..
            }) => {
                assert_eq!(claimed, 352 + 4 * 32767u64.pow(3));
                assert_eq!(possible, compressed * MAX_DEFLATE_RATIO);
            }
            other => panic!("{:?}", other.map(|b| b.len())),
        }
    }
}
