//! Data-parallel training on the CPU backend: two replicas (threads sharing the one CPU device,
//! gradients averaged on the host) train to the same weights as one device with the same
//! effective batch, whether that device accumulates two micro-batches or runs a batch of two;
//! a run resumes on another device count; a step that cannot be shared evenly is refused.

use crate::common;
use crate::common::{serial_tempdir, Losses};

use std::path::Path;

use burn::backend::{Autodiff, Flex};
use medddpm_kernels::Collective;
use medddpm_train::{ExperimentConfig, RunDir, SessionOptions};

type A = Autodiff<Flex>;

/// A session of `config` in `dir` on `devices` replicas; its losses and final weights and EMA.
fn session(
    config: &ExperimentConfig,
    dir: &Path,
    devices: usize,
    resume: bool,
    max_steps: Option<usize>,
) -> (Vec<f32>, Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let options = SessionOptions {
        resume,
        max_steps,
        collective: Collective::Host,
        ..Default::default()
    };
    let mut losses = Losses(Vec::new());
    let devices = vec![Default::default(); devices];
    let summary =
        medddpm_train::train_on::<A>(config, &RunDir::new(dir), &options, &devices, &mut losses)
            .unwrap();
    let weights = common::saved_weights(config, &summary.checkpoint.join("model.mpk"));
    let ema = common::saved_weights(config, &summary.checkpoint.join("ema.mpk"));
    (losses.0, weights, ema)
}

/// The largest |a - b| over all weights, relative to the largest |b|.
fn max_rel_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    let scale = b.iter().flatten().fold(0f32, |m, x| m.max(x.abs()));
    let diff = a
        .iter()
        .flatten()
        .zip(b.iter().flatten())
        .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    diff / scale
}

fn config(dir: &Path, batch_size: usize, grad_accum: usize) -> ExperimentConfig {
    let mut config = common::tiny_experiment(&dir.join("phantoms"), 4);
    config.train.steps = 3;
    config.train.save_every = 3;
    config.train.batch_size = batch_size;
    config.train.grad_accum = grad_accum;
    // The reference's extra division by the batch size would make batch 2 a different
    // learning rate from accumulation over 2.
    config.train.reference_batch_scaling = false;
    config
}

#[test]
fn two_replicas_train_like_one_device_with_the_same_effective_batch() {
    let (_serial, tmp) = serial_tempdir();
    let mut accumulate = config(tmp.path(), 1, 2);
    // A checkpoint and an EMA sample after step 2: the first replica samples with the
    // backend's random generator while the others wait for the next step.
    accumulate.train.save_every = 2;
    accumulate.train.samples_per_checkpoint = 1;
    let batch = config(tmp.path(), 2, 1);
    let (l_acc, w_acc, e_acc) = session(&accumulate, &tmp.path().join("one-acc"), 1, false, None);
    let (l_rep, w_rep, e_rep) = session(&accumulate, &tmp.path().join("two-acc"), 2, false, None);
    let (l_b2, w_b2, _) = session(&batch, &tmp.path().join("one-b2"), 1, false, None);
    let (l_rb, w_rb, _) = session(&batch, &tmp.path().join("two-b2"), 2, false, None);
    let d_rep = max_rel_diff(&w_rep, &w_acc);
    let d_b2 = max_rel_diff(&w_b2, &w_acc);
    let d_rb = max_rel_diff(&w_rb, &w_acc);
    println!("losses: accumulate {l_acc:?}, 2 replicas {l_rep:?}, batch 2 {l_b2:?}, 2 replicas of a batch 2 {l_rb:?}");
    println!("weights vs accumulation: 2 replicas {d_rep:e}, batch 2 {d_b2:e}, 2 replicas of batch 2 {d_rb:e}");
    assert_eq!(l_rep.len(), 3);
    for (name, losses) in [
        ("2 replicas", &l_rep),
        ("batch 2", &l_b2),
        ("2 x batch 1", &l_rb),
    ] {
        for (a, b) in losses.iter().zip(&l_acc) {
            assert!(
                (a - b).abs() <= 1e-5 * b.abs(),
                "{name}: losses {losses:?} vs {l_acc:?}"
            );
        }
    }
    // Halving a gradient is exact in floats, so the replicas' average (g0 + g1) / 2 is the
    // accumulated g0 / 2 + g1 / 2 bit for bit; a batch of two sums inside each operation in
    // another order.
    assert_eq!(d_rep, 0.0, "2 replicas vs accumulation over 2");
    assert_eq!(
        max_rel_diff(&e_rep, &e_acc),
        0.0,
        "EMA of 2 replicas vs accumulation"
    );
    // A batch of two differs from two batches of one by the order of float sums (losses agree
    // to 1e-7), which Adam's first steps amplify where a gradient is near zero: its update is
    // about +-lr whatever the gradient's size (measured: 2.0e-4 of the largest weight at lr 1e-3).
    assert!(d_b2 < 1e-3, "batch 2 vs accumulation over 2: {d_b2:e}");
    assert!(
        d_rb < 1e-3,
        "2 replicas of a batch of 2 vs accumulation over 2: {d_rb:e}"
    );
}

