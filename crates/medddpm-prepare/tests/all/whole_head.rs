//! `prepare whole-head`: resampled volumes keep world positions (an image that is a linear
//! function of world coordinates is reproduced exactly at every output voxel's world point),
//! the spacing option centres its grid, labels are checked, unpaired files are reported.

use std::path::Path;

use crate::common;
use medddpm_nifti::{Affine, DataType, Volume, WriteOptions};
use medddpm_prepare::whole_head::{
    prepare_whole_head, Scaling, WholeHeadConfig, WholeHeadDone, WholeHeadRun,
};
use medddpm_prepare::{CaseProblem, Report, Silent};

const DIMS: [usize; 3] = [30, 24, 20];

/// Oblique, flipped, anisotropic: 1.2 x 0.9 x 2.0 mm, rotated 20 degrees in the i-j plane.
fn affine() -> Affine {
    let (s, c) = (20f64.to_radians().sin(), 20f64.to_radians().cos());
    [
        [-1.2 * c, 0.9 * s, 0.0, 40.0],
        [-1.2 * s, -0.9 * c, 0.0, 10.0],
        [0.0, 0.0, 2.0, -30.0],
        [0.0, 0.0, 0.0, 1.0],
    ]
}

fn field(w: [f64; 3]) -> f64 {
    3.0 * w[0] - 2.0 * w[1] + 0.5 * w[2] + 100.0
}

/// An image that is `field` of each voxel's world position, and a mask: 1 where the field
/// exceeds 150, 2 in a block.
fn write_pair(dir: &Path, stem: &str, mask_value: Option<f32>) {
    let probe = Volume::new(DIMS, vec![0.0; DIMS.iter().product()], affine()).unwrap();
    let (mut image, mut mask) = (Vec::new(), Vec::new());
    for k in 0..DIMS[2] {
        for j in 0..DIMS[1] {
            for i in 0..DIMS[0] {
                let v = field(probe.world([i as f64, j as f64, k as f64]));
                image.push(v as f32);
                let block = (10..14).contains(&i) && (8..12).contains(&j) && (6..9).contains(&k);
                mask.push(if block {
                    2.0
                } else if v > 150.0 {
                    1.0
                } else {
                    0.0
                });
            }
        }
    }
    if let Some(x) = mask_value {
        mask[5] = x;
    }
    std::fs::create_dir_all(dir.join("image")).unwrap();
    std::fs::create_dir_all(dir.join("mask")).unwrap();
    probe
        .with_data(image)
        .unwrap()
        .write(dir.join("image").join(format!("{stem}.nii.gz")))
        .unwrap();
    probe
        .with_data(mask)
        .unwrap()
        .write_with(
            dir.join("mask").join(format!("{stem}.nii")),
            WriteOptions::dtype(DataType::U8),
        )
        .unwrap();
}

/// `prepare whole-head` on the pairs [`write_pair`] wrote under `root`.
fn prepare(
    root: &Path,
    out: &Path,
    config: &WholeHeadConfig,
) -> Report<WholeHeadRun, WholeHeadDone> {
    prepare_whole_head(
        &root.join("image"),
        &root.join("mask"),
        out,
        config,
        &mut Silent,
    )
    .unwrap()
}

