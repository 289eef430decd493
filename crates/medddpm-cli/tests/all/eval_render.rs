//! `medddpm eval` and `medddpm render` end to end on small volumes written here: the metrics
//! rank a close sample above a far one, the pictures are written, and bad input names the file.

use std::path::Path;

use medddpm_nifti::Volume;

use crate::common::{assert_refused, medddpm};

const N: usize = 24;

/// A ball (label 1) with a small cube (label 2) in it, and an image: background -1, head a
/// gentle ramp around -0.1, tumour 0.7.
fn phantom() -> (Vec<f32>, Vec<f32>) {
    let mut mask = vec![0.0; N * N * N];
    let mut image = vec![-1.0; N * N * N];
    for k in 0..N {
        for j in 0..N {
            for i in 0..N {
                let at = i + N * (j + N * k);
                let r2 = [i, j, k]
                    .map(|v| (v as f64 - 11.5).powi(2))
                    .iter()
                    .sum::<f64>();
                if r2 < 81.0 {
                    mask[at] = 1.0;
                    image[at] = -0.1 + 0.02 * (i as f32 - 12.0);
                }
                if (10..14).contains(&i) && (10..14).contains(&j) && (10..14).contains(&k) {
                    mask[at] = 2.0;
                    image[at] = 0.7;
                }
            }
        }
    }
    (mask, image)
}

fn write(path: &Path, data: Vec<f32>) {
    let affine = [
        [1.5, 0.0, 0.0, 0.0],
        [0.0, 1.5, 0.0, 0.0],
        [0.0, 0.0, 1.5, 0.0],
        [0.0, 0.0, 0.0, 1.0],
    ];
    Volume::new([N; 3], data, affine)
        .unwrap()
        .write(path)
        .unwrap();
}

