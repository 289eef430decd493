//! The `medddpm` command end to end: inspect prints what it reads, bad input is an error that
//! names the problem and exits non-zero.

use std::process::Command;

use crate::common::{arg, assert_mentions, assert_refused, medddpm, medddpm_with, on_cpu};

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
    assert_mentions(&stdout, &["ema_decay = 0.995", "grad_accum = 2"]);
}

#[test]
fn inspect_prints_a_nifti_header() {
    let mask = shared_dir().join("datasets/medddpm-samples/whole_head/mask/sample_3.nii.gz");
    let (ok, stdout, stderr) = medddpm(&["inspect", arg(&mask)]);
    assert!(ok, "{stderr}");
    assert_mentions(&stdout, &["[128, 128, 128]", "U8"]);
}

#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    // `medddpm inspect FILE | head`: the reader is gone before the header is printed.
    use std::process::Stdio;
    let mask = shared_dir().join("datasets/medddpm-samples/whole_head/mask/sample_3.nii.gz");
    let mut child = Command::new(env!("CARGO_BIN_EXE_medddpm"))
        .args(["inspect", arg(&mask)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert!(
            out.status.success() || out.status.signal() == Some(13),
            "{:?}: {stderr}",
            out.status
        );
    }
}

#[test]
fn output_that_cannot_be_written_is_one_error_line() {
    // `medddpm inspect FILE > /dev/full`: every write fails with "no space left on device".
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        return; // not a Linux machine
    };
    let mask = shared_dir().join("datasets/medddpm-samples/whole_head/mask/sample_3.nii.gz");
    let out = Command::new(env!("CARGO_BIN_EXE_medddpm"))
        .args(["inspect", arg(&mask)])
        .stdout(full)
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        !stderr.contains("panicked") && stderr.contains("error: cannot write to standard output"),
        "{stderr}"
    );
}

/// `sample` runs on one device: its help leaves out the data-parallel training switches.
#[test]
fn sample_help_leaves_out_the_training_switches() {
    let (ok, stdout, stderr) = medddpm(&["sample", "--help"]);
    assert!(ok, "{stderr}");
    assert_mentions(&stdout, &["--devices", "--samples-per-mask"]);
    assert!(
        !stdout.contains("--collective") && !stdout.contains("--launch"),
        "{stdout}"
    );
    let (_, stdout, _) = medddpm(&["train", "--help"]);
    assert_mentions(&stdout, &["--collective", "--launch"]);
}

#[test]
fn bench_exits_non_zero_when_a_configuration_fails() {
    // A zero timeout stops the configuration's process at once.
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("bench");
    let extra = ["--model", "tiny", "--size", "16", "--timeout", "0"];
    assert_refused(
        &crate::common::cpu_bench(&out, "ndhwc", &extra),
        &["failed: cpu/fp32/ndhwc"],
    );
    assert!(
        out.join("results.md").is_file(),
        "the reports are still written"
    );
}

#[test]
fn bench_devices_measures_each_count_in_its_own_process() {
    // The CPU backend is one device: the count of one is measured and recorded, the count of
    // two fails in its own process, which the run reports before exiting non-zero.
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("scaling");
    let (ok, stdout, stderr) = bench_devices(&out, &[]);
    assert!(!ok, "{stdout}");
    assert!(
        stderr.contains("1 device(s): ") && stderr.contains("2 device(s): failed"),
        "{stderr}"
    );
    assert!(
        stderr.contains("the measurement on [2] device(s) failed"),
        "{stderr}"
    );
    let records = scaling_records(&out);
    assert_eq!(records.len(), 1, "{records:?}");
    let r = &records[0];
    assert_eq!(
        (r["devices"].as_u64(), r["collective"].as_str()),
        (Some(1), Some("none"))
    );
    assert_eq!(r["step_ms"].as_array().map(|a| a.len()), Some(2));
    assert_eq!(r["efficiency"].as_f64(), Some(1.0));
    assert!(r["samples_per_s"].as_f64().unwrap() > 0.0);
}

/// `bench --devices 0,1` of the tiny model on the CPU, two timed steps, into `out`.
fn bench_devices(out: &std::path::Path, extra: &[&str]) -> (bool, String, String) {
    let args = [
        "bench",
        "--devices",
        "0,1",
        "--backends",
        "cpu",
        "--precisions",
        "fp32",
        "--layouts",
        "ncdhw",
        "--model",
        "tiny",
        "--size",
        "16",
        "--warmup",
        "0",
        "--steps",
        "2",
        "--out",
        arg(out),
    ];
    medddpm_with(&args, extra)
}

