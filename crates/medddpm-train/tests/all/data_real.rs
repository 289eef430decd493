//! The data set over the real sample files in `shared/datasets` (whole-head and BraTS layouts),
//! `list_masks` and `load_condition`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use medddpm_mask::LabelScheme;
use medddpm_nifti::Volume;
use medddpm_train::data::{
    list_masks, load_condition, DataConfig, DataError, DataSource, Example, GridPolicy,
    NiftiDataset,
};

/// The shared `datasets` folder.
fn datasets() -> PathBuf {
    medddpm_testdata::dataset("")
}

fn link(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(src, dst).unwrap();
}

fn distinct(v: &[f32]) -> BTreeSet<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn bits(v: &[f32]) -> BTreeSet<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The data set's only whole-head example on a `size`^3 grid, checked for one image channel
/// and two condition channels of -1 or 1; with its voxel count.
fn whole_head_example(ds: &NiftiDataset, size: usize) -> (Example, usize) {
    let ex = ds.get(0).unwrap();
    let n = size * size * size;
    assert_eq!(
        (ex.image.len(), ex.cond.len(), ex.shape),
        (n, 2 * n, [size; 3])
    );
    assert_eq!(distinct(&ex.cond), bits(&[-1.0, 1.0]));
    (ex, n)
}

#[test]
fn whole_head_real_pair() {
    let _serial = crate::common::one_at_a_time();
    let wh = datasets().join("medddpm-samples/whole_head");
    let tmp = tempfile::tempdir().unwrap();
    for sub in ["mask", "image"] {
        link(
            &wh.join(sub).join("sample_3.nii.gz"),
            &tmp.path().join(sub).join("sample_3.nii.gz"),
        );
    }
    let source = DataSource::WholeHead {
        mask_dir: tmp.path().join("mask"),
        image_dir: tmp.path().join("image"),
    };
    let mut cfg = DataConfig::new(source);
    let ds = NiftiDataset::open(&cfg).unwrap();
    assert_eq!(ds.len(), 1);
    assert_eq!(ds.ids(), vec!["sample_3".to_string()]);
    assert_eq!((ds.image_channels(), ds.cond_channels()), (1, 2));
    assert_eq!(ds.shape(), [128, 128, 128]);
    let (ex, n) = whole_head_example(&ds, 128);
    assert!(ex.image.iter().all(|v| (-1.0..=1.0).contains(v)));
    // Tumour channel: 1,145 voxels of label 2 (spec 6.2); head channel 1,152,632.
    let on = |c: usize| {
        ex.cond[c * n..(c + 1) * n]
            .iter()
            .filter(|&&v| v == 1.0)
            .count()
    };
    assert_eq!((on(0), on(1)), (1_152_632, 1_145));
    // Cached copy is identical.
    assert_eq!(ds.get(0).unwrap(), ex);

    cfg.grid = [64, 64, 64];
    cfg.grid_policy = GridPolicy::Resize;
    let ds = NiftiDataset::open(&cfg).unwrap();
    assert_eq!(ds.shape(), [64, 64, 64]);
    let (ex, n) = whole_head_example(&ds, 64);
    assert!(
        ex.cond[n..].contains(&1.0),
        "tumour survives nearest resize"
    );
}

fn brats_root(tmp: &Path, cases: &[(&str, &[&str])]) -> PathBuf {
    let src = datasets().join("medddpm-samples/brats2021");
    let root = tmp.join("brats");
    for (case, mods) in cases {
        for m in *mods {
            let name = format!("BraTS2021_{case}_{m}.nii.gz");
            link(&src.join(m).join(&name), &root.join(m).join(&name));
        }
    }
    root
}

const ALL: &[&str] = &["t1", "t1ce", "t2", "flair", "seg"];

#[test]
fn brats_case_stacks_modalities_in_reference_order() {
    let (_serial, tmp) = crate::common::serial_tempdir();
    let root = brats_root(tmp.path(), &[("01306", ALL)]);
    let mut cfg = DataConfig::new(DataSource::Brats { root: root.clone() });
    cfg.grid = [192, 192, 144];
    cfg.grid_policy = GridPolicy::Exact;
    cfg.cache = false;
    let ds = NiftiDataset::open(&cfg).unwrap();
    assert_eq!(ds.ids(), vec!["BraTS2021_01306".to_string()]);
    assert_eq!((ds.image_channels(), ds.cond_channels()), (4, 4));
    assert_eq!(ds.shape(), [144, 192, 192]);
    let ex = ds.get(0).unwrap();
    let n = 192 * 192 * 144;
    assert_eq!((ex.image.len(), ex.cond.len()), (4 * n, 4 * n));
    assert_eq!(distinct(&ex.cond), bits(&[0.0, 1.0]));
    // normalization "none" (the BraTS default) keeps the stored values, channel c = modality c.
    for (c, m) in ["t1", "t1ce", "t2", "flair"].iter().enumerate() {
        let file = root.join(m).join(format!("BraTS2021_01306_{m}.nii.gz"));
        let v = Volume::read(&file).unwrap();
        assert!(
            ex.image[c * n..(c + 1) * n] == *v.data(),
            "channel {c} is not {m}"
        );
    }
    // Label counts of 01306 (spec 6.3): 1 -> 40, 2 -> 48,100, 3 -> 8,029, 4 -> 1,160,966.
    let on: Vec<usize> = (0..4)
        .map(|c| {
            ex.cond[c * n..(c + 1) * n]
                .iter()
                .filter(|&&v| v == 1.0)
                .count()
        })
        .collect();
    assert_eq!(on, vec![40, 48_100, 8_029, 1_160_966]);
}