/// The folders `names` (paths relative to `dir`).
fn make_folders(dir: &Path, names: &[&str]) {
    for d in names {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
}

#[test]
fn eval_ranks_samples_and_render_draws_them() {
    let (tmp, image) = mask_and_synth(&["image"]);
    let dir = tmp.path();
    write(&dir.join("image/case.nii.gz"), image.clone());
    // Sample 0 is the image with a small wobble, sample 1 the image brightened by 0.5.
    let close: Vec<f32> = image
        .iter()
        .enumerate()
        .map(|(n, v)| v + 0.02 * ((n * 7919 % 13) as f32 / 13.0 - 0.5))
        .collect();
    let far: Vec<f32> = image.iter().map(|v| (v + 0.5).min(1.0)).collect();
    write(&dir.join("synth/case_sample-0.nii.gz"), close);
    write(&dir.join("synth/case_sample-1.nii.gz"), far);

    let p = |s: &str| dir.join(s).to_string_lossy().into_owned();
    let (ok, stdout, stderr) = medddpm(&[
        "eval",
        "--masks",
        &p("mask"),
        "--real",
        &p("image"),
        "--synthetic",
        &p("synth"),
        "--out",
        &p("eval"),
    ]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("| mask | sample | real |"), "{stdout}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("eval/eval.json")).unwrap()).unwrap();
    let rows = report["paired"]["rows"].as_array().unwrap();
    let metric = |sample: &str, key: &str| {
        rows.iter()
            .find(|r| r["sample"] == sample)
            .and_then(|r| r[key].as_f64())
            .unwrap()
    };
    assert!(metric("case_sample-0", "psnr") > metric("case_sample-1", "psnr") + 10.0);
    assert!(metric("case_sample-0", "ssim") > metric("case_sample-1", "ssim"));
    assert!((metric("case_sample-1", "mae") - 0.5).abs() < 0.05);
    assert!(dir.join("eval/eval.md").is_file());

    let (ok, _, stderr) = medddpm(&[
        "render",
        &p("image/case.nii.gz"),
        &p("synth/case_sample-0.nii.gz"),
        "--mask",
        &p("mask/case.nii.gz"),
        "--titles",
        "real,sample",
        "--out",
        &p("montage.png"),
        "--gif",
        &p("sweep.gif"),
    ]);
    assert!(ok, "{stderr}");
    let png = std::fs::read(dir.join("montage.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    let gif = std::fs::read(dir.join("sweep.gif")).unwrap();
    assert_eq!(&gif[..6], b"GIF89a");

    // A sample no mask claims, and a volume on another grid: errors naming the file.
    write(
        &dir.join("synth/other_sample-0.nii.gz"),
        vec![0.0; N * N * N],
    );
    assert_refused(
        &medddpm(&["eval", "--masks", &p("mask"), "--synthetic", &p("synth")]),
        &["other_sample-0.nii.gz"],
    );
    std::fs::remove_file(dir.join("synth/other_sample-0.nii.gz")).unwrap();
    Volume::new(
        [N, N, N / 2],
        vec![0.0; N * N * N / 2],
        medddpm_nifti::IDENTITY,
    )
    .unwrap()
    .write(dir.join("synth/case_sample-2.nii.gz"))
    .unwrap();
    assert_refused(
        &medddpm(&["eval", "--masks", &p("mask"), "--synthetic", &p("synth")]),
        &["case_sample-2.nii.gz", "grid"],
    );
    assert_refused(
        &medddpm(&[
            "render",
            &p("image/case.nii.gz"),
            "--titles",
            "a,b",
            "--out",
            &p("x.png"),
        ]),
        &["--titles"],
    );
}

/// A temporary folder with `mask/case.nii.gz` (the phantom's labels), an empty `synth/` and
/// the empty folders `more`; the phantom's image.
fn mask_and_synth(more: &[&str]) -> (tempfile::TempDir, Vec<f32>) {
    let tmp = tempfile::tempdir().unwrap();
    make_folders(tmp.path(), &["mask", "synth"]);
    make_folders(tmp.path(), more);
    let (mask, image) = phantom();
    write(&tmp.path().join("mask/case.nii.gz"), mask);
    (tmp, image)
}

/// The pictures and the report never replace what the user has: a volume named as `render`'s
/// `--out` or `--gif`, an earlier `eval.json` (unless `--overwrite`).
#[test]
fn outputs_never_replace_a_volume_or_an_earlier_evaluation() {
    let (tmp, image) = mask_and_synth(&[]);
    let dir = tmp.path();
    write(&dir.join("synth/case_sample-0.nii.gz"), image);
    let p = |s: &str| dir.join(s).to_string_lossy().into_owned();
    let volume = std::fs::read(dir.join("synth/case_sample-0.nii.gz")).unwrap();
    let mask_bytes = std::fs::read(dir.join("mask/case.nii.gz")).unwrap();

    assert_refused(
        &medddpm(&[
            "render",
            &p("synth/case_sample-0.nii.gz"),
            "--out",
            &p("synth/case_sample-0.nii.gz"),
        ]),
        &["--out", ".png"],
    );
    assert_refused(
        &medddpm(&[
            "render",
            &p("synth/case_sample-0.nii.gz"),
            "--out",
            &p("montage.png"),
            "--gif",
            &p("mask/case.nii.gz"),
        ]),
        &["--gif", ".gif"],
    );
    assert_eq!(
        std::fs::read(dir.join("synth/case_sample-0.nii.gz")).unwrap(),
        volume
    );
    assert_eq!(
        std::fs::read(dir.join("mask/case.nii.gz")).unwrap(),
        mask_bytes
    );
    assert!(
        !dir.join("montage.png").exists(),
        "refused before anything is written"
    );

    let (masks, synth, out) = (p("mask"), p("synth"), p("eval"));
    let eval = |extra: &[&str]| {
        let args = [
            "eval",
            "--masks",
            &masks,
            "--synthetic",
            &synth,
            "--out",
            &out,
        ];
        crate::common::medddpm_with(&args, extra)
    };
    let (ok, _, stderr) = eval(&[]);
    assert!(ok, "{stderr}");
    let first = std::fs::read(dir.join("eval/eval.json")).unwrap();
    std::fs::write(dir.join("eval/eval.json"), b"{\"kept\": true}").unwrap();
    assert_refused(&eval(&[]), &["eval.json", "--overwrite"]);
    assert_eq!(
        std::fs::read(dir.join("eval/eval.json")).unwrap(),
        b"{\"kept\": true}"
    );
    let (ok, _, stderr) = eval(&["--overwrite"]);
    assert!(ok, "{stderr}");
    assert_eq!(std::fs::read(dir.join("eval/eval.json")).unwrap(), first);
}

/// A volume on the masks' dimensions but elsewhere in space (shifted 10 mm), or holding a NaN
/// voxel, is refused with its name: its scores would be silently wrong, or NaN.
#[test]
fn eval_refuses_a_volume_elsewhere_in_space_or_with_nan_voxels() {
    let (tmp, image) = mask_and_synth(&[]);
    let dir = tmp.path();
    let p = |s: &str| dir.join(s).to_string_lossy().into_owned();
    let eval = || medddpm(&["eval", "--masks", &p("mask"), "--synthetic", &p("synth")]);
    let shifted = [
        [1.5, 0.0, 0.0, 10.0],
        [0.0, 1.5, 0.0, 0.0],
        [0.0, 0.0, 1.5, 0.0],
        [0.0, 0.0, 0.0, 1.0],
    ];
    Volume::new([N; 3], image.clone(), shifted)
        .unwrap()
        .write(dir.join("synth/case_sample-0.nii.gz"))
        .unwrap();
    assert_refused(&eval(), &["case_sample-0.nii.gz", "elsewhere in space"]);
    let mut with_nan = image.clone();
    with_nan[17] = f32::NAN;
    write(&dir.join("synth/case_sample-0.nii.gz"), with_nan);
    assert_refused(&eval(), &["case_sample-0.nii.gz", "NaN"]);
    write(&dir.join("synth/case_sample-0.nii.gz"), image);
    let (ok, _, stderr) = eval();
    assert!(ok, "{stderr}");
}

/// A head (the phantom's ball) filled with waves whose directions and phases follow `seed`:
/// distinct training cases that a copy must be told apart from.
fn textured(seed: u64) -> Vec<f32> {
    let (mask, _) = phantom();
    let texture = medddpm_testdata::wave_texture(seed.wrapping_add(1));
    let mut out = Vec::with_capacity(N * N * N);
    for (at, &m) in mask.iter().enumerate() {
        let p = [at % N, at / N % N, at / (N * N)].map(|x| x as f64 - 11.5);
        out.push(if m > 0.0 { texture(p) } else { -1.0 });
    }
    out
}

/// `eval --train-dir`: a sample that is a training volume is found as a near-copy of it, new
/// ones are not; alone (no masks) and beside the evaluation by mask.
#[test]
fn eval_train_dir_finds_a_copied_training_volume() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    make_folders(dir, &["train/mask", "train/image", "synth"]);
    let (mask, _) = phantom();
    for t in 0..4 {
        write(&dir.join(format!("train/mask/t{t}.nii.gz")), mask.clone());
        write(&dir.join(format!("train/image/t{t}.nii.gz")), textured(t));
    }
    write(&dir.join("synth/t2_seed-0_sample-0.nii.gz"), textured(2));
    write(&dir.join("synth/new_sample-0.nii.gz"), textured(10));
    write(&dir.join("synth/new_sample-1.nii.gz"), textured(11));
    // A scan in scanner units (a held-out real image, to calibrate): normalised like training.
    let scan = textured(12).iter().map(|v| 500.0 * v + 500.0).collect();
    write(&dir.join("synth/scan.nii.gz"), scan);
    let p = |s: &str| dir.join(s).to_string_lossy().into_owned();
    let (train, synth) = (p("train"), p("synth"));
    let args = ["eval", "--synthetic", &synth, "--train-dir", &train];

    let (ok, stdout, stderr) = crate::common::medddpm_with(
        &args,
        &["--out", &p("alone"), "--memorisation-candidates", "2"],
    );
    assert!(ok, "{stderr}");
    assert!(stdout.contains("## Memorisation"), "{stdout}");
    assert!(!stdout.contains("## Paired fidelity"), "{stdout}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("alone/eval.json")).unwrap()).unwrap();
    let m = &report["memorisation"];
    assert_eq!(m["n_training"], 4);
    assert_eq!(m["n_synthetic"], 4);
    assert_eq!(m["compared_pairs"], 4 * 2);
    assert_eq!(m["near_copies"], 1);
    assert_eq!(m["near_copy_fraction"], 0.25);
    assert_eq!(m["options"]["ssim_threshold"], 0.95);
    let rows = m["rows"].as_array().unwrap();
    let row = |name: &str| rows.iter().find(|r| r["synthetic"] == name).unwrap();
    let copy = row("t2_seed-0_sample-0");
    assert_eq!(copy["nearest"]["training"], "t2");
    assert!(copy["nearest"]["ssim"].as_f64().unwrap() > 0.9999);
    assert_eq!(copy["near_copy"], true);
    assert_eq!(copy["near_copy_of"]["training"], "t2");
    assert!(copy["second"]["ssim"].as_f64().unwrap() < 0.9);
    for new in ["new_sample-0", "new_sample-1", "scan"] {
        assert_eq!(row(new)["near_copy"], false, "{}", row(new));
        assert!(row(new)["nearest"]["ssim"].as_f64().unwrap() < 0.9);
    }
    let notes = report["notes"].to_string();
    assert!(
        notes.contains("1 of 4 synthetic volume(s) are named after a training case"),
        "{notes}"
    );
    assert!(
        notes.contains("1 --synthetic volume(s) outside [-1, 1] were normalised"),
        "{notes}"
    );

    // Beside the evaluation by mask (samples named after the masks): both sections.
    std::fs::create_dir(dir.join("by_mask")).unwrap();
    write(&dir.join("by_mask/t2_seed-0_sample-0.nii.gz"), textured(2));
    write(&dir.join("by_mask/t1_seed-0_sample-0.nii.gz"), textured(11));
    let (ok, stdout, stderr) = medddpm(&[
        "eval",
        "--synthetic",
        &p("by_mask"),
        "--train-dir",
        &train,
        "--masks",
        &p("train/mask"),
        "--real",
        &p("train/image"),
        "--out",
        &p("both"),
    ]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("## Paired fidelity") && stdout.contains("## Memorisation"));
    let both: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("both/eval.json")).unwrap()).unwrap();
    assert_eq!(both["memorisation"]["near_copies"], 1);
    assert!(!both["paired"]["rows"].as_array().unwrap().is_empty());

    // --real needs masks; a training file that is not a volume is named.
    assert_refused(
        &crate::common::medddpm_with(&args, &["--real", &p("train/image")]),
        &["--masks"],
    );
    std::fs::write(dir.join("train/image/t3.nii.gz"), b"not a volume").unwrap();
    assert_refused(
        &crate::common::medddpm_with(&args, &[]),
        &["t3.nii.gz", "training volume 't3'"],
    );
}
