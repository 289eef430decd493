//! Malformed inputs: each gives a typed error whose message names the file, never a panic.

use std::path::{Path, PathBuf};

use crate::common::{dataset, diag_affine};
use medddpm_nifti::{ensure_same_grid, DataType, NiftiError, Volume, WriteOptions};

/// A small valid `.nii` in `dir`, returned with its bytes.
fn valid_nii(dir: &Path) -> (PathBuf, Vec<u8>) {
    let v = Volume::new(
        [4, 3, 2],
        (0..24).map(|x| x as f32).collect(),
        diag_affine([1.0; 3], [0.0; 3]),
    )
    .unwrap();
    let p = written(dir, "valid.nii", &v);
    let raw = std::fs::read(&p).unwrap();
    (p, raw)
}

/// `v` written as `dir/name`.
fn written(dir: &Path, name: &str, v: &Volume) -> PathBuf {
    let p = dir.join(name);
    v.write(&p).unwrap();
    p
}

/// Writes `bytes` as `dir/name` and reads it, expecting an error that names the file.
fn read_err(dir: &Path, name: &str, bytes: &[u8]) -> NiftiError {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    let err = Volume::read(&p).expect_err(name);
    assert!(
        err.to_string().contains(name),
        "message lacks file name: {err}"
    );
    err
}

#[test]
fn truncated_gzip_stream() {
    let dir = tempfile::tempdir().unwrap();
    let v = Volume::read(dataset("medddpm-samples/whole_head/mask/sample_3.nii.gz")).unwrap();
    let full = dir.path().join("full.nii.gz");
    v.write_with(&full, WriteOptions::dtype(DataType::U8))
        .unwrap();
    let raw = std::fs::read(&full).unwrap();
    let err = read_err(dir.path(), "cut.nii.gz", &raw[..raw.len() / 2]);
    assert!(matches!(err, NiftiError::TruncatedGzip { .. }), "{err:?}");
    assert!(err.to_string().contains("truncated"));
}

#[test]
fn corrupt_gzip_stream() {
    let dir = tempfile::tempdir().unwrap();
    let v = Volume::new([8, 8, 8], vec![3.0; 512], diag_affine([1.0; 3], [0.0; 3])).unwrap();
    let full = written(dir.path(), "full.nii.gz", &v);
    let mut raw = std::fs::read(&full).unwrap();
    let n = raw.len();
    raw[n - 8] ^= 0xff; // break the CRC32 in the trailer
    let err = read_err(dir.path(), "crc.nii.gz", &raw);
    assert!(matches!(err, NiftiError::CorruptGzip { .. }), "{err:?}");
}

#[test]
fn gzip_is_detected_by_content_not_name() {
    let dir = tempfile::tempdir().unwrap();
    let v = Volume::new([2, 2, 2], vec![1.5; 8], diag_affine([1.0; 3], [0.0; 3])).unwrap();
    let gz = written(dir.path(), "real.nii.gz", &v);
    let misnamed = dir.path().join("misnamed.nii");
    std::fs::copy(&gz, &misnamed).unwrap();
    assert_eq!(Volume::read(&misnamed).unwrap().data(), v.data());
}

