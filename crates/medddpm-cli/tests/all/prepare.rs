//! `medddpm prepare brats` end to end on small synthetic raw cases: outputs, the report, a
//! skipped case with its reason, the overwrite guard, and errors that name the file.

use std::path::Path;

use medddpm_nifti::{Affine, DataType, Volume, WriteOptions};

use crate::common::{arg, assert_refused, medddpm};

const RAW_AFFINE: Affine = [
    [-1.0, 0.0, 0.0, 0.0],
    [0.0, -1.0, 0.0, 239.0],
    [0.0, 0.0, 1.0, 0.0],
    [0.0, 0.0, 0.0, 1.0],
];
const DIMS: [usize; 3] = [20, 20, 15];

/// A raw case: a block of "brain" (T1 200..) with tumour labels 1, 2, 4 in it, background 0.
fn raw_case(raw: &Path, case: &str, without: Option<&str>) {
    let dir = raw.join(case);
    std::fs::create_dir_all(&dir).unwrap();
    let (mut t1, mut seg) = (Vec::new(), Vec::new());
    for k in 0..DIMS[2] {
        for j in 0..DIMS[1] {
            for i in 0..DIMS[0] {
                let inside = [i, j, k]
                    .iter()
                    .zip(DIMS)
                    .all(|(&x, n)| x >= 4 && x + 4 < n);
                t1.push(if inside { 200.0 + i as f32 } else { 0.0 });
                seg.push(match (i, j, k) {
                    (9, 9, 7) => 4.0,
                    (10, 9, 7) => 1.0,
                    (11, 9, 7) => 2.0,
                    _ => 0.0,
                });
            }
        }
    }
    for m in ["t1", "t1ce", "t2", "flair", "seg"] {
        if without == Some(m) {
            continue;
        }
        let (data, dtype) = if m == "seg" {
            (seg.clone(), DataType::U8)
        } else {
            (t1.clone(), DataType::I16)
        };
        Volume::new(DIMS, data, RAW_AFFINE)
            .unwrap()
            .write_with(
                dir.join(format!("{case}_{m}.nii.gz")),
                WriteOptions::dtype(dtype),
            )
            .unwrap();
    }
}

#[test]
fn prepare_brats_end_to_end() {
    let tmp = tempfile::tempdir().unwrap();
    let (raw, out) = (tmp.path().join("raw"), tmp.path().join("out"));
    raw_case(&raw, "BraTS2021_00001", None);
    raw_case(&raw, "BraTS2021_00002", Some("flair"));
    let (raw_s, out_s) = (arg(&raw), arg(&out));
    let args = [
        "prepare", "brats", "--raw", raw_s, "--out", out_s, "--grid", "16,16,12",
    ];
    let (ok, stdout, stderr) = medddpm(&args);
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("1 case(s) prepared, 1 skipped"), "{stdout}");
    assert!(
        stdout.contains("BraTS2021_00002: missing flair")
            && stdout.contains("BraTS2021_00002_flair.nii.gz"),
        "{stdout}"
    );
    assert!(
        stderr.contains("BraTS2021_00001 done"),
        "one progress line per case: {stderr}"
    );

    for m in ["t1", "t1ce", "t2", "flair"] {
        let v = Volume::read(out.join(m).join(format!("BraTS2021_00001_{m}.nii.gz"))).unwrap();
        assert_eq!(v.dims(), [16, 16, 12]);
        // 20 -> 16 removes 2 voxels at the start of i and j, 15 -> 12 removes 2 at the start of k.
        assert_eq!(
            [v.affine()[0][3], v.affine()[1][3], v.affine()[2][3]],
            [-2.0, 237.0, 2.0]
        );
        let lo = v.data().iter().copied().fold(f32::MAX, f32::min);
        let hi = v.data().iter().copied().fold(f32::MIN, f32::max);
        assert_eq!((lo, hi), (-1.0, 1.0));
    }
    let seg = Volume::read(out.join("seg/BraTS2021_00001_seg.nii.gz")).unwrap();
    assert_eq!(seg.dtype(), DataType::U8);
    // Raw (9, 9, 7) is (7, 7, 5) after the crop: enhancing 4 -> 3; brain 4 around the tumour.
    assert_eq!(seg.get(7, 7, 5), Some(3.0));
    assert_eq!(seg.get(8, 7, 5), Some(1.0));
    assert_eq!(seg.get(9, 7, 5), Some(2.0));
    assert_eq!(seg.get(5, 5, 5), Some(4.0));
    assert_eq!(seg.get(0, 0, 0), Some(0.0));
    assert!(!out.join("t1/BraTS2021_00002_t1.nii.gz").exists());

    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("prepare-report.json")).unwrap()).unwrap();
    assert_eq!(report["command"], "brats");
    assert_eq!(report["cases_done"], 1);
    assert_eq!(report["skipped"][0]["case"], "BraTS2021_00002");
    assert_eq!(report["skipped"][0]["problem"]["kind"], "missing-files");
    assert_eq!(
        report["settings"]["config"]["grid"],
        serde_json::json!([16, 16, 12])
    );

    // Again: refused, naming an existing output; with --overwrite it runs.
    assert_refused(
        &medddpm(&args),
        &["BraTS2021_00001_t1.nii.gz", "--overwrite"],
    );
    let mut again = args.to_vec();
    again.push("--overwrite");
    let (ok, stdout, stderr) = medddpm(&again);
    assert!(ok, "{stdout}\n{stderr}");
}

/// `medddpm prepare brats --raw RAW --out OUT`, then `extra`.
fn prepare_brats(raw: &Path, out: &Path, extra: &[&str]) -> (bool, String, String) {
    let args = ["prepare", "brats", "--raw", arg(raw), "--out", arg(out)];
    crate::common::medddpm_with(&args, extra)
}

#[test]
fn prepare_errors_name_the_file_and_the_problem() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("no-such-raw");
    let out = tmp.path().join("out");
    let run = prepare_brats(&missing, &out, &[]);
    assert_refused(&run, &["no-such-raw", "folder not found"]);

    // Every case skipped: a failure, with the reasons printed.
    let raw = tmp.path().join("raw");
    raw_case(&raw, "only", Some("seg"));
    let (ok, stdout, stderr) = prepare_brats(&raw, &out, &["--grid", "16"]);
    assert!(!ok);
    assert!(stdout.contains("only_seg.nii.gz"), "{stdout}");
    assert!(stderr.contains("no case could be prepared"), "{stderr}");

    let list = tmp.path().join("missing.csv");
    let cases = ["--cases", arg(&list), "--overwrite"];
    assert_refused(&prepare_brats(&raw, &out, &cases), &["missing.csv"]);

    let spacing = [
        "--images",
        "a",
        "--masks",
        "b",
        "--out",
        "c",
        "--spacing",
        "0",
    ];
    let run = crate::common::medddpm_with(&["prepare", "whole-head"], &spacing);
    assert_refused(&run, &["--spacing"]);
}
