//! kill -9 at random moments: a small training run is killed 20 times (some kills land while a
//! checkpoint is being written) and resumed each time. After every kill the latest checkpoint
//! verifies and loads, the run resumes from it, at most the steps since it are lost, and the run
//! finally completes; then `inspect` vouches for its checkpoint, and refuses it once damaged.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use burn::backend::Flex;
use medddpm_train::checkpoint::read_state;
use medddpm_train::integrity::verify_checkpoint;
use medddpm_train::{load_sampling_model, RunDir, WeightsSource};

use crate::common::arg;

const SAVE_EVERY: usize = 3;
const STEPS: usize = 100_000; // never reached: every session is killed, then one finishes

fn experiment(dir: &Path, steps: usize) -> String {
    crate::common::tiny_experiment(
        dir,
        2,
        &format!(
            "steps = {steps}\nlr = 1e-3\nsave_every = {SAVE_EVERY}\nsamples_per_checkpoint = 0\nkeep_checkpoints = 3\nema_start = 2\n"
        ),
    )
}

/// The test experiment written to `dir/<toml_name>`, its run folder `dir/run`, and the
/// `medddpm train` command that starts that run or, with `resume`, resumes it.
fn killed_run(dir: &Path, toml_name: &str) -> (PathBuf, RunDir, impl Fn(bool) -> Command) {
    let toml = dir.join(toml_name);
    std::fs::write(&toml, experiment(dir, STEPS)).unwrap();
    let run_dir = dir.join("run");
    let run = RunDir::new(&run_dir);
    let train = {
        let run_dir = run_dir.clone();
        move |resume: bool| {
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_medddpm"));
            match resume {
                true => cmd.args(["train", "--resume", arg(&run_dir)]),
                false => cmd.args([
                    "train",
                    "--experiment",
                    arg(&toml),
                    "--run-dir",
                    arg(&run_dir),
                ]),
            };
            cmd
        }
    };
    (run_dir, run, train)
}

/// The last step `metrics.jsonl` records.
fn last_logged_step(run: &Path) -> usize {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["step"].as_u64())
        .max()
        .unwrap_or(0) as usize
}

/// The half-written checkpoints (temporary folders) with their modification times: a folder
/// left by an earlier kill keeps its time until a later session rewrites it.
fn half_written(run: &RunDir) -> HashSet<(String, SystemTime)> {
    let Ok(dir) = std::fs::read_dir(run.checkpoints()) else {
        return HashSet::new();
    };
    dir.filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp-"))
        .filter_map(|e| {
            let modified = e.metadata().ok()?.modified().ok()?;
            Some((e.file_name().to_string_lossy().into_owned(), modified))
        })
        .collect()
}