#[test]
fn truncated_header_and_data() {
    let dir = tempfile::tempdir().unwrap();
    let (_, raw) = valid_nii(dir.path());
    let err = read_err(dir.path(), "short_hdr.nii", &raw[..200]);
    assert!(
        matches!(err, NiftiError::TruncatedHeader { len: 200, .. }),
        "{err:?}"
    );
    let err = read_err(dir.path(), "tiny.nii", &raw[..2]);
    assert!(matches!(err, NiftiError::TruncatedHeader { .. }), "{err:?}");
    let err = read_err(dir.path(), "short_data.nii", &raw[..raw.len() - 5]);
    assert!(
        matches!(
            err,
            NiftiError::TruncatedData {
                expected: 96,
                found: 91,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn wrong_magic() {
    let dir = tempfile::tempdir().unwrap();
    let (_, mut raw) = valid_nii(dir.path());
    raw[344..348].copy_from_slice(b"xyz\0");
    let err = read_err(dir.path(), "magic.nii", &raw);
    assert!(
        matches!(err, NiftiError::BadMagic { found, .. } if &found == b"xyz\0"),
        "{err:?}"
    );
}

#[test]
fn nifti2_header_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut raw = vec![0u8; 544 + 8];
    raw[..4].copy_from_slice(&540i32.to_le_bytes());
    raw[4..12].copy_from_slice(b"n+2\0\r\n\x1a\n");
    let err = read_err(dir.path(), "two.nii", &raw);
    assert!(
        matches!(err, NiftiError::UnsupportedNifti2 { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("NIfTI-2"));
}

#[test]
fn not_a_nifti_file() {
    let dir = tempfile::tempdir().unwrap();
    let err = read_err(dir.path(), "notes.nii", &[b'x'; 400]);
    assert!(matches!(err, NiftiError::NotNifti { .. }), "{err:?}");
}

#[test]
fn unsupported_datatype_dims_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let (_, raw) = valid_nii(dir.path());

    let mut b = raw.clone();
    b[70..72].copy_from_slice(&32i16.to_le_bytes()); // complex64
    let err = read_err(dir.path(), "complex.nii", &b);
    assert!(
        matches!(err, NiftiError::UnsupportedDatatype { code: 32, .. }),
        "{err:?}"
    );

    let mut b = raw.clone();
    b[40..42].copy_from_slice(&4i16.to_le_bytes());
    b[48..50].copy_from_slice(&2i16.to_le_bytes()); // dim[4] = 2 frames
    let err = read_err(dir.path(), "frames.nii", &b);
    assert!(
        matches!(err, NiftiError::UnsupportedDims { ref dims, .. } if dims == &[4, 4, 3, 2, 2]),
        "{err:?}"
    );

    let mut b = raw.clone();
    b[42..44].copy_from_slice(&0i16.to_le_bytes()); // dim[1] = 0
    let err = read_err(dir.path(), "empty.nii", &b);
    assert!(matches!(err, NiftiError::UnsupportedDims { .. }), "{err:?}");

    for (name, off) in [
        ("far.nii", 1e9f32),
        ("inside.nii", 100.0),
        ("nan.nii", f32::NAN),
    ] {
        let mut b = raw.clone();
        b[108..112].copy_from_slice(&off.to_le_bytes());
        let err = read_err(dir.path(), name, &b);
        assert!(
            matches!(err, NiftiError::BadVoxOffset { .. }),
            "{name}: {err:?}"
        );
    }
}

#[test]
fn missing_file_and_missing_pair_image() {
    let dir = tempfile::tempdir().unwrap();
    let err = Volume::read(dir.path().join("nope.nii.gz")).unwrap_err();
    assert!(matches!(err, NiftiError::Io { .. }) && err.to_string().contains("nope.nii.gz"));
    let (_, mut raw) = valid_nii(dir.path());
    raw[344..348].copy_from_slice(b"ni1\0");
    raw.truncate(348);
    std::fs::write(dir.path().join("lonely.hdr"), raw).unwrap();
    let err = Volume::read(dir.path().join("lonely.hdr")).unwrap_err();
    assert!(
        matches!(err, NiftiError::Io { .. }) && err.to_string().contains("lonely.img"),
        "{err}"
    );
}

#[test]
fn grid_mismatch_names_both_files_and_shapes() {
    let mask_path = dataset("medddpm-samples/whole_head/mask/sample_3.nii.gz");
    let image_path = dataset("medddpm-samples/brats2021/t1/BraTS2021_01306_t1.nii.gz");
    let mask = Volume::read(&mask_path).unwrap();
    let image = Volume::read(&image_path).unwrap();
    let err = ensure_same_grid(&mask_path, &mask, &image_path, &image).unwrap_err();
    assert!(matches!(err, NiftiError::GridMismatch { .. }), "{err:?}");
    let msg = err.to_string();
    for part in [
        "sample_3.nii.gz",
        "BraTS2021_01306_t1.nii.gz",
        "[128, 128, 128]",
        "[192, 192, 144]",
    ] {
        assert!(msg.contains(part), "{part} missing from: {msg}");
    }
    // Same dims, shifted origin: still a mismatch, reported as an affine difference.
    assert!(ensure_same_grid(&mask_path, &mask, &mask_path, &mask).is_ok());
    let mut affine = *mask.affine();
    affine[0][3] += 1.5;
    let moved = Volume::new([128; 3], mask.data().to_vec(), affine).unwrap();
    let err = ensure_same_grid(&mask_path, &mask, Path::new("moved.nii"), &moved).unwrap_err();
    assert!(err.to_string().contains("affines differ") && err.to_string().contains("moved.nii"));
}

#[test]
fn write_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let v = Volume::new([2, 1, 1], vec![1.0, 300.0], diag_affine([1.0; 3], [0.0; 3])).unwrap();
    let p = dir.path().join("labels.nii.gz");
    let err = v
        .write_with(&p, WriteOptions::dtype(DataType::U8))
        .unwrap_err();
    assert!(
        matches!(err, NiftiError::ValueOutOfRange { value, .. } if value == 300.0),
        "{err:?}"
    );
    assert!(err.to_string().contains("labels.nii.gz"));
    assert!(!p.exists());

    let err = v.write(dir.path().join("out.mha")).unwrap_err();
    assert!(
        matches!(err, NiftiError::UnsupportedExtension { .. })
            && err.to_string().contains("out.mha")
    );

    let long = Volume::new(
        [40_000, 1, 1],
        vec![0.0; 40_000],
        diag_affine([1.0; 3], [0.0; 3]),
    )
    .unwrap();
    let err = long.write(dir.path().join("long.nii")).unwrap_err();
    assert!(matches!(err, NiftiError::GridTooLarge { .. }) && err.to_string().contains("long.nii"));

    let err = v.write(dir.path().join("no_such_dir/out.nii")).unwrap_err();
    assert!(
        matches!(err, NiftiError::Io { .. }) && err.to_string().contains("out.nii"),
        "{err}"
    );
}

#[test]
fn wrong_data_length_is_an_error() {
    let err = Volume::new([2, 2, 2], vec![0.0; 7], diag_affine([1.0; 3], [0.0; 3])).unwrap_err();
    assert!(matches!(
        err,
        NiftiError::DataLength {
            expected: 8,
            found: 7,
            ..
        }
    ));
}

#[test]
fn a_gzip_bomb_is_inflated_only_as_far_as_its_header_claims() {
    // A valid 4x3x2 volume followed by 64 MiB of zeros in the same gzip stream: the reader
    // stops one byte after the 348 + 4 + 96 bytes the header claims, and the volume reads.
    use flate2::{write::GzEncoder, Compression};
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let (_, raw) = valid_nii(dir.path());
    let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
    gz.write_all(&raw).unwrap();
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..64 {
        gz.write_all(&zeros).unwrap();
    }
    let bomb = gz.finish().unwrap();
    assert!(bomb.len() < 1 << 20, "compresses to {} bytes", bomb.len());
    let p = dir.path().join("bomb.nii.gz");
    std::fs::write(&p, &bomb).unwrap();
    let v = Volume::read(&p).unwrap();
    assert_eq!(v.dims(), [4, 3, 2]);
    assert_eq!(v.data()[23], 23.0);
}

#[test]
fn zero_negative_or_nan_spacing_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_, raw) = valid_nii(dir.path());
    // pixdim[1..4] are the f32s at bytes 80, 84 and 88 (little-endian).
    for (name, value) in [("zero", 0.0f32), ("negative", -1.5), ("nan", f32::NAN)] {
        let mut bytes = raw.clone();
        bytes[84..88].copy_from_slice(&value.to_le_bytes());
        let err = read_err(dir.path(), &format!("spacing-{name}.nii"), &bytes);
        assert!(matches!(err, NiftiError::BadSpacing { .. }), "{err:?}");
        assert!(err.to_string().contains("spacing"), "{err}");
    }
}
