//! `prepare brats`: the shared preprocessed case turned back into a raw one and prepared
//! again gives the reference's crop, labels and range; the brain rule on the real case; case
//! lists, skipped cases and the overwrite guard on small synthetic cases.

use crate::common;
use std::path::Path;

use medddpm_nifti::{DataType, Volume};
use medddpm_prepare::brats::{brain_voxels, prepare_brats, BratsConfig, MODALITIES};
use medddpm_prepare::{CaseProblem, PrepareError, Silent};

const CASE: &str = "BraTS2021_01306";

fn shared(m: &str) -> Volume {
    Volume::read(medddpm_testdata::dataset(&format!(
        "medddpm-samples/brats2021/{m}/{CASE}_{m}.nii.gz"
    )))
    .unwrap()
}

/// The shared case back to a raw one: padded to 240x240x155 (the crop's inverse), images
/// mapped from [-1, 1] to integers in [0, 1000] (background 0), seg 3 -> 4 and brain 4 -> 0.
fn raw_from_shared(raw: &Path) {
    let dir = raw.join(CASE);
    std::fs::create_dir_all(&dir).unwrap();
    for m in MODALITIES {
        let v = shared(m).crop_or_pad([240, 240, 155], -1.0).unwrap();
        let data = v
            .data()
            .iter()
            .map(|x| ((x + 1.0) * 500.0).round())
            .collect();
        let v = v.with_data(data).unwrap();
        common::write_raw(&v, &dir, &format!("{CASE}_{m}"), DataType::I16);
    }
    let seg = shared("seg").crop_or_pad([240, 240, 155], 0.0).unwrap();
    let data = seg
        .data()
        .iter()
        .map(|&l| match l as i64 {
            3 => 4.0,
            4 => 0.0,
            x => x as f32,
        })
        .collect();
    let seg = seg.with_data(data).unwrap();
    common::write_raw(&seg, &dir, &format!("{CASE}_seg"), DataType::U8);
}

#[test]
fn a_raw_case_is_cropped_scaled_and_labelled_as_the_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let (raw, out) = (tmp.path().join("raw"), tmp.path().join("out"));
    raw_from_shared(&raw);
    let raw_t1 = Volume::read(raw.join(CASE).join(format!("{CASE}_t1.nii.gz"))).unwrap();
    assert_eq!(raw_t1.affine()[1][3], 239.0);
    let report = prepare_brats(&raw, &out, None, &BratsConfig::default(), &mut Silent).unwrap();
    assert_eq!((report.cases_done, report.cases_skipped), (1, 0));

    let reference_seg = shared("seg");
    let mut t1_out = None;
    for m in MODALITIES {
        let v = Volume::read(out.join(m).join(format!("{CASE}_{m}.nii.gz"))).unwrap();
        let reference = shared(m);
        assert_eq!(v.dims(), [192, 192, 144]);
        assert_eq!(v.dtype(), DataType::F32);
        assert_eq!(
            v.affine(),
            reference.affine(),
            "{m}: origin (-24, 215, 6) as the sample's"
        );
        let (lo, hi) = v
            .data()
            .iter()
            .fold((f32::MAX, f32::MIN), |(a, b), &x| (a.min(x), b.max(x)));
        assert_eq!((lo, hi), (-1.0, 1.0), "{m}");
        // Integer raw values: within half a raw unit (1/1000) of the reference.
        let err = medddpm_testdata::max_abs_diff(v.data(), reference.data());
        assert!(err <= 1.01e-3, "{m}: max difference {err}");
        if m == "t1" {
            t1_out = Some(v);
        }
    }
    let seg = Volume::read(out.join("seg").join(format!("{CASE}_seg.nii.gz"))).unwrap();
    assert_eq!(seg.dtype(), DataType::U8);
    assert_eq!(seg.affine(), reference_seg.affine());
    // Expected: the tumour labels of the reference, brain where the T1 is above -1.
    let t1 = t1_out.unwrap();
    let mut brain_agree = 0usize;
    for ((&got, &want), &t) in seg.data().iter().zip(reference_seg.data()).zip(t1.data()) {
        let expected = match want as i64 {
            1..=3 => want,
            _ if t > -1.0 => 4.0,
            _ => 0.0,
        };
        assert_eq!(got, expected);
        brain_agree += usize::from((got == 4.0) == (want == 4.0));
    }
    let frac = brain_agree as f64 / seg.voxel_count() as f64;
    eprintln!(
        "brain label vs the shared seg after the raw round trip: {} of {} voxels differ",
        seg.voxel_count() - brain_agree,
        seg.voxel_count()
    );
    assert!(frac > 0.999, "{frac}");
}