/// Output voxels whose sampling position lies inside the input's voxel centres hold exactly
/// the field at their own world point.
fn assert_world_positions_kept(out: &Volume, input: &Volume) {
    let inv = medddpm_prepare::resample::invert(input.affine()).unwrap();
    let [ni, nj, nk] = out.dims();
    let mut checked = 0;
    for k in 0..nk {
        for j in 0..nj {
            for i in 0..ni {
                let w = out.world([i as f64, j as f64, k as f64]);
                let p = medddpm_prepare::resample::apply(&inv, w);
                if (0..3).all(|a| p[a] >= 0.0 && p[a] <= (DIMS[a] - 1) as f64) {
                    let got = out.get(i, j, k).unwrap() as f64;
                    assert!(
                        (got - field(w)).abs() < 2e-3 * field(w).abs().max(1.0),
                        "({i},{j},{k}): {got} vs {}",
                        field(w)
                    );
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > ni * nj * nk / 3, "only {checked} voxels inside");
}

#[test]
fn resampling_keeps_world_positions_with_and_without_spacing() {
    let tmp = tempfile::tempdir().unwrap();
    write_pair(tmp.path(), "s1", None);
    let input = Volume::read(tmp.path().join("image/s1.nii.gz")).unwrap();
    let run = |out: &str, config: &WholeHeadConfig| {
        let out = tmp.path().join(out);
        let report = prepare(tmp.path(), &out, config);
        assert_eq!(report.cases_done, 1, "{:?}", report.skipped);
        let image = Volume::read(out.join("image/s1.nii.gz")).unwrap();
        let mask = Volume::read(out.join("mask/s1.nii.gz")).unwrap();
        assert_eq!(mask.dtype(), DataType::U8);
        assert!(image.same_grid(&mask));
        (image, mask, report)
    };

    // Field of view kept: spacing = extent / grid.
    let config = WholeHeadConfig {
        grid: [16, 12, 8],
        ..WholeHeadConfig::default()
    };
    let (image, mask, report) = run("fov", &config);
    assert_eq!(image.dims(), [16, 12, 8]);
    let sp = image.spacing();
    for (a, want) in [1.2 * 30.0 / 16.0, 0.9 * 24.0 / 12.0, 2.0 * 20.0 / 8.0]
        .iter()
        .enumerate()
    {
        assert!((sp[a] - want).abs() < 1e-5, "{sp:?}");
    }
    // The outer corners of the field of view stay put.
    let corner = |v: &Volume, d: [usize; 3]| v.world(d.map(|n| n as f64 - 0.5));
    for (a, b) in corner(&image, [16, 12, 8]).iter().zip(corner(&input, DIMS)) {
        assert!((a - b).abs() < 1e-4);
    }
    assert_world_positions_kept(&image, &input);
    let labels: Vec<i64> = report.done[0].labels.keys().copied().collect();
    assert_eq!(labels, [0, 1, 2], "nearest keeps labels labels");
    assert!(mask
        .data()
        .iter()
        .all(|&l| l == 0.0 || l == 1.0 || l == 2.0));

    // A spacing: the grid centred on the volume's centre.
    let config = WholeHeadConfig {
        grid: [20, 20, 20],
        spacing: Some([1.5, 1.5, 1.5]),
        ..WholeHeadConfig::default()
    };
    let (image, _, _) = run("spacing", &config);
    for s in image.spacing() {
        assert!((s - 1.5).abs() < 1e-6);
    }
    let centre = |v: &Volume| {
        let d = v.dims();
        v.world(d.map(|n| (n as f64 - 1.0) / 2.0))
    };
    for (a, b) in centre(&image).iter().zip(centre(&input)) {
        assert!(
            (a - b).abs() < 1e-6,
            "{:?} vs {:?}",
            centre(&image),
            centre(&input)
        );
    }
    assert_world_positions_kept(&image, &input);
    // 30 mm of k at 1.5 mm covers the 40 mm extent only partly; the rest (i: 36 mm in 30) pads.
    let lo = image.data().iter().copied().fold(f32::MAX, f32::min);
    let input_lo = input.data().iter().copied().fold(f32::MAX, f32::min);
    assert!(lo >= input_lo, "padding takes the image's minimum");
}

#[test]
fn labels_pairs_and_scaling_are_checked() {
    let tmp = tempfile::tempdir().unwrap();
    write_pair(tmp.path(), "good", None);
    write_pair(tmp.path(), "tumour3", Some(3.0));
    write_pair(tmp.path(), "lonely", None);
    std::fs::remove_file(tmp.path().join("mask/lonely.nii")).unwrap();
    std::fs::copy(
        tmp.path().join("mask/good.nii"),
        tmp.path().join("mask/orphan.nii"),
    )
    .unwrap();
    let config = WholeHeadConfig {
        grid: [8, 8, 8],
        scale: Scaling::MinusOneOne,
        ..WholeHeadConfig::default()
    };
    let out = tmp.path().join("out");
    let report = prepare(tmp.path(), &out, &config);
    assert_eq!(common::done(&report), ["good"]);
    assert_eq!(report.done[0].image_range, [-1.0, 1.0]);
    let skipped = common::skipped(&report);
    assert!(
        matches!(skipped[0], ("lonely", CaseProblem::Unpaired { partner, .. }) if partner == "mask"),
        "{skipped:?}"
    );
    assert!(
        matches!(skipped[1], ("orphan", CaseProblem::Unpaired { partner, .. }) if partner == "image"),
        "{skipped:?}"
    );
    match skipped[2] {
        ("tumour3", CaseProblem::UnexpectedLabels { found, allowed, .. }) => {
            assert_eq!(found, &[3.0]);
            assert_eq!(allowed, &[0, 1, 2]);
        }
        other => panic!("{other:?}"),
    }
    assert!(
        report.skipped[2].reason.contains("tumour3.nii"),
        "{}",
        report.skipped[2].reason
    );
    // With label 3 allowed, that case goes through.
    let config = WholeHeadConfig {
        labels: vec![0, 1, 2, 3],
        overwrite: true,
        ..config
    };
    let report = prepare(tmp.path(), &out, &config);
    assert_eq!(report.cases_done, 2);
}
