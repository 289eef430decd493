//! Layout and content errors of the data set on small synthetic files: each error must name
//! the file(s) at fault, and grid policies must do what they say.

use std::path::{Path, PathBuf};

use medddpm_nifti::{Affine, DataType, Volume, WriteOptions, IDENTITY};
use medddpm_train::data::{DataConfig, DataError, DataSource, GridPolicy, NiftiDataset};

fn write_mask(path: &Path, dims: [usize; 3], label: impl Fn(usize) -> f32) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let n = dims.iter().product();
    Volume::new(dims, (0..n).map(label).collect(), IDENTITY)
        .unwrap()
        .write_with(path, WriteOptions::dtype(DataType::U8))
        .unwrap();
}

fn write_image(path: &Path, dims: [usize; 3], affine: Affine) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let n = dims.iter().product();
    Volume::new(dims, (0..n).map(|x| x as f32).collect(), affine)
        .unwrap()
        .write(path)
        .unwrap();
}

/// (file name, mask dims, image dims); `None` leaves that file out.
type Pair<'a> = (&'a str, Option<[usize; 3]>, Option<[usize; 3]>);

/// A whole-head layout in `root` with the given pairs, on an 8^3 model grid.
fn whole_head(root: &Path, pairs: &[Pair]) -> DataConfig {
    for (name, m, i) in pairs {
        if let Some(d) = m {
            write_mask(&root.join("mask").join(name), *d, |x| (x % 3) as f32);
        }
        if let Some(d) = i {
            write_image(&root.join("image").join(name), *d, IDENTITY);
        }
    }
    std::fs::create_dir_all(root.join("mask")).unwrap();
    std::fs::create_dir_all(root.join("image")).unwrap();
    let mut cfg = DataConfig::new(DataSource::WholeHead {
        mask_dir: root.join("mask"),
        image_dir: root.join("image"),
    });
    cfg.grid = [8, 8, 8];
    cfg
}

fn shows(err: &DataError, p: &Path) -> bool {
    err.to_string().contains(&p.display().to_string())
}

#[test]
fn unpaired_files_are_named() {
    let (_serial, tmp) = crate::common::serial_tempdir();
    let r = tmp.path();
    let d = Some([8, 8, 8]);
    let cfg = whole_head(r, &[("a.nii.gz", d, d), ("b.nii.gz", d, None)]);
    let err = NiftiDataset::open(&cfg).unwrap_err();
    assert!(matches!(err, DataError::Unpaired { .. }), "{err:?}");
    assert!(shows(&err, &r.join("mask/b.nii.gz")), "{err}");
    assert!(shows(&err, &r.join("image")), "{err}");

    let tmp = tempfile::tempdir().unwrap();
    let r = tmp.path();
    let cfg = whole_head(r, &[("a.nii.gz", d, d), ("c.nii.gz", None, d)]);
    let err = NiftiDataset::open(&cfg).unwrap_err();
    assert!(shows(&err, &r.join("image/c.nii.gz")), "{err}");
    assert!(shows(&err, &r.join("mask")), "{err}");
}

#[test]
fn nii_and_nii_gz_pair_but_duplicates_are_refused() {
    let (_serial, tmp) = crate::common::serial_tempdir();
    let r = tmp.path();
    let d = Some([8, 8, 8]);
    let cfg = whole_head(r, &[("a.nii", d, None), ("a.nii.gz", None, d)]);
    std::fs::write(r.join("image/README.txt"), "ignored").unwrap();
    let ds = NiftiDataset::open(&cfg).unwrap();
    assert_eq!(ds.ids(), vec!["a".to_string()]);
    write_mask(&r.join("mask/a.nii.gz"), [8, 8, 8], |_| 0.0);
    let err = NiftiDataset::open(&cfg).unwrap_err();
    assert!(matches!(err, DataError::DuplicateId { .. }), "{err:?}");
}

