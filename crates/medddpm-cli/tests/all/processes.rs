//! `--launch processes` end to end on the CPU: `medddpm train` starts a replica process
//! (`medddpm replica`) per extra device index, and the run trains like one device
//! accumulating the same micro-batches (`bench --devices --launch processes`: `cli.rs`).

use std::path::Path;

fn medddpm(args: &[&str]) -> (bool, String) {
    let (ok, _, stderr) = crate::common::medddpm(args);
    (ok, stderr)
}

fn experiment(dir: &Path) -> String {
    crate::common::tiny_experiment(
        dir,
        4,
        "steps = 3\nlr = 1e-3\nbatch_size = 1\ngrad_accum = 2\nsave_every = 3\nsamples_per_checkpoint = 0\nema_start = 1\n",
    )
}

/// Every step's loss as `metrics.jsonl` logged it.
fn losses(run: &Path) -> Vec<f64> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["loss"]
                .as_f64()
                .unwrap()
        })
        .collect()
}

#[test]
fn two_cpu_processes_train_like_one_device() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("exp.toml");
    std::fs::write(&file, experiment(tmp.path())).unwrap();
    let run = |name: &str, extra: &[&str]| {
        let dir = tmp.path().join(name);
        let mut args = vec![
            "train",
            "--backend",
            "cpu",
            "--experiment",
            file.to_str().unwrap(),
            "--run-dir",
            dir.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let (ok, stderr) = medddpm(&args);
        assert!(ok, "{stderr}");
        (dir, stderr)
    };
    let (one, _) = run("one", &[]);
    let (two, stderr) = run("two", &["--devices", "0,1", "--launch", "processes"]);
    assert!(stderr.contains("one process per device"), "{stderr}");
    assert_eq!(losses(&two), losses(&one));
    assert_eq!(losses(&one).len(), 3);
    // The lead alone writes: one run folder, its checkpoint verifies.
    let (ok, stderr) = medddpm(&["inspect", two.to_str().unwrap()]);
    assert!(ok, "{stderr}");
}

#[test]
fn the_replica_command_is_only_for_a_lead() {
    let (ok, stderr) = medddpm(&[
        "replica",
        "--lead",
        "127.0.0.1:1",
        "--rank",
        "1",
        "--world",
        "2",
    ]);
    assert!(!ok);
    assert!(stderr.contains("--launch processes"), "{stderr}");
}