#[test]
fn a_run_resumes_on_another_device_count() {
    let (_serial, tmp) = serial_tempdir();
    let config = config(tmp.path(), 1, 2);
    let (l_one, w_one, _) = session(&config, &tmp.path().join("one"), 1, false, None);
    let run = tmp.path().join("two-then-one");
    let (first, _, _) = session(&config, &run, 2, false, Some(2));
    let (rest, w_mixed, _) = session(&config, &run, 1, true, None);
    let losses: Vec<f32> = first.into_iter().chain(rest).collect();
    assert_eq!(losses, l_one);
    assert_eq!(max_rel_diff(&w_mixed, &w_one), 0.0);
}

#[test]
fn a_step_that_does_not_divide_among_the_devices_is_refused() {
    let (_serial, tmp) = serial_tempdir();
    let config = config(tmp.path(), 1, 3);
    let run = tmp.path().join("uneven");
    let devices = vec![Default::default(); 2];
    let err = medddpm_train::train_on::<A>(
        &config,
        &RunDir::new(&run),
        &SessionOptions::default(),
        &devices,
        &mut medddpm_train::Quiet,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("2 devices") && err.contains("grad_accum = 3"),
        "{err}"
    );
    assert!(!run.exists(), "nothing is written before the refusal");
}

/// f16 with a loss scale that overflows at first: both replicas skip the same steps and halve
/// the same scale (each checks the same averaged gradients), and train like one device.
#[test]
fn two_f16_replicas_skip_overflowing_steps_together() {
    let (_serial, tmp) = serial_tempdir();
    let mut config = config(tmp.path(), 1, 2);
    config.train.loss_scale = 2f64.powi(36);
    let run = |name: &str, devices: usize| {
        let options = SessionOptions {
            collective: Collective::Host,
            compute: medddpm_unet::Compute {
                precision: medddpm_unet::Precision::F16,
                ..Default::default()
            },
            ..Default::default()
        };
        let dir = RunDir::new(tmp.path().join(name));
        let devices = vec![Default::default(); devices];
        let mut losses = Losses(Vec::new());
        let summary =
            medddpm_train::train_on::<A>(&config, &dir, &options, &devices, &mut losses).unwrap();
        let state = medddpm_train::checkpoint::read_state(&summary.checkpoint).unwrap();
        let weights = common::saved_weights(&config, &summary.checkpoint.join("model.mpk"));
        (losses.0, state, weights)
    };
    let (l_one, s_one, w_one) = run("one", 1);
    let (l_two, s_two, w_two) = run("two", 2);
    println!(
        "f16 losses: one device {l_one:?}, two replicas {l_two:?}; scales {:?} {:?}",
        s_one.loss_scale, s_two.loss_scale
    );
    assert!(s_one.loss_scale.unwrap().scale < 2f64.powi(36));
    assert_eq!(s_two.loss_scale, s_one.loss_scale);
    assert_eq!(s_two.micro_batches, s_one.micro_batches);
    assert_eq!(l_two.len(), config.train.steps);
    let d = max_rel_diff(&w_two, &w_one);
    assert!(d < 1e-5, "two f16 replicas vs one device: {d:e}");
}

/// Stops after `after` optimizer steps, as a caught SIGTERM does.
struct StopAfter(usize, Vec<f32>);

impl medddpm_train::TrainObserver for StopAfter {
    fn step(&mut self, metrics: &medddpm_train::StepMetrics) {
        self.1.push(metrics.loss);
    }
    fn stop_requested(&mut self) -> bool {
        self.1.len() >= self.0
    }
}

/// Asked to stop (a signal the lead caught), two replicas stop together at the step boundary
/// with a checkpoint of it, and the run resumes there to the uninterrupted run's weights.
#[test]
fn two_replicas_stop_together_when_asked_and_resume() {
    let (_serial, tmp) = serial_tempdir();
    let mut config = config(tmp.path(), 1, 2);
    config.train.steps = 4;
    config.train.save_every = 4;
    let (whole, w_whole, _) = session(&config, &tmp.path().join("whole"), 2, false, None);
    let run = tmp.path().join("stopped");
    let options = SessionOptions {
        collective: Collective::Host,
        ..Default::default()
    };
    let devices = vec![Default::default(); 2];
    let mut stop = StopAfter(1, Vec::new());
    let summary =
        medddpm_train::train_on::<A>(&config, &RunDir::new(&run), &options, &devices, &mut stop)
            .unwrap();
    assert_eq!(summary.end_step, 1);
    assert!(summary.checkpoint.ends_with("step-000001"), "{summary:?}");
    let (rest, w_resumed, _) = session(&config, &run, 2, true, None);
    let losses: Vec<f32> = stop.1.into_iter().chain(rest).collect();
    assert_eq!(losses, whole);
    assert_eq!(max_rel_diff(&w_resumed, &w_whole), 0.0);
}
