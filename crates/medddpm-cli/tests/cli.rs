//! The `medddpm` command end to end: inspect prints what it reads, bad input is an error that
//! names the problem and exits non-zero.

use std::process::Command;

fn medddpm(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_medddpm"))
        .args(args)
        .output()
        .expect("runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

use medddpm_testdata::shared_dir;

#[test]
fn inspect_resolves_every_built_in_experiment() {
    for name in ["quickstart", "whole-head-128", "brats-192"] {
        let (ok, stdout, stderr) = medddpm(&["inspect", name]);
        assert!(ok, "{name}: {stderr}");
        assert!(
            stdout.contains("[train]") && stdout.contains("timesteps = 250"),
            "{name}: {stdout}"
        );
    }
    let (_, stdout, _) = medddpm(&["inspect", "whole-head-128"]);
    assert!(
        stdout.contains("ema_decay = 0.995") && stdout.contains("grad_accum = 2"),
        "{stdout}"
    );
}

#[test]
fn inspect_prints_a_nifti_header() {
    let mask = shared_dir().join("datasets/medddpm-samples/whole_head/mask/sample_3.nii.gz");
    let (ok, stdout, stderr) = medddpm(&["inspect", mask.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("[128, 128, 128]") && stdout.contains("U8"),
        "{stdout}"
    );
}

#[test]
fn bad_input_is_a_clear_error() {
    let (ok, _, stderr) = medddpm(&["train", "--experiment", "no-such-experiment"]);
    assert!(
        !ok && stderr.contains("no-such-experiment") && stderr.contains("quickstart"),
        "{stderr}"
    );

    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nowhere");
    let (ok, _, stderr) = medddpm(&["train", "--resume", missing.to_str().unwrap()]);
    assert!(!ok && stderr.contains("not a run folder"), "{stderr}");

    let masks = tmp.path().join("empty");
    std::fs::create_dir_all(&masks).unwrap();
    let out = tmp.path().join("out");
    let (ok, _, stderr) = medddpm(&[
        "sample",
        "--checkpoint",
        missing.to_str().unwrap(),
        "--masks",
        masks.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--backend",
        "cpu",
    ]);
    assert!(!ok && stderr.contains("empty"), "{stderr}");

    let (ok, _, stderr) = medddpm(&["train", "--backend", "cuda", "--steps", "1"]);
    if !cfg!(feature = "cuda") {
        assert!(!ok && stderr.contains("--features cuda"), "{stderr}");
    }
}
