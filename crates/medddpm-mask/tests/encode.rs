//! Encoding the real sample masks and custom schemes.

use std::path::Path;

use medddpm_mask::{LabelScheme, MaskError};
use medddpm_nifti::{NiftiError, Volume};

use medddpm_testdata::dataset;

/// Voxels per channel equal to `value`.
fn counts(out: &[f32], channels: usize, value: f32) -> Vec<usize> {
    out.chunks(out.len() / channels)
        .map(|c| c.iter().filter(|&&x| x == value).count())
        .collect()
}

fn tiny(labels: &[f32]) -> Volume {
    let mut a = [[0.0; 4]; 4];
    (0..4).for_each(|i| a[i][i] = 1.0);
    Volume::new([labels.len(), 1, 1], labels.to_vec(), a).unwrap()
}

/// A shared mask and its encoding by `scheme`, checked to hold `len` values, each 1 or `off`.
fn encoded(rel: &str, scheme: &LabelScheme, len: usize, off: f32) -> (Volume, Vec<f32>) {
    let path = dataset(rel);
    let mask = Volume::read(&path).unwrap();
    let out = scheme.encode(&mask, &path).unwrap();
    assert_eq!(out.len(), len);
    assert!(out.iter().all(|&x| x == 1.0 || x == off));
    (mask, out)
}

#[test]
fn whole_head_sample_3() {
    let rel = "medddpm-samples/whole_head/mask/sample_3.nii.gz";
    let (mask, out) = encoded(rel, &LabelScheme::whole_head(), 2 * 128 * 128 * 128, -1.0);
    assert_eq!(counts(&out, 2, 1.0), [1_152_632, 1_145]);
    // Channel 0 at voxel idx is the mask's voxel idx in file (= network k, j, i) order.
    let n = mask.voxel_count();
    for (idx, &l) in mask.data().iter().enumerate().step_by(997) {
        assert_eq!(out[idx] == 1.0, l == 1.0);
        assert_eq!(out[n + idx] == 1.0, l == 2.0);
    }
}

#[test]
fn brats_seg_01306() {
    let rel = "medddpm-samples/brats2021/seg/BraTS2021_01306_seg.nii.gz";
    let (_, out) = encoded(rel, &LabelScheme::brats(), 4 * 192 * 192 * 144, 0.0);
    assert_eq!(counts(&out, 4, 1.0), [40, 48_100, 8_029, 1_160_966]);
}

#[test]
fn tiny_whole_head_values_are_exclusive() {
    let out = LabelScheme::whole_head()
        .encode(&tiny(&[0.0, 1.0, 2.0]), Path::new("t.nii"))
        .unwrap();
    // background (-1,-1), head (+1,-1), tumour (-1,+1).
    assert_eq!(out, [-1.0, 1.0, -1.0, -1.0, -1.0, 1.0]);
}

/// The message of `scheme`'s refusal of a tiny mask of `labels` read from `path`, checked to
/// be an unknown label `value` in `count` voxels.
fn unknown_label(
    scheme: LabelScheme,
    labels: &[f32],
    path: &str,
    value: f32,
    count: usize,
) -> String {
    let err = scheme.encode(&tiny(labels), Path::new(path)).unwrap_err();
    assert!(
        matches!(err, MaskError::UnknownLabel { value: v, count: c, .. } if v == value && c == count),
        "{err:?}"
    );
    err.to_string()
}

#[test]
fn unknown_label_names_value_count_and_file() {
    let labels = [0.0, 7.0, 1.0, 7.0, 2.0];
    let msg = unknown_label(
        LabelScheme::whole_head(),
        &labels,
        "/data/masks/case_12.nii.gz",
        7.0,
        2,
    );
    assert!(
        msg.contains("case_12.nii.gz") && msg.contains("label value 7") && msg.contains("2 voxels"),
        "{msg}"
    );
}

#[test]
fn fractional_label_is_unknown() {
    let msg = unknown_label(
        LabelScheme::brats(),
        &[0.0, 1.0, 0.5],
        "resized.nii",
        0.5,
        1,
    );
    assert!(msg.contains("resized.nii"));
}

#[test]
fn encode_checked_refuses_a_grid_mismatch() {
    let mask_path = dataset("medddpm-samples/whole_head/mask/sample_3.nii.gz");
    let image_path = dataset("medddpm-samples/whole_head/image/sample_3.nii.gz");
    let t1_path = dataset("medddpm-samples/brats2021/t1/BraTS2021_01306_t1.nii.gz");
    let mask = Volume::read(&mask_path).unwrap();
    let scheme = LabelScheme::whole_head();
    let image = Volume::read(&image_path).unwrap();
    assert!(scheme
        .encode_checked(&mask, &mask_path, &image, &image_path)
        .is_ok());
    let t1 = Volume::read(&t1_path).unwrap();
    let err = scheme
        .encode_checked(&mask, &mask_path, &t1, &t1_path)
        .unwrap_err();
    assert!(
        matches!(err, MaskError::Nifti(NiftiError::GridMismatch { .. })),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("sample_3.nii.gz") && msg.contains("BraTS2021_01306_t1.nii.gz"),
        "{msg}"
    );
}

#[test]
fn custom_scheme_from_toml() {
    let text = r#"
        name = "tumour-core"
        on_value = 1.0
        off_value = -1.0
        known_labels = [0, 4]

        [[channels]]
        name = "core"
        labels = [1, 3]

        [[channels]]
        name = "whole-tumour"
        labels = [1, 2, 3]
    "#;
    let scheme: LabelScheme = toml::from_str(text).unwrap();
    assert_eq!(scheme.num_channels(), 2);
    assert_eq!(scheme.allowed_labels(), [0, 1, 2, 3, 4]);
    let out = scheme
        .encode(&tiny(&[0.0, 1.0, 2.0, 3.0, 4.0]), Path::new("c.nii"))
        .unwrap();
    assert_eq!(out, [-1.0, 1.0, -1.0, 1.0, -1.0, -1.0, 1.0, 1.0, 1.0, -1.0]);
    // Presets survive a TOML round trip too.
    let brats = LabelScheme::brats();
    let back: LabelScheme = toml::from_str(&toml::to_string(&brats).unwrap()).unwrap();
    assert_eq!(back, brats);
}

#[test]
fn presets_by_name_and_invalid_schemes() {
    assert_eq!(
        LabelScheme::by_name("whole-head").unwrap(),
        LabelScheme::whole_head()
    );
    assert_eq!(LabelScheme::by_name("brats").unwrap().num_channels(), 4);
    let err = LabelScheme::by_name("wholehead").unwrap_err();
    assert!(
        matches!(err, MaskError::UnknownScheme { .. }) && err.to_string().contains("wholehead")
    );
    let mut s = LabelScheme::whole_head();
    s.off_value = s.on_value;
    assert!(matches!(s.validate(), Err(MaskError::InvalidScheme { .. })));
    let mut s = LabelScheme::whole_head();
    s.channels.clear();
    let err = s.encode(&tiny(&[0.0]), Path::new("x.nii")).unwrap_err();
    assert!(matches!(err, MaskError::InvalidScheme { .. }));
}
