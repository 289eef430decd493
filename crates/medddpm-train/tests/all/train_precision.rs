//! Training under the run-time switches: bf16 mixed precision keeps f32 master weights (the
//! checkpoint is f32 and loads like any other), channels-last trains to the channels-first
//! result, and both resume like a plain run.

use crate::common;
use crate::common::rel_diff;
use medddpm_train::{ExperimentConfig, RunDir, SessionOptions, TrainSummary};
use medddpm_unet::{Compute, Layout, Precision};

fn options(precision: Precision, layout: Layout) -> SessionOptions {
    SessionOptions {
        compute: Compute {
            precision,
            layout,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// A session of `config` in `dir`: its summary and final weights.
fn trained(
    config: &ExperimentConfig,
    dir: &std::path::Path,
    options: &SessionOptions,
) -> (TrainSummary, Vec<Vec<f32>>) {
    let summary = common::session_with(config, &RunDir::new(dir), options).unwrap();
    let weights = common::saved_weights(config, &summary.checkpoint.join("model.mpk"));
    (summary, weights)
}

#[test]
fn channels_last_and_bf16_sessions_train_like_the_default() {
    let (_serial, tmp, config) = common::tiny_setup(2);
    let run = |name: &str, precision, layout| {
        trained(&config, &tmp.path().join(name), &options(precision, layout))
    };
    let (base, w_base) = run("f32-ncdhw", Precision::Fp32, Layout::Ncdhw);
    let (last, w_last) = run("f32-ndhwc", Precision::Fp32, Layout::Ndhwc);
    let (bf16, w_bf16) = run("bf16-ndhwc", Precision::Bf16, Layout::Ndhwc);

    // Same data, noise and steps: channels-last differs only by f32 summation order.
    let d_last = rel_diff(&w_last, &w_base);
    println!("weights rel. difference: ndhwc {d_last:.2e}");
    assert!(d_last < 1e-4, "{d_last}");
    assert!((last.last_loss - base.last_loss).abs() < 1e-4);

    // bf16 computes differently but trains the same f32 weights to nearby values.
    let d_bf16 = rel_diff(&w_bf16, &w_base);
    println!(
        "weights rel. difference: bf16 {d_bf16:.2e}; losses {} vs {}",
        bf16.last_loss, base.last_loss
    );
    assert!(
        d_bf16 > d_last,
        "bf16 must differ from f32 by more than summation order"
    );
    assert!(d_bf16 < 2e-2, "{d_bf16}");
    assert!((bf16.last_loss - base.last_loss).abs() < 0.05 * base.last_loss.abs().max(0.1));
    assert_eq!(w_bf16.len(), w_base.len());
}

fn f16_options() -> SessionOptions {
    options(Precision::F16, Layout::default())
}

/// f16 with loss scaling trains the f32 master weights to near the f32 run's, and keeps its
/// scale in the checkpoint.
#[test]
fn f16_sessions_with_loss_scaling_train_like_the_default() {
    let (_serial, tmp, config) = common::tiny_setup(2);
    let f32_options = options(Precision::Fp32, Layout::Ncdhw);
    let (base, w_base) = trained(&config, &tmp.path().join("f32"), &f32_options);
    let (f16, w_f16) = trained(&config, &tmp.path().join("f16"), &f16_options());
    let d = rel_diff(&w_f16, &w_base);
    println!(
        "weights rel. difference: f16 {d:.2e}; losses {} vs {}",
        f16.last_loss, base.last_loss
    );
    assert!(d > 0.0 && d < 2e-2, "{d}");
    assert!((f16.last_loss - base.last_loss).abs() < 0.05 * base.last_loss.abs().max(0.1));
    let state = medddpm_train::checkpoint::read_state(&f16.checkpoint).unwrap();
    assert_eq!(state.step, config.train.steps);
    assert_eq!(
        state.loss_scale,
        Some(medddpm_train::checkpoint::LossScale {
            scale: config.train.loss_scale,
            good_steps: config.train.steps,
        })
    );
    // The other precisions keep no scale.
    let base_state = medddpm_train::checkpoint::read_state(&base.checkpoint).unwrap();
    assert_eq!(base_state.loss_scale, None);

    // The log has the scale after each step, and the norm of the unscaled gradients: the
    // f32 run's up to f16's rounding (the first step's, before the weights part).
    let (f16_run, f32_run) = (
        RunDir::new(tmp.path().join("f16")),
        RunDir::new(tmp.path().join("f32")),
    );
    let scales: Vec<f64> = common::logged(&f16_run, "loss_scale");
    assert_eq!(scales, vec![config.train.loss_scale; config.train.steps]);
    let events = medddpm_tensorboard::read_dir_events(&f16_run.root).unwrap();
    let logged = medddpm_tensorboard::scalars(&events, "train/loss_scale");
    assert_eq!(logged.len(), config.train.steps);
    assert!(logged.iter().all(|s| s.1 as f64 == config.train.loss_scale));
    let n16: Vec<f32> = common::logged(&f16_run, "grad_norm");
    let n32: Vec<f32> = common::logged(&f32_run, "grad_norm");
    assert!(
        (n16[0] - n32[0]).abs() < 0.02 * n32[0],
        "{n16:?} vs {n32:?}"
    );
}

/// A scale so large that f16's gradients overflow: those steps are skipped and the scale
/// halves until they fit, then the run trains its steps to the end.
#[test]
fn f16_overflow_skips_the_step_and_halves_the_scale() {
    let (_serial, tmp, mut config) = common::tiny_setup(2);
    config.train.loss_scale = 2f64.powi(40);
    let dir = RunDir::new(tmp.path().join("f16"));
    let summary = common::session_with(&config, &dir, &f16_options()).unwrap();
    assert!(summary.last_loss.is_finite());
    let state = medddpm_train::checkpoint::read_state(&summary.checkpoint).unwrap();
    assert_eq!(state.step, config.train.steps);
    let scale = state.loss_scale.unwrap().scale;
    assert!(scale < 2f64.powi(40) && scale >= 1.0, "{scale}");
    // Each skipped step drew its micro-batches: more were drawn than the steps' own.
    let halvings = (40.0 - scale.log2()) as usize;
    assert_eq!(
        state.micro_batches,
        (config.train.steps + halvings) * config.train.grad_accum
    );
}