#[test]
fn the_brain_rule_reproduces_the_shared_segmentation() {
    let (t1, seg) = (shared("t1"), shared("seg"));
    let brain = brain_voxels(t1.data());
    let (mut equal, mut both, mut rule, mut label4) = (0usize, 0usize, 0usize, 0usize);
    for (&b, &l) in brain.iter().zip(seg.data()) {
        // The rule's label 4: brain and no tumour label.
        let predicted = b && !(1.0..=3.0).contains(&l);
        let actual = l == 4.0;
        equal += usize::from(predicted == actual);
        both += usize::from(predicted && actual);
        rule += usize::from(predicted);
        label4 += usize::from(actual);
    }
    let frac = equal as f64 / seg.voxel_count() as f64;
    let dice = 2.0 * both as f64 / (rule + label4) as f64;
    eprintln!(
        "brain rule on {CASE}: {frac:.6} of voxels agree ({} differ), Dice of label 4 {dice:.6} ({rule} vs {label4} voxels)",
        seg.voxel_count() - equal
    );
    assert!(frac > 0.999 && dice > 0.999, "{frac} {dice}");
}

fn small_config() -> BratsConfig {
    BratsConfig {
        grid: [16, 16, 12],
        ..BratsConfig::default()
    }
}

#[test]
fn case_lists_skipped_cases_and_the_overwrite_guard() {
    let tmp = tempfile::tempdir().unwrap();
    let (raw, out) = (tmp.path().join("raw"), tmp.path().join("out"));
    common::small_case(&raw, "A", [20, 20, 15], None);
    common::small_case(&raw, "B", [20, 20, 15], Some("flair"));
    common::small_case(&raw, "D", [20, 20, 15], None);
    let list = tmp.path().join("cases.csv");
    std::fs::write(&list, "A\nB\nC\n").unwrap();
    let report = prepare_brats(&raw, &out, Some(&list), &small_config(), &mut Silent).unwrap();
    assert_eq!(common::done(&report), ["A"]);
    assert_eq!(report.settings.not_listed, 1, "D is not listed");
    let skipped = common::skipped(&report);
    assert!(
        matches!(skipped[0], ("C", CaseProblem::NotFound { .. })),
        "{skipped:?}"
    );
    match skipped[1] {
        ("B", CaseProblem::MissingFiles { names, expected }) => {
            assert_eq!(names, &["flair"]);
            assert!(expected[0].ends_with("B/B_flair.nii.gz"));
        }
        other => panic!("{other:?}"),
    }
    assert!(
        report.skipped[1].reason.contains("B_flair.nii.gz"),
        "{}",
        report.skipped[1].reason
    );
    assert!(
        !out.join("t1/B_t1.nii.gz").exists(),
        "a skipped case writes nothing"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("prepare-report.json")).unwrap()).unwrap();
    assert_eq!(json["cases_done"], 1);
    assert_eq!(json["skipped"][1]["problem"]["kind"], "missing-files");
    assert_eq!(
        json["settings"]["config"]["grid"],
        serde_json::json!([16, 16, 12])
    );
    let labels = &json["done"][0]["labels"];
    assert!(
        labels["4"].as_u64().unwrap() > 0 && labels["3"].as_u64().unwrap() > 0,
        "{labels}"
    );

    // Again into the same folder: refused before anything is written.
    let before = std::fs::metadata(out.join("t1/A_t1.nii.gz"))
        .unwrap()
        .modified()
        .unwrap();
    match prepare_brats(&raw, &out, Some(&list), &small_config(), &mut Silent) {
        Err(PrepareError::OutputsExist { first, count }) => {
            assert!(first.ends_with("t1/A_t1.nii.gz"), "{}", first.display());
            assert_eq!(count, 6);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        std::fs::metadata(out.join("t1/A_t1.nii.gz"))
            .unwrap()
            .modified()
            .unwrap(),
        before
    );
    let again = BratsConfig {
        overwrite: true,
        ..small_config()
    };
    let report = prepare_brats(&raw, &out, None, &again, &mut Silent).unwrap();
    assert_eq!(report.cases_done, 2, "A and D; B still lacks its flair");
}