#[test]
fn missing_and_empty_folders_are_named() {
    let (_serial, tmp) = crate::common::serial_tempdir();
    let r = tmp.path();
    let cfg = DataConfig::new(DataSource::WholeHead {
        mask_dir: r.join("masks"),
        image_dir: r.join("images"),
    });
    let err = NiftiDataset::open(&cfg).unwrap_err();
    assert!(matches!(err, DataError::MissingFolder { .. }), "{err:?}");
    assert!(shows(&err, &r.join("masks")), "{err}");
    std::fs::create_dir_all(r.join("masks")).unwrap();
    let err = NiftiDataset::open(&cfg).unwrap_err();
    assert!(matches!(err, DataError::EmptyFolder { .. }), "{err:?}");
    assert!(shows(&err, &r.join("masks")), "{err}");
}

#[test]
fn non_finite_image_voxels_are_named_with_their_file() {
    let (_serial, tmp) = crate::common::serial_tempdir();
    let r = tmp.path();
    let d = Some([8, 8, 8]);
    let cfg = whole_head(r, &[("a.nii.gz", d, d), ("b.nii.gz", d, None)]);
    let bad = r.join("image/b.nii.gz");
    let mut values: Vec<f32> = (0..512).map(|x| x as f32).collect();
    values[10] = f32::NAN;
    values[20] = f32::INFINITY;
    Volume::new([8, 8, 8], values, IDENTITY)
        .unwrap()
        .write(&bad)
        .unwrap();
    let ds = NiftiDataset::open(&cfg).unwrap();
    assert!(ds.get(0).is_ok());
    let err = ds.get(1).unwrap_err();
    assert!(
        matches!(
            err,
            DataError::NonFinite {
                count: 2,
                index: 10,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(shows(&err, &bad), "{err}");
}

#[test]
fn exact_refuses_a_mis_sized_file() {
    let (_serial, tmp) = crate::common::serial_tempdir();
    let r = tmp.path();
    let d = Some([10, 9, 8]);
    let mut cfg = whole_head(r, &[("a.nii.gz", d, d)]);
    cfg.grid_policy = GridPolicy::Exact;
    let ds = NiftiDataset::open(&cfg).unwrap();
    let err = ds.get(0).unwrap_err();
    assert!(
        matches!(
            err,
            DataError::WrongGrid {
                found: [10, 9, 8],
                expected: [8, 8, 8],
                ..
            }
        ),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(shows(&err, &r.join("image/a.nii.gz")), "{msg}");
    assert!(
        msg.contains("[10, 9, 8]") && msg.contains("[8, 8, 8]"),
        "{msg}"
    );
    let err = ds.get(1).unwrap_err();
    assert!(
        matches!(err, DataError::IndexOutOfRange { index: 1, len: 1 }),
        "{err:?}"
    );
}

#[test]
fn mask_image_grid_mismatch_names_both_files() {
    let (_serial, tmp) = crate::common::serial_tempdir();
    let r = tmp.path();
    let cfg = whole_head(r, &[("a.nii.gz", Some([8, 8, 8]), Some([8, 8, 9]))]);
    let err = NiftiDataset::open(&cfg).unwrap().get(0).unwrap_err();
    assert!(shows(&err, &r.join("mask/a.nii.gz")), "{err}");
    assert!(shows(&err, &r.join("image/a.nii.gz")), "{err}");

    // Same dims, shifted origin: still not one grid.
    let mut shifted = IDENTITY;
    shifted[0][3] = 3.0;
    write_image(&r.join("image/a.nii.gz"), [8, 8, 8], shifted);
    let err = NiftiDataset::open(&cfg).unwrap().get(0).unwrap_err();
    assert!(shows(&err, &r.join("mask/a.nii.gz")) && shows(&err, &r.join("image/a.nii.gz")));
}

#[test]
fn unknown_label_names_file_and_value() {
    let (_serial, tmp) = crate::common::serial_tempdir();
    let r = tmp.path();
    let cfg = whole_head(r, &[("a.nii.gz", None, Some([8, 8, 8]))]);
    write_mask(&r.join("mask/a.nii.gz"), [8, 8, 8], |x| {
        if x == 5 {
            7.0
        } else {
            1.0
        }
    });
    let err = NiftiDataset::open(&cfg).unwrap().get(0).unwrap_err();
    let msg = err.to_string();
    assert!(
        shows(&err, &r.join("mask/a.nii.gz")) && msg.contains("value 7"),
        "{msg}"
    );
}

#[test]
fn crop_or_pad_and_resize_reach_the_grid() {
    let (_serial, tmp) = crate::common::serial_tempdir();
    let r = tmp.path();
    let (big, small) = (Some([10, 10, 10]), Some([6, 6, 6]));
    let mut cfg = whole_head(
        r,
        &[("big.nii.gz", big, big), ("small.nii.gz", small, small)],
    );
    cfg.normalization = medddpm_nifti::Normalization::VolumeMinMax;
    for policy in [GridPolicy::CropOrPad, GridPolicy::Resize] {
        cfg.grid_policy = policy;
        let ds = NiftiDataset::open(&cfg).unwrap();
        assert_eq!(ds.ids(), vec!["big".to_string(), "small".to_string()]);
        for i in 0..2 {
            let ex = ds.get(i).unwrap();
            assert_eq!(ex.shape, [8, 8, 8]);
            assert_eq!((ex.image.len(), ex.cond.len()), (512, 1024));
            assert!(
                ex.image.iter().all(|v| (-1.0..=1.0).contains(v)),
                "{policy:?}"
            );
            assert!(ex.cond.iter().all(|&v| v == -1.0 || v == 1.0), "{policy:?}");
        }
    }
    // Padding: the small image's corner is padding (its minimum -> -1), its mask label 0.
    cfg.grid_policy = GridPolicy::CropOrPad;
    let ex = NiftiDataset::open(&cfg).unwrap().get(1).unwrap();
    assert_eq!(ex.image[0], -1.0);
    assert_eq!((ex.cond[0], ex.cond[512]), (-1.0, -1.0));
}

#[test]
fn brats_names_unpaired_and_badly_named_files() {
    let (_serial, tmp) = crate::common::serial_tempdir();
    let root: PathBuf = tmp.path().join("brats");
    let d = [8, 8, 8];
    write_mask(&root.join("seg/c1_seg.nii.gz"), d, |_| 4.0);
    for m in ["t1", "t1ce", "t2", "flair"] {
        write_image(&root.join(m).join(format!("c1_{m}.nii.gz")), d, IDENTITY);
    }
    let mut cfg = DataConfig::new(DataSource::Brats { root: root.clone() });
    cfg.grid = d;
    let ds = NiftiDataset::open(&cfg).unwrap();
    assert_eq!(ds.ids(), vec!["c1".to_string()]);
    assert_eq!(ds.get(0).unwrap().image.len(), 4 * 512);

    write_image(&root.join("t2/c2_t2.nii.gz"), d, IDENTITY);
    let err = NiftiDataset::open(&cfg).unwrap_err();
    assert!(matches!(err, DataError::Unpaired { .. }), "{err:?}");
    assert!(shows(&err, &root.join("t2/c2_t2.nii.gz")), "{err}");
    std::fs::remove_file(root.join("t2/c2_t2.nii.gz")).unwrap();

    write_image(&root.join("t1/c3_t2.nii.gz"), d, IDENTITY);
    let err = NiftiDataset::open(&cfg).unwrap_err();
    assert!(matches!(err, DataError::BadBratsName { .. }), "{err:?}");
    assert!(shows(&err, &root.join("t1/c3_t2.nii.gz")), "{err}");
}

#[test]
fn concurrent_gets_share_the_cache() {
    let (_serial, tmp) = crate::common::serial_tempdir();
    let d = Some([8, 8, 8]);
    let cfg = whole_head(tmp.path(), &[("a.nii.gz", d, d), ("b.nii.gz", d, d)]);
    let ds = NiftiDataset::open(&cfg).unwrap();
    let first = ds.get(1).unwrap();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for i in 0..2 {
                    assert_eq!(ds.get(i).unwrap().id, ["a", "b"][i]);
                }
            });
        }
    });
    // Cached: deleting the files does not matter any more.
    std::fs::remove_dir_all(tmp.path().join("image")).unwrap();
    assert_eq!(ds.get(1).unwrap(), first);
}
