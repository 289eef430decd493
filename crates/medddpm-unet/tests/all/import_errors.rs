//! Importing a reference checkpoint into a network of another configuration, or from a file
//! that is not one, gives an error that names the checkpoint and the offending keys.

use std::path::PathBuf;

use burn::backend::Flex;
use burn::tensor::Tensor;
use medddpm_unet::{load_reference_checkpoint, UNetConfig, UNetError, WeightsEntry};

use crate::golden_fixture::fixture_config;

fn fixture() -> PathBuf {
    medddpm_testdata::fixture("medddpm_whole_head_c32.pt")
}

fn load(config: UNetConfig, path: &std::path::Path) -> UNetError {
    let unet = config.init::<Flex>(&Default::default()).unwrap();
    load_reference_checkpoint(unet, path, WeightsEntry::Ema).expect_err("import should fail")
}

/// The import of the fixture into its network with attention at `resolutions` instead.
fn attention_at(resolutions: Vec<usize>) -> UNetError {
    let config = UNetConfig {
        attention_resolutions: resolutions,
        ..fixture_config()
    };
    load(config, &fixture())
}

#[test]
fn ema_and_model_entries_both_load_and_differ() {
    let device = Default::default();
    let (ema, report) = load_reference_checkpoint(
        fixture_config().init::<Flex>(&device).unwrap(),
        fixture(),
        WeightsEntry::Ema,
    )
    .unwrap();
    let (model, _) = load_reference_checkpoint(
        fixture_config().init::<Flex>(&device).unwrap(),
        fixture(),
        WeightsEntry::Model,
    )
    .unwrap();
    assert_eq!(report.tensors_loaded, 246);
    let a: Tensor<Flex, 5> = ema.out.conv.weight.val();
    let b: Tensor<Flex, 5> = model.out.conv.weight.val();
    let diff: f32 = (a.clone() - b).abs().max().into_scalar();
    let scale: f32 = a.abs().max().into_scalar();
    assert!(
        diff > 0.0 && diff < 0.1 * scale,
        "EMA should differ slightly from the live weights: {diff} vs {scale}"
    );
}

#[test]
fn wrong_width_is_a_shape_mismatch_naming_the_key() {
    let err = load(UNetConfig::whole_head(), &fixture());
    let msg = err.to_string();
    assert!(matches!(err, UNetError::ShapeMismatch { .. }), "{msg}");
    assert!(
        msg.contains("medddpm_whole_head_c32.pt") && msg.contains("denoise_fn."),
        "{msg}"
    );
}

#[test]
fn more_blocks_than_the_checkpoint_is_a_shape_mismatch() {
    // With two ResBlocks per level the block indices shift, so the first block of level 2
    // (input_blocks.5) meets the checkpoint's level-1-to-2 ResBlock, which is 64 wide.
    let err = load(
        UNetConfig {
            num_res_blocks: 2,
            ..fixture_config()
        },
        &fixture(),
    );
    let msg = err.to_string();
    let UNetError::ShapeMismatch {
        key,
        expected,
        found,
        ..
    } = &err
    else {
        panic!("{msg}")
    };
    assert_eq!(key, "denoise_fn.input_blocks.5.0.in_layers.2.weight");
    assert_eq!(
        (expected.as_slice(), found.as_slice()),
        (&[32, 32, 3, 3, 3][..], &[64, 32, 3, 3, 3][..])
    );
    assert!(msg.contains("medddpm_whole_head_c32.pt"), "{msg}");
}

#[test]
fn attention_the_network_lacks_is_unexpected_keys() {
    let err = attention_at(vec![]);
    let msg = err.to_string();
    let UNetError::UnexpectedKeys { keys, .. } = &err else {
        panic!("{msg}")
    };
    assert!(
        keys.iter()
            .any(|k| k == "denoise_fn.input_blocks.7.1.qkv.weight"),
        "{msg}"
    );
    assert!(msg.contains("medddpm_whole_head_c32.pt"), "{msg}");
}

#[test]
fn attention_the_checkpoint_lacks_is_missing_keys() {
    // Attention at every level: the checkpoint has it only at level 3.
    let err = attention_at(vec![64, 32, 16, 8]);
    let msg = err.to_string();
    let UNetError::MissingKeys { keys, .. } = &err else {
        panic!("{msg}")
    };
    assert!(
        keys.iter().any(|k| k.starts_with("input_blocks.1.attn.")),
        "{msg}"
    );
}

#[test]
fn a_file_that_is_no_checkpoint_is_a_read_error() {
    let dir = tempfile::tempdir().unwrap();
    let bogus = dir.path().join("model-7.pt");
    std::fs::write(&bogus, b"this is not a zip archive").unwrap();
    let err = load(fixture_config(), &bogus);
    assert!(matches!(err, UNetError::CheckpointRead { .. }), "{err}");
    assert!(err.to_string().contains("model-7.pt"), "{err}");
    let missing = dir.path().join("nowhere.pt");
    let err = load(fixture_config(), &missing);
    assert!(
        err.to_string().contains("nowhere.pt") && err.to_string().contains("no such file"),
        "{err}"
    );
}
