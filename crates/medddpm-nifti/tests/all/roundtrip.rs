//! Write -> read round trips, header/image pairs, scaling and atomic writes.

use std::path::Path;

use crate::common::{affine_diff, dataset, diag_affine};
use medddpm_nifti::{header_affine, DataType, Endian, Volume, WriteOptions};

fn ramp(dims: [usize; 3], affine: [[f64; 4]; 4]) -> Volume {
    let n: usize = dims.iter().product();
    Volume::new(
        dims,
        (0..n).map(|x| (x % 251) as f32 * 0.5 - 7.25).collect(),
        affine,
    )
    .unwrap()
}

fn assert_same(a: &Volume, b: &Volume, what: &str) {
    assert_eq!(a.dims(), b.dims(), "{what}");
    assert_eq!(a.data(), b.data(), "{what}");
    assert!(affine_diff(a.affine(), b.affine()) < 1e-5, "{what}");
    assert_eq!(a.spacing(), b.spacing(), "{what}");
}

/// The shared file `rel` written as `dtype` to `.nii` and `.nii.gz` and read back: the same
/// volume, stored as `dtype`, with the `(sform, qform)` codes `codes`. Returns what was read.
fn real_round_trip(rel: &str, dtype: DataType, codes: (i16, i16)) -> Vec<Volume> {
    let dir = tempfile::tempdir().unwrap();
    let src = Volume::read(dataset(rel)).unwrap();
    ["out.nii", "out.nii.gz"]
        .map(|name| {
            let p = dir.path().join(name);
            src.write_with(&p, WriteOptions::dtype(dtype)).unwrap();
            let back = Volume::read(&p).unwrap();
            assert_same(&src, &back, name);
            assert_eq!(back.dtype(), dtype);
            let h = back.header();
            assert_eq!((h.sform_code, h.qform_code), codes, "{name}");
            back
        })
        .into()
}

#[test]
fn real_image_round_trips_exactly_as_f32() {
    // sform/qform codes carried over from the source (1 / 1), units mm.
    let rel = "medddpm-samples/whole_head/image/sample_3.nii.gz";
    for back in real_round_trip(rel, DataType::F32, (1, 1)) {
        assert_eq!(back.header().xyzt_units & 7, 2);
    }
}

#[test]
fn real_mask_round_trips_as_u8() {
    let rel = "medddpm-samples/whole_head/mask/sample_0.nii.gz";
    real_round_trip(rel, DataType::U8, (2, 0));
}

#[test]
fn big_endian_files_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let v = ramp(
        [5, 4, 3],
        diag_affine([-1.0, -1.0, 1.0], [-24.0, 215.0, 6.0]),
    );
    for (dtype, name) in [
        (DataType::F32, "be_f32.nii"),
        (DataType::I16, "be_i16.nii.gz"),
        (DataType::F64, "be_f64.nii"),
    ] {
        let p = dir.path().join(name);
        let opts = WriteOptions {
            dtype,
            endian: Endian::Big,
        };
        v.write_with(&p, opts).unwrap();
        let raw = std::fs::read(&p).unwrap();
        if !name.ends_with(".gz") {
            assert_eq!(
                &raw[..4],
                &348i32.to_be_bytes(),
                "{name} is big-endian on disk"
            );
        }
        let back = Volume::read(&p).unwrap();
        assert_eq!(back.endian(), Endian::Big);
        assert_eq!(back.dtype(), dtype);
        if dtype == DataType::I16 {
            let rounded: Vec<f32> = v.data().iter().map(|x| x.round()).collect();
            assert_eq!(back.data(), &rounded[..]);
        } else {
            assert_same(&v, &back, name);
        }
    }
}

#[test]
fn fresh_volume_gets_aligned_sform_and_a_valid_qform() {
    let dir = tempfile::tempdir().unwrap();
    // A rotated, flipped grid: qform must encode it exactly as the sform does.
    let affine = [
        [0.0, 0.0, 2.0, 1.0],
        [-1.5, 0.0, 0.0, 2.0],
        [0.0, 1.5, 0.0, 3.0],
        [0.0, 0.0, 0.0, 1.0],
    ];
    let v = ramp([3, 4, 5], affine);
    let p = dir.path().join("fresh.nii.gz");
    v.write(&p).unwrap();
    let back = Volume::read(&p).unwrap();
    assert_eq!(back.header().sform_code, 2);
    assert_eq!(back.spacing(), [1.5, 1.5, 2.0]);
    let mut via_qform = back.header().clone();
    via_qform.sform_code = 0;
    via_qform.qform_code = 1;
    assert!(affine_diff(&header_affine(&via_qform), &affine) < 1e-5);
}