/// The records of `out/scaling.jsonl`.
fn scaling_records(out: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(out.join("scaling.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn bench_devices_measures_processes() {
    // With a process per device, the CPU measures two (each process its own CPU backend).
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("scaling");
    let (ok, _, stderr) = bench_devices(&out, &["--launch", "processes"]);
    assert!(ok, "{stderr}");
    let records = scaling_records(&out);
    assert_eq!(records.len(), 2);
    assert_eq!(records[1]["launch"].as_str(), Some("processes"));
    assert_eq!(records[1]["collective"].as_str(), Some("host"));
    assert_eq!(records[0]["launch"].as_str(), Some("threads"));
}

#[test]
fn bad_input_is_a_clear_error() {
    assert_refused(
        &medddpm(&["train", "--experiment", "no-such-experiment"]),
        &["no-such-experiment", "quickstart"],
    );

    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nowhere");
    assert_refused(
        &medddpm(&["train", "--resume", arg(&missing)]),
        &["not a run folder"],
    );

    let masks = tmp.path().join("empty");
    std::fs::create_dir_all(&masks).unwrap();
    let out = tmp.path().join("out");
    assert_refused(
        &medddpm(&[
            "sample",
            "--checkpoint",
            arg(&missing),
            "--masks",
            arg(&masks),
            "--out",
            arg(&out),
            "--backend",
            "cpu",
        ]),
        &["empty"],
    );

    // An empty experiment file would be the 40M-parameter model for 100,000 steps.
    let empty = tmp.path().join("empty.toml");
    std::fs::write(&empty, "# nothing yet\n").unwrap();
    for cmd in ["inspect", "train"] {
        let args: Vec<&str> = match cmd {
            "inspect" => vec!["inspect", arg(&empty)],
            _ => vec!["train", "--experiment", arg(&empty)],
        };
        let (ok, _, stderr) = medddpm(&args);
        assert!(
            !ok && stderr.contains("empty.toml") && stderr.contains("sets nothing"),
            "{cmd}: {stderr}"
        );
    }

    let (ok, _, stderr) = medddpm(&["train", "--backend", "cuda", "--steps", "1"]);
    if !cfg!(feature = "cuda") {
        assert!(!ok && stderr.contains("--features cuda"), "{stderr}");
    }
}

#[test]
fn bench_runs_a_matrix_in_child_processes_and_writes_every_report() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("bench");
    let (ok, stdout, stderr) = on_cpu(
        "bench",
        "fp32,tf32",
        &out,
        &[
            "--layouts",
            "ndhwc",
            "--model",
            "tiny",
            "--size",
            "8",
            "--warmup",
            "0",
            "--steps",
            "1",
        ],
    );
    assert!(ok, "{stderr}");
    let lines = std::fs::read_to_string(out.join("results.jsonl")).unwrap();
    let records: Vec<serde_json::Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 2, "{lines}");
    assert_eq!(records[0]["status"], "ok");
    assert!(records[0]["train_step_median_ms"].as_f64().unwrap() > 0.0);
    assert!(records[0]["agreement_rel_l2"].as_f64().unwrap() < 1e-5);
    assert_eq!(records[1]["status"], "unsupported");
    assert!(records[1]["message"].as_str().unwrap().contains("tf32"));
    for file in ["results.csv", "results.md", "results.png"] {
        assert!(out.join(file).is_file(), "{file} missing");
    }
    assert!(stdout.contains("cpu/fp32/ndhwc"), "{stdout}");
    // The bench library's notes reach stderr through the binary's logger.
    assert!(stderr.contains("== cpu / fp32 / ndhwc: Ok"), "{stderr}");
    // Reports can be rebuilt from the JSON lines alone.
    std::fs::remove_file(out.join("results.md")).unwrap();
    let (ok, _, stderr) = medddpm(&["bench", "--report-only", "--out", arg(&out)]);
    assert!(ok && out.join("results.md").is_file(), "{stderr}");

    // Arguments that cannot work are refused before any configuration runs.
    for (args, says) in [
        (
            &["--model", "whole-head", "--size", "40"][..],
            "multiple of 16",
        ),
        (
            &["--batch", "0", "--size", "16"][..],
            "--batch must be at least 1",
        ),
    ] {
        let base = ["bench", "--backends", "cpu", "--out", arg(&out)];
        let (ok, _, stderr) = medddpm_with(&base, args);
        assert!(!ok && stderr.contains(says), "{args:?}: {stderr}");
    }
}

#[test]
fn check_compares_every_configuration_with_the_float64_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("check");
    let (ok, stdout, stderr) = on_cpu("check", "fp32,bf16", &out, &["--model", "tiny"]);
    assert!(ok, "{stderr}");
    let lines = std::fs::read_to_string(out.join("results.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 4, "{lines}");
    for l in lines.lines() {
        let r: serde_json::Value = serde_json::from_str(l).unwrap();
        assert_eq!(r["status"], "ok", "{l}");
        assert!(r["train_step_median_ms"].is_null());
        let err = r["agreement_rel_l2"].as_f64().unwrap();
        let tol = r["agreement_tolerance"].as_f64().unwrap();
        assert!(err < tol, "{l}");
    }
    assert!(stdout.contains("cpu/bf16/ndhwc"), "{stdout}");
}
