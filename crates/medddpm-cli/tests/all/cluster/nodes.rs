//! The manual launch across machines on the CPU: `medddpm train --nnodes N --node-rank R --rdzv
//! 127.0.0.1:PORT` once per "machine", each starting its ranks (one per `--devices` entry) with
//! torchrun's variables, rank 0 listening on 127.0.0.1.

use std::process::{Child, Command, Stdio};

use super::{
    assert_same_run, experiment_file, failed, free_port, succeeded, train_args,
    train_on_two_devices, wait_for_steps, TOKEN,
};
use crate::processes::losses;

/// One machine's `medddpm train` of `args` with the launch's `flags` and `env` besides, outside
/// any launcher.
fn node(args: &[String], flags: &[&str], env: &[(&str, &str)]) -> Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_medddpm"));
    for name in ["RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID"] {
        command.env_remove(name);
    }
    command
        .args(args)
        .args(flags)
        .env("MEDDDPM_RDZV_TOKEN", TOKEN)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Two machines of one device each (`--nnodes 2 --devices 0` twice), and one machine starting
/// two ranks (`--nnodes 1 --devices 0,1`), train as `--devices 0,1` does.
#[test]
fn machines_launched_by_hand_train_like_two_devices() {
    let (tmp, file) = experiment_file(None);
    let two = tmp.path().join("two");
    train_on_two_devices(&file, &two);

    let (port, nodes) = (free_port(), tmp.path().join("nodes"));
    let (args, rdzv) = (train_args(&file, &nodes), format!("127.0.0.1:{port}"));
    let flags = |r| {
        [
            "--nnodes",
            "2",
            "--node-rank",
            r,
            "--rdzv",
            &rdzv,
            "--devices",
            "0",
        ]
    };
    // Node 1 first: its rank waits for rank 0 to listen.
    let node1 = node(&args, &flags("1"), &[]);
    let node0 = node(&args, &flags("0"), &[]);
    let [node1, node0] = [node1, node0].map(|c| succeeded(c.wait_with_output().unwrap()));
    assert!(
        node0.contains("node 0 of 2: starting ranks 0..0 of 2"),
        "{node0}"
    );
    assert!(node0.contains("rank 0 of 2 (manual launch)"), "{node0}");
    assert!(node1.contains("rank 1 of 2 (manual launch), device 0: joining rank 0 at 127.0.0.1:"));
    assert_same_run(&nodes, &two);

    let (port, one) = (free_port(), tmp.path().join("one-node"));
    let rdzv = format!("127.0.0.1:{port}");
    let flags = one_machine_of_two(&rdzv);
    let out = node(&train_args(&file, &one), &flags, &[]);
    let stderr = succeeded(out.wait_with_output().unwrap());
    assert!(
        stderr.contains("starting ranks 0..1 of 2 on devices [0, 1]"),
        "{stderr}"
    );
    assert_same_run(&one, &two);
}

/// SIGTERM to a machine's launch reaches its ranks: rank 0 stops the run after the step under
/// way with a checkpoint of it, and the launch ends as the signal ended the run (143).
#[test]
fn a_machine_s_launch_forwards_sigterm_to_its_ranks() {
    let (tmp, file) = experiment_file(Some(
        "steps = 1000\nlr = 1e-3\nbatch_size = 1\ngrad_accum = 2\nsave_every = 500\nsamples_per_checkpoint = 0\n",
    ));
    let (port, run) = (free_port(), tmp.path().join("run"));
    let rdzv = format!("127.0.0.1:{port}");
    let flags = one_machine_of_two(&rdzv);
    let launch = node(&train_args(&file, &run), &flags, &[]);
    wait_for_steps(&run, 2);
    // SAFETY: sends a signal to the process this test started.
    assert_eq!(unsafe { libc::kill(launch.id() as i32, libc::SIGTERM) }, 0);
    let out = launch.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + libc::SIGTERM), "{stderr}");
    assert!(stderr.contains("stopped by signal 15"), "{stderr}");
    let steps = losses(&run).len();
    assert!(steps < 1000, "{steps}");
    let checkpoint = run.join("checkpoints").join(format!("step-{steps:06}"));
    assert!(checkpoint.is_dir(), "no {}: {stderr}", checkpoint.display());
}

/// A rank that fails is named with its exit status by its machine's launch; flags that
/// contradict each other or a launcher's environment are refused before anything starts.
#[test]
fn a_machine_s_failed_rank_and_wrong_flags_are_named() {
    let (tmp, file) = experiment_file(None);
    let args = train_args(&file, &tmp.path().join("run"));
    let flags = |r| ["--nnodes", "2", "--node-rank", r, "--rdzv", "127.0.0.1:9"];
    let rdzv_timeout = [("MEDDDPM_RDZV_TIMEOUT", "1")];
    let out = node(&args, &flags("1"), &rdzv_timeout)
        .wait_with_output()
        .unwrap();
    let stderr = failed(out);
    assert!(
        stderr.contains("cannot reach the lead at 127.0.0.1:9")
            && stderr.contains("local rank 0 (rank 1 of 2, device 0) ended with exit status: 1"),
        "{stderr}"
    );
    let refused = |flags: &[&str], env: &[(&str, &str)], says: &str| {
        let stderr = failed(node(&args, flags, env).wait_with_output().unwrap());
        assert!(stderr.contains(says), "{stderr}");
    };
    refused(&flags("2"), &[], "node ranks run from 0 to 1");
    refused(&flags("0"), &[("RANK", "0")], "RANK is set");
    refused(
        &["--nnodes", "2", "--node-rank", "0"],
        &[],
        "--nnodes needs --rdzv",
    );
    refused(
        &flags("0"),
        &[("MEDDDPM_RDZV_TOKEN", "")],
        "MEDDDPM_RDZV_TOKEN is not set",
    );
}

/// One machine of two ranks (`--nnodes 1 --node-rank 0 --devices 0,1`) meeting at `rdzv`.
fn one_machine_of_two(rdzv: &str) -> [&str; 8] {
    [
        "--nnodes",
        "1",
        "--node-rank",
        "0",
        "--rdzv",
        rdzv,
        "--devices",
        "0,1",
    ]
}