#[test]
fn twenty_kills_lose_at_most_the_steps_since_the_last_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let (run_dir, run, train) = killed_run(tmp.path(), "crash.toml");
    let bin = env!("CARGO_BIN_EXE_medddpm");

    // Kill times spread over a session's start (loading, no step yet) and its steps; a fixed
    // sequence, so a failure reproduces.
    let mut state = 0x9e37_79b9u32;
    let mut next_delay = || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        Duration::from_millis(150 + (state % 2500) as u64)
    };
    let mut last_step = 0usize;
    let mut kills_during_a_write = 0;
    for kill in 0..20 {
        let latest_before = run.latest_checkpoint().unwrap();
        let mut cmd = train(latest_before.is_some());
        let before = half_written(&run);
        // This session is writing a checkpoint when a temporary folder is new or was touched.
        let writing = || !half_written(&run).is_subset(&before);
        let mut child = cmd
            .args(["--backend", "cpu"])
            // Each checkpoint stays half-written for 150 ms (after the weights, before the
            // config, state, checksums and the renames), so many kills land inside one.
            .env("MEDDDPM_TEST_CHECKPOINT_DELAY_MS", "150")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Every fifth kill waits for a checkpoint write to begin, so some kills land inside one
        // however fast or slow the machine; the others come at a fixed pseudo-random delay,
        // counted from the session's start or, every fifth from the third, from the end of its
        // first checkpoint, so the run advances on a machine too loaded to reach one within the
        // longest delay.
        let aim_at_a_write = kill % 5 == 4;
        let delay = next_delay();
        let start = Instant::now();
        let mut delay_from = (kill % 5 != 2).then_some(start);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("kill {kill}: training ended by itself ({status}) before the kill");
            }
            if aim_at_a_write || delay_from.is_none() {
                assert!(
                    start.elapsed() < Duration::from_secs(120),
                    "kill {kill}: no checkpoint write began or ended within 120 s"
                );
            }
            let due = if aim_at_a_write {
                writing()
            } else {
                if delay_from.is_none() && run.latest_checkpoint().unwrap() != latest_before {
                    delay_from = Some(Instant::now());
                }
                delay_from.is_some_and(|from| from.elapsed() >= delay)
            };
            if due {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        kills_during_a_write += writing() as usize;

        let logged = last_logged_step(&run_dir);
        let Some(latest) = run.latest_checkpoint().unwrap() else {
            assert!(
                logged <= SAVE_EVERY,
                "kill {kill}: step {logged} logged but no checkpoint"
            );
            continue;
        };
        verify_checkpoint(&latest)
            .unwrap_or_else(|e| panic!("kill {kill}: latest checkpoint damaged: {e}"));
        load_sampling_model::<Flex>(
            &WeightsSource::Checkpoint(latest.clone()),
            false,
            &Default::default(),
        )
        .unwrap_or_else(|e| panic!("kill {kill}: {e}"));
        let step = read_state(&latest).unwrap().step;
        assert!(
            step >= last_step,
            "kill {kill}: went back from {last_step} to {step}"
        );
        assert!(
            logged < step + SAVE_EVERY + 1,
            "kill {kill}: {} steps lost (logged {logged}, checkpoint {step})",
            logged - step
        );
        last_step = step;
    }
    println!("20 kills, {kills_during_a_write} while a checkpoint was being written; last checkpoint at step {last_step}");
    assert!(
        kills_during_a_write >= 4,
        "too few kills inside a checkpoint write"
    );
    assert!(last_step > 0, "no session got as far as a checkpoint");

    // Then the run finishes: a few steps more, from the last checkpoint.
    let config_path = run_dir.join("config.toml");
    let config = std::fs::read_to_string(&config_path).unwrap().replace(
        &format!("steps = {STEPS}"),
        &format!("steps = {}", last_step + 4),
    );
    std::fs::write(&config_path, config).unwrap();
    let out = Command::new(bin)
        .args(["train", "--resume", arg(&run_dir), "--backend", "cpu"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("trained steps {last_step}..{}", last_step + 4)),
        "resumed from the last checkpoint: {stderr}"
    );
    let done = run.latest_checkpoint().unwrap().unwrap();
    assert_eq!(read_state(&done).unwrap().step, last_step + 4);

    // `inspect` checks what it reports: fine now, refused with one flipped byte.
    let inspect = || {
        let out = Command::new(bin)
            .args(["inspect", arg(&run_dir)])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    };
    let (ok, text) = inspect();
    assert!(ok && text.contains("files match their checksums"), "{text}");
    let ema = done.join("ema.mpk");
    let mut bytes = std::fs::read(&ema).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    std::fs::write(&ema, bytes).unwrap();
    let (ok, text) = inspect();
    assert!(
        !ok && text.contains("ema.mpk does not match its checksum"),
        "{text}"
    );
}

/// SIGTERM or SIGINT at pseudo-random moments of a one-device run: the session ends after the
/// step under way with a checkpoint of that very step (no step lost), its lock released, and
/// status 128 + the signal; the next session resumes there. A second signal ends it at once.
#[cfg(unix)]
#[test]
fn a_signal_stops_training_at_a_step_boundary_without_losing_a_step() {
    let tmp = tempfile::tempdir().unwrap();
    let (run_dir, run, train) = killed_run(tmp.path(), "signal.toml");
    let start = |resume: bool| {
        train(resume)
            .args(["--backend", "cpu"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let signal = |child: &std::process::Child, sig: i32| {
        // SAFETY: signals a child process of this test.
        assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
    };
    let mut done = 0usize;
    for (round, (sig, extra_ms)) in [
        (libc::SIGTERM, 0u64),
        (libc::SIGINT, 37),
        (libc::SIGTERM, 211),
    ]
    .into_iter()
    .enumerate()
    {
        let child = start(round > 0);
        // Past the start: some steps of this session logged, then the pseudo-random moment.
        let deadline = Instant::now() + Duration::from_secs(120);
        while last_logged_step(&run_dir) < done + 2 {
            assert!(
                Instant::now() < deadline,
                "round {round}: no step within 120 s"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(extra_ms));
        signal(&child, sig);
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(128 + sig),
            "round {round}: {stderr}"
        );
        let latest = run.latest_checkpoint().unwrap().unwrap();
        verify_checkpoint(&latest).unwrap();
        let step = read_state(&latest).unwrap().step;
        assert_eq!(
            step,
            last_logged_step(&run_dir),
            "round {round}: a step lost: {stderr}"
        );
        assert!(
            stderr.contains(&format!("stopped at step {step}")),
            "{stderr}"
        );
        assert!(
            !run_dir.join(".lock").exists(),
            "round {round}: the lock stayed"
        );
        assert!(step > done, "round {round}");
        done = step;
    }
    // Two signals: the second ends the process at once, and what is on disk still holds.
    let child = start(true);
    while last_logged_step(&run_dir) < done + 1 {
        std::thread::sleep(Duration::from_millis(5));
    }
    signal(&child, libc::SIGTERM);
    signal(&child, libc::SIGTERM);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(128 + libc::SIGTERM));
    let latest = run.latest_checkpoint().unwrap().unwrap();
    verify_checkpoint(&latest).unwrap();
    assert!(read_state(&latest).unwrap().step >= done);
}
