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
        let args = [
            "train",
            "--backend",
            "cpu",
            "--experiment",
            file.to_str().unwrap(),
            "--run-dir",
            dir.to_str().unwrap(),
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
    // The lead alone writes: one run folder, its checkpoint verifies.
    let (ok, stderr) = medddpm(&["inspect", two.to_str().unwrap()]);
    assert!(ok, "{stderr}");
}

/// Every weight of a checkpoint's `file` (`model.mpk`, `ema.mpk`), in the network's order:
/// the files themselves differ between runs (burn records each parameter's random id).
fn saved_weights(run: &Path, file: &str) -> Vec<Vec<f32>> {
    use burn::backend::Flex;
    use burn::module::{Module, ModuleVisitor, Param};
    use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder, Recorder};
    use burn::tensor::{backend::Backend, Tensor};
    struct Flatten(Vec<Vec<f32>>);
    impl<B: Backend> ModuleVisitor<B> for Flatten {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.0
                .push(param.val().into_data().convert::<f32>().to_vec().unwrap());
        }
    }
    let config = medddpm_train::ExperimentConfig::from_file(&run.join("config.toml")).unwrap();
    let step = run.join("checkpoints").join("step-000003");
    let device = Default::default();
    let record = NamedMpkFileRecorder::<FullPrecisionSettings>::new()
        .load(step.join(file), &device)
        .unwrap();
    let unet: medddpm_unet::UNet<Flex> = config.model.init(&device).unwrap().load_record(record);
    let mut flat = Flatten(Vec::new());
    unet.visit(&mut flat);
    flat.0
}

