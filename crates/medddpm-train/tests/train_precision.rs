//! Training under the run-time switches: bf16 mixed precision keeps f32 master weights (the
//! checkpoint is f32 and loads like any other), channels-last trains to the channels-first
//! result, and both resume like a plain run.

mod common;

use burn::tensor::DType;
use medddpm_train::{RunDir, SessionOptions};
use medddpm_unet::{Compute, Layout, Precision};

fn options(compute_dtype: DType, layout: Layout) -> SessionOptions {
    let precision = if compute_dtype == DType::BF16 {
        Precision::Bf16
    } else {
        Precision::Fp32
    };
    SessionOptions {
        compute: Compute {
            precision,
            layout,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// ||a - b|| / ||b|| over all weights. (Not the largest difference: Adam turns a rounding
/// difference in a near-zero gradient into a full learning-rate step, so single weights can
/// move by ~lr while the network as a whole stays put.)
fn rel_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f64 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (x, y) in a.iter().flatten().zip(b.iter().flatten()) {
        num += ((x - y) as f64).powi(2);
        den += (*y as f64).powi(2);
    }
    (num / den).sqrt()
}

#[test]
fn channels_last_and_bf16_sessions_train_like_the_default() {
    let tmp = tempfile::tempdir().unwrap();
    let config = common::tiny_experiment(&tmp.path().join("phantoms"), 2);
    let run = |name: &str, dtype, layout| {
        let dir = RunDir::new(tmp.path().join(name));
        let summary = common::session_with(&config, &dir, &options(dtype, layout)).unwrap();
        let weights = common::saved_weights(&config, &summary.checkpoint.join("model.mpk"));
        (summary, weights)
    };
    let (base, w_base) = run("f32-ncdhw", DType::F32, Layout::Ncdhw);
    let (last, w_last) = run("f32-ndhwc", DType::F32, Layout::Ndhwc);
    let (bf16, w_bf16) = run("bf16-ndhwc", DType::BF16, Layout::Ndhwc);

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

#[test]
fn f16_training_is_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let config = common::tiny_experiment(&tmp.path().join("phantoms"), 2);
    let dir = RunDir::new(tmp.path().join("f16"));
    let options = SessionOptions {
        compute: Compute {
            precision: Precision::F16,
            ..Default::default()
        },
        ..Default::default()
    };
    let err = common::session_with(&config, &dir, &options)
        .err()
        .expect("f16 training must be refused")
        .to_string();
    assert!(err.contains("f16") && err.contains("loss scaling"), "{err}");
    assert!(!tmp.path().join("f16").exists(), "nothing may be written");
}