/// An output folder inside the raw one would make the next run read the outputs as cases.
#[test]
fn an_output_folder_inside_the_raw_one_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let raw = tmp.path().join("raw");
    common::small_case(&raw, "A", [20, 20, 15], None);
    for out in [
        raw.join("prepared"),
        raw.join("A/deeper/still"),
        raw.clone(),
    ] {
        match prepare_brats(&raw, &out, None, &small_config(), &mut Silent) {
            Err(PrepareError::OutputInsideInput { out: o, .. }) => assert_eq!(o, out),
            other => panic!("{}: {other:?}", out.display()),
        }
        assert!(!raw.join("prepared").exists(), "nothing written");
    }
    // Through a link to the raw folder too.
    #[cfg(unix)]
    {
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&raw, &link).unwrap();
        let out = link.join("prepared");
        assert!(matches!(
            prepare_brats(&raw, &out, None, &small_config(), &mut Silent),
            Err(PrepareError::OutputInsideInput { .. })
        ));
    }
    let beside = tmp.path().join("prepared");
    let report = prepare_brats(&raw, &beside, None, &small_config(), &mut Silent).unwrap();
    assert_eq!(report.cases_done, 1);
}

/// A grid no machine's memory holds is refused before anything is allocated or written.
#[test]
fn a_grid_beyond_the_machines_memory_is_refused_before_allocating() {
    if !std::path::Path::new("/proc/meminfo").exists() {
        return; // the check needs the system's figure
    }
    let tmp = tempfile::tempdir().unwrap();
    let (raw, out) = (tmp.path().join("raw"), tmp.path().join("out"));
    common::small_case(&raw, "A", [20, 20, 15], None);
    let huge = BratsConfig {
        grid: [100_000; 3],
        ..small_config()
    };
    match prepare_brats(&raw, &out, None, &huge, &mut Silent) {
        Err(e @ PrepareError::TooLarge { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains("[100000, 100000, 100000]") && text.contains("GiB"),
                "{text}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(!out.exists(), "nothing written");
}

#[test]
fn unreadable_files_bad_labels_grids_and_constant_images_skip_their_case() {
    let tmp = tempfile::tempdir().unwrap();
    let (raw, out) = (tmp.path().join("raw"), tmp.path().join("out"));
    for c in ["labels", "grid", "constant", "good", "broken"] {
        common::small_case(&raw, c, [20, 20, 15], None);
    }
    let write = |case: &str, m: &str, v: Volume| {
        v.write(raw.join(case).join(format!("{case}_{m}.nii.gz")))
            .unwrap()
    };
    let mut seg = Volume::read(raw.join("labels/labels_seg.nii.gz")).unwrap();
    seg.data_mut()[0] = 3.0;
    write("labels", "seg", seg);
    let t2 = Volume::read(raw.join("grid/grid_t2.nii.gz")).unwrap();
    write("grid", "t2", t2.crop_or_pad([20, 20, 14], 0.0).unwrap());
    let flair = Volume::read(raw.join("constant/constant_flair.nii.gz")).unwrap();
    write(
        "constant",
        "flair",
        flair.with_data(vec![7.0; flair.voxel_count()]).unwrap(),
    );
    std::fs::write(raw.join("broken/broken_t1ce.nii.gz"), b"not a volume").unwrap();
    let report = prepare_brats(&raw, &out, None, &small_config(), &mut Silent).unwrap();
    assert_eq!(report.done.len(), 1);
    let reasons = common::skipped(&report);
    match reasons[0] {
        ("broken", CaseProblem::Unreadable { path, message }) => {
            assert!(path.ends_with("broken_t1ce.nii.gz"));
            assert!(message.contains("broken_t1ce.nii.gz"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let reasons = &reasons[1..];
    assert!(
        matches!(reasons[0], ("constant", CaseProblem::ConstantImage { value, .. }) if *value == 7.0),
        "{reasons:?}"
    );
    assert!(
        matches!(
            reasons[1],
            (
                "grid",
                CaseProblem::GridMismatch {
                    b_dims: [20, 20, 14],
                    ..
                }
            )
        ),
        "{reasons:?}"
    );
    match reasons[2] {
        ("labels", CaseProblem::UnexpectedLabels { found, .. }) => assert_eq!(found, &[3.0]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_missing_raw_folder_is_an_error_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nowhere");
    let e = prepare_brats(
        &missing,
        &tmp.path().join("out"),
        None,
        &BratsConfig::default(),
        &mut Silent,
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("nowhere") && e.to_string().contains("not found"),
        "{e}"
    );
}
