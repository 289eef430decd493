//! `[train] activation_checkpointing = "blocks"` trains like `"none"`: the same losses step by
//! step and the same weights, in f32 and in bf16 mixed precision channels-last.

use crate::common;
use crate::common::{rel_diff, Losses};

use burn::backend::{Autodiff, Flex};
use medddpm_train::{ExperimentConfig, RunDir, SessionOptions};
use medddpm_unet::{ActivationCheckpointing, Compute, Layout, Precision};

/// The losses of every step and the final weights of a session.
fn session(
    config: &ExperimentConfig,
    dir: &std::path::Path,
    compute: Compute,
) -> (Vec<f32>, Vec<Vec<f32>>) {
    let run = RunDir::new(dir);
    let options = SessionOptions {
        compute,
        ..Default::default()
    };
    let mut losses = Losses(Vec::new());
    let summary = medddpm_train::train::<Autodiff<Flex>>(
        config,
        &run,
        &options,
        &Default::default(),
        &mut losses,
    )
    .unwrap();
    let weights = common::saved_weights(config, &summary.checkpoint.join("model.mpk"));
    (losses.0, weights)
}

#[test]
fn checkpointed_sessions_train_like_plain_ones() {
    let (_serial, tmp, mut config) = common::tiny_setup(2);
    // Attention at the second level too, so that every block kind is recomputed.
    config.model.attention_resolutions = vec![8];
    // (name, compute, weight tolerance): bf16 sums its gradient contributions in bf16, whose
    // rounding a different order changes more (measured: 5.6e-6 in f32, 2.7e-4 in bf16, against
    // 1e-2 between bf16 and f32 training in train_precision.rs).
    let settings = [
        ("f32", Compute::default(), 1e-4),
        (
            "bf16-ndhwc",
            Compute {
                precision: Precision::Bf16,
                layout: Layout::Ndhwc,
                ..Default::default()
            },
            2e-3,
        ),
    ];
    for (name, compute, tolerance) in settings {
        config.train.activation_checkpointing = ActivationCheckpointing::None;
        let (plain, w_plain) = session(&config, &tmp.path().join(format!("{name}-none")), compute);
        config.train.activation_checkpointing = ActivationCheckpointing::Blocks;
        let (ckpt, w_ckpt) = session(&config, &tmp.path().join(format!("{name}-blocks")), compute);
        println!("{name}: losses {plain:?} vs {ckpt:?}");
        assert_eq!(plain.len(), config.train.steps);
        assert_eq!(ckpt.len(), plain.len());
        // Same weights before the first update: the same loss, bit for bit.
        assert_eq!(plain[0].to_bits(), ckpt[0].to_bits(), "{name}: first loss");
        // Later steps start from weights that differ by the order of a few gradient sums.
        for (step, (a, b)) in plain.iter().zip(&ckpt).enumerate() {
            assert!(
                (a - b).abs() <= 1e-4 * a.abs(),
                "{name}: step {step}: {a} vs {b}"
            );
        }
        let d = rel_diff(&w_ckpt, &w_plain);
        println!("{name}: weights rel. difference {d:.2e}");
        assert!(d < tolerance, "{name}: {d}");
        // The normalisations recomputed: the same computation, bit for bit.
        config.train.activation_checkpointing = ActivationCheckpointing::Norms;
        let (norms, w_norms) = session(&config, &tmp.path().join(format!("{name}-norms")), compute);
        assert_eq!(norms, plain, "{name}: norms' losses");
        assert_eq!(rel_diff(&w_norms, &w_plain), 0.0, "{name}: norms' weights");
    }
}