#[test]
fn grid_ops_survive_a_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let seg = Volume::read(dataset(
        "medddpm-samples/brats2021/seg/BraTS2021_01306_seg.nii.gz",
    ))
    .unwrap();
    let small = seg
        .resize([96, 96, 72], medddpm_nifti::Interpolation::Nearest)
        .unwrap();
    let p = dir.path().join("small.nii.gz");
    small
        .write_with(&p, WriteOptions::dtype(DataType::U8))
        .unwrap();
    let back = Volume::read(&p).unwrap();
    assert_same(&small, &back, "resized seg");
    assert_eq!(back.spacing(), [2.0, 2.0, 2.0]);
    // Outer corner of the field of view unchanged: index -0.5 maps to the same world point.
    assert_eq!(back.world([-0.5; 3]), seg.world([-0.5; 3]));
}

#[test]
fn four_d_with_one_frame_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.nii");
    ramp([2, 3, 4], diag_affine([1.0; 3], [0.0; 3]))
        .write(&p)
        .unwrap();
    let mut raw = std::fs::read(&p).unwrap();
    raw[40..42].copy_from_slice(&4i16.to_le_bytes()); // dim[0] = 4, dim[4] already 1
    let q = dir.path().join("a4.nii");
    std::fs::write(&q, raw).unwrap();
    assert_eq!(Volume::read(&q).unwrap().dims(), [2, 3, 4]);
}

#[test]
fn scl_slope_and_inter_are_applied() {
    let dir = tempfile::tempdir().unwrap();
    let v = Volume::new(
        [3, 1, 1],
        vec![0.0, 1.0, 7.0],
        diag_affine([1.0; 3], [0.0; 3]),
    )
    .unwrap();
    let p = dir.path().join("s.nii");
    v.write_with(&p, WriteOptions::dtype(DataType::U8)).unwrap();
    let mut raw = std::fs::read(&p).unwrap();
    raw[112..116].copy_from_slice(&2.0f32.to_le_bytes());
    raw[116..120].copy_from_slice(&(-1.0f32).to_le_bytes());
    std::fs::write(&p, raw).unwrap();
    assert_eq!(Volume::read(&p).unwrap().data(), &[-1.0, 1.0, 13.0]);
}

/// Splits a written `.nii` into an Analyze-style `.hdr`/`.img` pair (magic `ni1`).
fn split_pair(nii: &Path, stem: &Path) {
    let raw = std::fs::read(nii).unwrap();
    let mut hdr = raw[..348].to_vec();
    hdr[108..112].copy_from_slice(&0.0f32.to_le_bytes());
    hdr[344..348].copy_from_slice(b"ni1\0");
    std::fs::write(stem.with_extension("hdr"), hdr).unwrap();
    std::fs::write(stem.with_extension("img"), &raw[352..]).unwrap();
}

#[test]
fn header_image_pairs_are_read_from_either_half() {
    let dir = tempfile::tempdir().unwrap();
    let v = ramp([4, 3, 2], diag_affine([2.0; 3], [1.0, 2.0, 3.0]));
    let nii = dir.path().join("x.nii");
    v.write(&nii).unwrap();
    split_pair(&nii, &dir.path().join("pair"));
    for name in ["pair.hdr", "pair.img"] {
        let back = Volume::read(dir.path().join(name)).unwrap();
        assert_same(&v, &back, name);
    }
}

#[test]
fn overwrite_is_atomic_and_leaves_no_temp_files() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("o.nii.gz");
    let a = ramp([3, 3, 3], diag_affine([1.0; 3], [0.0; 3]));
    a.write(&p).unwrap();
    let b = a.with_data(vec![1.0; 27]).unwrap();
    b.write(&p).unwrap();
    assert_eq!(Volume::read(&p).unwrap().data(), b.data());
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("o.nii.gz")]);
}