#[test]
fn brats_case_without_modalities_is_named() {
    let (_serial, tmp) = crate::common::serial_tempdir();
    let root = brats_root(tmp.path(), &[("01306", ALL), ("00529", &["seg"])]);
    let err = NiftiDataset::open(&DataConfig::new(DataSource::Brats { root })).unwrap_err();
    assert!(
        matches!(&err, DataError::MissingModality { case, modality, .. }
            if case == "BraTS2021_00529" && modality == "t1"),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("00529") && msg.contains("t1"), "{msg}");
}

#[test]
fn brats_empty_seg_folder_is_named() {
    let (_serial, tmp) = crate::common::serial_tempdir();
    let root = brats_root(tmp.path(), &[("01306", &["t1", "t1ce", "t2", "flair"])]);
    let err =
        NiftiDataset::open(&DataConfig::new(DataSource::Brats { root: root.clone() })).unwrap_err();
    assert!(matches!(err, DataError::MissingFolder { .. }), "{err:?}");
    std::fs::create_dir_all(root.join("seg")).unwrap();
    let err =
        NiftiDataset::open(&DataConfig::new(DataSource::Brats { root: root.clone() })).unwrap_err();
    assert!(matches!(err, DataError::EmptyFolder { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains(&root.join("seg").display().to_string()),
        "{err}"
    );
}

#[test]
fn list_masks_file_and_folder() {
    let _serial = crate::common::one_at_a_time();
    let masks = datasets().join("medddpm-samples/whole_head/mask");
    let all = list_masks(&masks).unwrap();
    let names: Vec<_> = all
        .iter()
        .map(|p| p.file_name().unwrap().to_str().unwrap().to_string())
        .collect();
    assert_eq!(
        names,
        ["sample_0", "sample_1", "sample_2", "sample_3"].map(|s| format!("{s}.nii.gz"))
    );
    let one = masks.join("sample_1.nii.gz");
    assert_eq!(list_masks(&one).unwrap(), vec![one.clone()]);

    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("notes.txt"), "x").unwrap();
    let err = list_masks(tmp.path()).unwrap_err();
    assert!(matches!(err, DataError::EmptyFolder { .. }), "{err:?}");
    assert!(err.to_string().contains(&tmp.path().display().to_string()));
    let missing = tmp.path().join("nope");
    let err = list_masks(&missing).unwrap_err();
    assert!(matches!(err, DataError::NotFound { .. }), "{err:?}");
}

#[test]
fn load_condition_keeps_the_mask_geometry() {
    let _serial = crate::common::one_at_a_time();
    let path = datasets().join("medddpm-samples/whole_head/mask/sample_0.nii.gz");
    let scheme = LabelScheme::whole_head();
    let (cond, shape, vol) = load_condition(&path, &scheme, [128; 3], GridPolicy::Exact).unwrap();
    assert_eq!(shape, [128; 3]);
    assert_eq!(cond.len(), 2 * 128 * 128 * 128);
    assert_eq!(vol.affine(), Volume::read(&path).unwrap().affine());
    assert_eq!(vol.affine()[0][0], 1.5);
    assert_eq!(vol.affine()[0][3], -94.75);
    // Tumour voxels of sample_0: 443 (spec 6.2).
    let n = 128 * 128 * 128;
    assert_eq!(cond[n..].iter().filter(|&&v| v == 1.0).count(), 443);

    let (cond, shape, vol) =
        load_condition(&path, &scheme, [48, 40, 32], GridPolicy::Resize).unwrap();
    assert_eq!(shape, [32, 40, 48]);
    assert_eq!(cond.len(), 2 * 48 * 40 * 32);
    assert_eq!(distinct(&cond), bits(&[-1.0, 1.0]));
    assert_eq!(
        vol.dims(),
        [128; 3],
        "the volume returned is the mask as read"
    );

    let err = load_condition(&path, &scheme, [64; 3], GridPolicy::Exact).unwrap_err();
    assert!(matches!(err, DataError::WrongGrid { .. }), "{err:?}");
}