/// Two ranks started as `torchrun` starts them (each `medddpm train` with RANK, WORLD_SIZE,
/// MASTER_ADDR, MASTER_PORT in its environment; the test sets them, as the machines of a
/// cluster would, with a rendezvous on 127.0.0.1): the same losses as one device and as
/// `--devices 0,1`, and the same weights and EMA as both, bit for bit.
#[test]
fn two_ranks_from_a_launcher_s_environment_train_like_two_devices() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("exp.toml");
    std::fs::write(&file, experiment(tmp.path())).unwrap();
    let args = |dir: &Path| -> Vec<String> {
        [
            "train",
            "--backend",
            "cpu",
            "--experiment",
            file.to_str().unwrap(),
            "--run-dir",
            dir.to_str().unwrap(),
        ]
        .map(String::from)
        .to_vec()
    };
    let one = tmp.path().join("one");
    let (ok, stderr) = medddpm(&args(&one).iter().map(String::as_str).collect::<Vec<_>>());
    assert!(ok, "{stderr}");
    let two = tmp.path().join("two");
    let mut two_args = args(&two);
    two_args.extend(["--devices", "0,1", "--launch", "processes"].map(String::from));
    let (ok, stderr) = medddpm(&two_args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(ok, "{stderr}");

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let cluster = tmp.path().join("cluster");
    // Rank 1 first: it waits for rank 0 to listen.
    let ranks: Vec<std::process::Child> = ["1", "0"]
        .iter()
        .map(|rank| {
            std::process::Command::new(env!("CARGO_BIN_EXE_medddpm"))
                .args(args(&cluster))
                .envs([
                    ("RANK", *rank),
                    ("LOCAL_RANK", *rank),
                    ("WORLD_SIZE", "2"),
                    ("LOCAL_WORLD_SIZE", "2"),
                    ("MASTER_ADDR", "127.0.0.1"),
                    ("MASTER_PORT", port.as_str()),
                    ("MEDDDPM_RDZV_TOKEN", "a-test-secret-of-some-length"),
                ])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<_> = ranks
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    for out in &outs {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let lead = String::from_utf8_lossy(&outs[1].stderr);
    assert!(lead.contains("rank 0 of 2 (torchrun)"), "{lead}");
    let rank1 = String::from_utf8_lossy(&outs[0].stderr);
    assert!(rank1.contains("joining rank 0 at 127.0.0.1:"), "{rank1}");
    assert_eq!(losses(&cluster), losses(&two));
    assert_eq!(losses(&cluster), losses(&one));
    assert_eq!(losses(&cluster).len(), 3);
    for file in ["model.mpk", "ema.mpk"] {
        let (a, b) = (saved_weights(&cluster, file), saved_weights(&two, file));
        assert!(!a.is_empty() && a == b, "{file}");
        // Halving each gradient is exact: two devices are one accumulating two micro-batches.
        assert!(a == saved_weights(&one, file), "{file}");
    }
}

/// A rank that hangs (SIGSTOP) while the run trains: rank 0 stops the run once the rank has
/// not come to a meeting for MEDDDPM_STEP_TIMEOUT seconds, naming it, and keeps its
/// checkpoints.
#[test]
fn a_hung_rank_stops_the_run_after_the_step_timeout() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("exp.toml");
    let long = crate::common::tiny_experiment(
        tmp.path(),
        4,
        "steps = 400\nlr = 1e-3\nbatch_size = 1\ngrad_accum = 2\nsave_every = 2\nsamples_per_checkpoint = 0\n",
    );
    std::fs::write(&file, long).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let run = tmp.path().join("run");
    let start = |rank: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_medddpm"))
            .args([
                "train",
                "--backend",
                "cpu",
                "--experiment",
                file.to_str().unwrap(),
            ])
            .args(["--run-dir", run.to_str().unwrap()])
            .envs([
                ("RANK", rank),
                ("WORLD_SIZE", "2"),
                ("MASTER_ADDR", "127.0.0.1"),
                ("MASTER_PORT", port.as_str()),
                ("MEDDDPM_RDZV_TOKEN", "a-test-secret-of-some-length"),
                ("MEDDDPM_STEP_TIMEOUT", "3"),
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut rank1 = start("1");
    let rank0 = start("0");
    let logged =
        || std::fs::read_to_string(run.join("metrics.jsonl")).map_or(0, |s| s.lines().count());
    let waited = std::time::Instant::now();
    while logged() < 3 && waited.elapsed().as_secs() < 120 {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(logged() >= 3, "the run did not start");
    let signal = |name: &str| {
        std::process::Command::new("kill")
            .args([name, &rank1.id().to_string()])
            .status()
            .unwrap()
    };
    signal("-STOP");
    let stopped = std::time::Instant::now();
    let out = rank0.wait_with_output().unwrap();
    let took = stopped.elapsed().as_secs_f64();
    signal("-CONT");
    let _ = rank1.kill();
    let _ = rank1.wait();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("replica 1")
            && stderr.contains("did not reach the run's next meeting within 3 s"),
        "{stderr}"
    );
    assert!(took < 30.0, "rank 0 took {took} s to stop");
    assert!(run.join("checkpoints").join("step-000002").is_dir());
}

/// A rank without the run's token, and one whose rank 0 never listens: each says what is
/// wrong, naming the address, instead of waiting for ever.
#[test]
fn a_launcher_s_rank_without_token_or_rank_0_is_told_so() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("exp.toml");
    std::fs::write(&file, experiment(tmp.path())).unwrap();
    let rank1 = |token: Option<&str>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_medddpm"));
        cmd.args([
            "train",
            "--backend",
            "cpu",
            "--experiment",
            file.to_str().unwrap(),
        ])
        .envs([
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "9"),
            ("MEDDDPM_RDZV_TIMEOUT", "1"),
        ])
        .env_remove("MEDDDPM_RDZV_TOKEN");
        if let Some(token) = token {
            cmd.env("MEDDDPM_RDZV_TOKEN", token);
        }
        let out = cmd.output().unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let stderr = rank1(None);
    assert!(stderr.contains("MEDDDPM_RDZV_TOKEN is not set"), "{stderr}");
    let stderr = rank1(Some("a-test-secret-of-some-length"));
    assert!(
        stderr.contains("cannot reach the lead at 127.0.0.1:9"),
        "{stderr}"
    );
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
    let (ok, stderr) = medddpm(&["inspect", run.to_str().unwrap()]);
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
