//! `medddpm train` started as a cluster launcher starts it, one process per rank, on the CPU:
//! each process gets torchrun's variables (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`)
//! as the machines of a cluster would, with a rendezvous on 127.0.0.1.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use crate::common::arg;
use crate::processes::{experiment, losses, medddpm};

mod nodes;

pub(crate) const TOKEN: &str = "a-test-secret-of-some-length";

/// `medddpm train` of the experiment `file` into `run` on the CPU.
pub(crate) fn train_args(file: &Path, run: &Path) -> Vec<String> {
    let (file, run) = (arg(file), arg(run));
    [
        "train",
        "--backend",
        "cpu",
        "--experiment",
        file,
        "--run-dir",
        run,
    ]
    .map(String::from)
    .to_vec()
}

/// `medddpm` with `args`, asserting that it succeeded.
fn succeeds(args: &[String]) {
    let (ok, stderr) = medddpm(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(ok, "{stderr}");
}

/// The run the launches are held to: `file` trained into `run` by `--devices 0,1 --launch
/// processes`.
pub(crate) fn train_on_two_devices(file: &Path, run: &Path) {
    let mut args = train_args(file, run);
    args.extend(["--devices", "0,1", "--launch", "processes"].map(String::from));
    succeeds(&args);
}

/// The same losses, weights and EMA as `reference`, bit for bit.
pub(crate) fn assert_same_run(run: &Path, reference: &Path) {
    assert_eq!(losses(run), losses(reference));
    assert_eq!(losses(run).len(), 3);
    for file in ["model.mpk", "ema.mpk"] {
        let (a, b) = (saved_weights(run, file), saved_weights(reference, file));
        assert!(!a.is_empty() && a == b, "{file}");
    }
}

/// Waits up to two minutes for `run` to log `steps` steps, and asserts that it did.
pub(crate) fn wait_for_steps(run: &Path, steps: usize) {
    let logged =
        || std::fs::read_to_string(run.join("metrics.jsonl")).map_or(0, |s| s.lines().count());
    let waited = std::time::Instant::now();
    while logged() < steps && waited.elapsed().as_secs() < 120 {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(logged() >= steps, "the run did not start");
}

/// A process's standard error, having asserted that it succeeded.
pub(crate) fn succeeded(out: Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    stderr
}

/// A process's standard error, having asserted that it failed.
pub(crate) fn failed(out: Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{stderr}");
    stderr
}

/// A port nothing listens on.
pub(crate) fn free_port() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port().to_string()
}

/// Rank `rank` of a run of two, as torchrun starts it, with `env` besides.
fn rank(args: &[String], rank: &str, port: &str, env: &[(&str, &str)]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_medddpm"))
        .args(args)
        .envs([
            ("RANK", rank),
            ("LOCAL_RANK", rank),
            ("WORLD_SIZE", "2"),
            ("LOCAL_WORLD_SIZE", "2"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", port),
            ("MEDDDPM_RDZV_TOKEN", TOKEN),
        ])
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A temporary folder with the experiment `train` (a `[train]` section) written in it.
pub(crate) fn experiment_file(train: Option<&str>) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("exp.toml");
    let text = match train {
        Some(train) => crate::common::tiny_experiment(tmp.path(), 4, train),
        None => experiment(tmp.path()),
    };
    std::fs::write(&file, text).unwrap();
    (tmp, file)
}

/// Every weight of a checkpoint's `file` (`model.mpk`, `ema.mpk`), in the network's order:
/// the files themselves differ between runs (burn records each parameter's random id).
pub(crate) fn saved_weights(run: &Path, file: &str) -> Vec<Vec<f32>> {
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

/// Two ranks: the same losses as one device and as `--devices 0,1`, and the same weights and
/// EMA as both, bit for bit; the weights of one process running both examples as one batch of
/// two within 5e-4 of the largest weight (its sums run in another order, and Adam dividing by
/// the small second moments of near-zero gradients grows their rounding: 7.7e-5 and 2.4e-4 on
/// two 2-core build machines).
#[test]
fn two_ranks_from_a_launcher_s_environment_train_like_two_devices() {
    let (tmp, file) = experiment_file(None);
    let one = tmp.path().join("one");
    succeeds(&train_args(&file, &one));
    let two = tmp.path().join("two");
    train_on_two_devices(&file, &two);

    let (port, cluster) = (free_port(), tmp.path().join("cluster"));
    let args = train_args(&file, &cluster);
    // Rank 1 first: it waits for rank 0 to listen.
    let rank1 = rank(&args, "1", &port, &[]);
    let rank0 = rank(&args, "0", &port, &[]);
    let [rank1, rank0] = [rank1, rank0].map(|c| succeeded(c.wait_with_output().unwrap()));
    assert!(rank0.contains("rank 0 of 2 (torchrun)"), "{rank0}");
    assert!(rank1.contains("joining rank 0 at 127.0.0.1:"), "{rank1}");
    assert_same_run(&cluster, &two);
    // Halving each gradient is exact: two devices are one accumulating two micro-batches.
    assert_same_run(&cluster, &one);
    let batch2 = tmp.path().join("batch2");
    let file2 = tmp.path().join("batch2.toml");
    let train = "steps = 3\nlr = 1e-3\nbatch_size = 2\ngrad_accum = 1\nreference_batch_scaling = false\nsave_every = 3\nsamples_per_checkpoint = 0\nema_start = 1\n";
    std::fs::write(&file2, crate::common::tiny_experiment(tmp.path(), 4, train)).unwrap();
    succeeds(&train_args(&file2, &batch2));
    let (a, b) = (
        saved_weights(&cluster, "model.mpk"),
        saved_weights(&batch2, "model.mpk"),
    );
    let scale = b.iter().flatten().fold(0f32, |m, x| m.max(x.abs()));
    let diff = a.iter().flatten().zip(b.iter().flatten());
    let diff = diff.fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    assert!(
        diff / scale < 5e-4,
        "{} of the largest weight",
        diff / scale
    );
}

/// A rank that hangs (SIGSTOP) while the run trains: rank 0 stops the run once the rank has
/// not come to a meeting for MEDDDPM_STEP_TIMEOUT seconds, naming it, and keeps its
/// checkpoints.
#[test]
fn a_hung_rank_stops_the_run_after_the_step_timeout() {
    let (tmp, file) = experiment_file(Some(
        "steps = 400\nlr = 1e-3\nbatch_size = 1\ngrad_accum = 2\nsave_every = 2\nsamples_per_checkpoint = 0\n",
    ));
    let (port, run) = (free_port(), tmp.path().join("run"));
    let args = train_args(&file, &run);
    let timeout = [("MEDDDPM_STEP_TIMEOUT", "3")];
    let mut rank1 = rank(&args, "1", &port, &timeout);
    let rank0 = rank(&args, "0", &port, &timeout);
    wait_for_steps(&run, 3);
    // SAFETY: sends a signal to the rank's process, which this test started.
    let signal = |sig| assert_eq!(unsafe { libc::kill(rank1.id() as i32, sig) }, 0);
    signal(libc::SIGSTOP);
    let stopped = std::time::Instant::now();
    let out = rank0.wait_with_output().unwrap();
    let took = stopped.elapsed().as_secs_f64();
    signal(libc::SIGCONT);
    let _ = rank1.kill();
    let _ = rank1.wait();
    let stderr = failed(out);
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
    let (tmp, file) = experiment_file(None);
    let args = train_args(&file, &tmp.path().join("run"));
    let rank1 = |token: &str| {
        let env = [("MEDDDPM_RDZV_TIMEOUT", "1"), ("MEDDDPM_RDZV_TOKEN", token)];
        failed(rank(&args, "1", "9", &env).wait_with_output().unwrap())
    };
    let stderr = rank1("");
    assert!(stderr.contains("MEDDDPM_RDZV_TOKEN is not set"), "{stderr}");
    let stderr = rank1(TOKEN);
    assert!(
        stderr.contains("cannot reach the lead at 127.0.0.1:9"),
        "{stderr}"
    );
}

/// A rank whose command line resolves other compute settings than rank 0's is refused with
/// both, before the first step.
#[test]
fn ranks_computing_differently_are_refused() {
    let (tmp, file) = experiment_file(None);
    let (port, run) = (free_port(), tmp.path().join("run"));
    let args = train_args(&file, &run);
    let mut other = args.clone();
    other.extend(["--layout", "ndhwc"].map(String::from));
    let rank1 = rank(&other, "1", &port, &[]);
    let rank0 = rank(&args, "0", &port, &[]);
    let outs = [rank1, rank0].map(|c| c.wait_with_output().unwrap());
    assert!(outs.iter().all(|o| !o.status.success()));
    let rank1 = String::from_utf8_lossy(&outs[0].stderr);
    assert!(
        rank1.contains("this process computes as") && rank1.contains("Ndhwc"),
        "{rank1}"
    );
    assert!(!run.join("metrics.jsonl").exists() || losses(&run).is_empty());
}
