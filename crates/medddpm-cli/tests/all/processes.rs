//! `--launch processes` end to end on the CPU: `medddpm train` starts a replica process
//! (`medddpm replica`) per extra device index, and the run trains like one device
//! accumulating the same micro-batches (`bench --devices --launch processes`: `cli.rs`).

use std::path::Path;

use crate::common::arg;

pub(crate) fn medddpm(args: &[&str]) -> (bool, String) {
    let (ok, _, stderr) = crate::common::medddpm(args);
    (ok, stderr)
}

pub(crate) fn experiment(dir: &Path) -> String {
    crate::common::tiny_experiment(
        dir,
        4,
        "steps = 3\nlr = 1e-3\nbatch_size = 1\ngrad_accum = 2\nsave_every = 3\nsamples_per_checkpoint = 0\nema_start = 1\n",
    )
}

/// Every step's loss as `metrics.jsonl` logged it.
pub(crate) fn losses(run: &Path) -> Vec<f64> {
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
        let args = [
            "train",
            "--backend",
            "cpu",
            "--experiment",
            arg(&file),
            "--run-dir",
            arg(&dir),
        ];
        let (ok, _, stderr) = crate::common::medddpm_with(&args, extra);
        assert!(ok, "{stderr}");
        (dir, stderr)
    };
    let (one, _) = run("one", &[]);
    let (two, stderr) = run("two", &["--devices", "0,1", "--launch", "processes"]);
    assert!(stderr.contains("one process per device"), "{stderr}");
    assert_eq!(losses(&two), losses(&one));
    assert_eq!(losses(&one).len(), 3);
    // The lead alone writes: one run folder, its checkpoint verifies, one event file.
    let (ok, stderr) = medddpm(&["inspect", arg(&two)]);
    assert!(ok, "{stderr}");
    let event_files = std::fs::read_dir(&two)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains("tfevents")
        })
        .count();
    assert_eq!(event_files, 1);
}

#[test]
fn the_replica_command_is_only_for_a_lead() {
    let lead = ["--lead", "127.0.0.1:1", "--rank", "1", "--world", "2"];
    let run = crate::common::medddpm_with(&["replica"], &lead);
    crate::common::assert_refused(&run, &["--launch processes"]);
}

/// A replica process killed mid-run: the lead stops and names how it ended (the signal), not
/// the socket's "failed to fill whole buffer".
#[test]
#[cfg(target_os = "linux")]
fn a_killed_replica_is_named_with_its_signal() {
    let tmp = tempfile::tempdir().unwrap();
    let (lead, _run) = long_two_process_run(tmp.path(), false);
    let replica: i32 = children(&lead)
        .split_whitespace()
        .next()
        .expect("the lead's replica process")
        .parse()
        .unwrap();
    let (out, stderr) = signal_and_wait(lead, replica, libc::SIGKILL);
    assert!(!out.status.success());
    assert!(
        stderr.contains("replica 1") && stderr.contains("signal: 9"),
        "{stderr}"
    );
    assert!(!stderr.contains("fill whole buffer"), "{stderr}");
}

/// SIGTERM to the whole process group (what a scheduler or Ctrl-C does) of a run in two
/// processes: the lead and its replica stop at the same step boundary, the lead writes that
/// step's checkpoint and exits with 143, and no replica is left behind.
#[test]
#[cfg(target_os = "linux")]
fn a_signal_stops_every_process_at_one_step_with_a_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let (lead, run) = long_two_process_run(tmp.path(), true);
    let replica = children(&lead);
    let group = -(lead.id() as i32);
    let (out, stderr) = signal_and_wait(lead, group, libc::SIGTERM);
    assert_eq!(out.status.code(), Some(143), "{stderr}");
    let steps = losses(&run).len();
    let latest = std::fs::read_to_string(run.join("checkpoints/latest")).unwrap();
    assert_eq!(latest.trim(), format!("step-{steps:06}"), "{stderr}");
    std::thread::sleep(std::time::Duration::from_millis(500));
    for pid in replica.split_whitespace() {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| s.contains(") Z")),
            "replica {pid} still runs"
        );
    }
    let (ok, stderr) = medddpm(&["inspect", arg(&run)]);
    assert!(ok, "{stderr}");
}

/// The process ids of `lead`'s children, space-separated.
#[cfg(target_os = "linux")]
fn children(lead: &std::process::Child) -> String {
    std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", lead.id())).unwrap_or_default()
}

/// Sends `sig` to `pid` (a process group when negative), then waits for `lead`: its output and
/// standard error.
#[cfg(target_os = "linux")]
fn signal_and_wait(
    lead: std::process::Child,
    pid: i32,
    sig: i32,
) -> (std::process::Output, String) {
    // SAFETY: a signal to a child process of this test, or to its process group.
    unsafe { libc::kill(pid, sig) };
    let out = lead.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stderr)
}

/// A long two-process CPU run in `dir` (in a process group of its own with `group`), returned
/// once it has logged a step, so its replica is training: the lead and the run folder.
#[cfg(target_os = "linux")]
fn long_two_process_run(dir: &Path, group: bool) -> (std::process::Child, std::path::PathBuf) {
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let file = dir.join("exp.toml");
    let long = experiment(dir).replace("steps = 3\n", "steps = 100000\n");
    std::fs::write(&file, long).unwrap();
    let run = dir.join("run");
    let mut command = Command::new(env!("CARGO_BIN_EXE_medddpm"));
    command
        .args([
            "train",
            "--backend",
            "cpu",
            "--devices",
            "0,1",
            "--launch",
            "processes",
        ])
        .arg("--experiment")
        .arg(&file)
        .arg("--run-dir")
        .arg(&run)
        .stderr(Stdio::piped())
        .stdout(Stdio::null());
    if group {
        command.process_group(0);
    }
    let lead = command.spawn().unwrap();
    let start = Instant::now();
    while !run.join("metrics.jsonl").is_file() {
        assert!(start.elapsed() < Duration::from_secs(300), "no step logged");
        std::thread::sleep(Duration::from_millis(100));
    }
    (lead, run)
}
