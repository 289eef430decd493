//! The network's structure against the reference: parameter counts of the released
//! configurations (built, not estimated), and the full state-dict key lists of the reference
//! (`../shared/docs/med-ddpm-keys-*.tsv`, generated from the upstream code) mapped one to one
//! onto our modules with matching shapes.

use std::collections::{BTreeMap, BTreeSet};

use burn::backend::Flex;
use burn::module::Module;
use burn_store::ModuleSnapshot;
use medddpm_unet::import::{reference_key_to_path, SCHEDULE_BUFFERS};
use medddpm_unet::{UNetConfig, UNetError};

use medddpm_testdata::shared_dir;

#[test]
fn released_configurations_have_the_reference_parameter_counts() {
    let device = Default::default();
    let whole_head = UNetConfig::whole_head().init::<Flex>(&device).unwrap();
    assert_eq!(whole_head.num_params(), 40_226_433);
    drop(whole_head);
    let brats = UNetConfig::brats().init::<Flex>(&device).unwrap();
    assert_eq!(brats.num_params(), 57_562_564);
    drop(brats);
    let c32 = UNetConfig {
        model_channels: 32,
        ..UNetConfig::whole_head()
    }
    .init::<Flex>(&device)
    .unwrap();
    assert_eq!(c32.num_params(), 10_065_729);
}

/// Reads a `key<TAB>(shape)<TAB>dtype` list.
fn reference_keys(file: &str) -> Vec<(String, Vec<usize>)> {
    let path = shared_dir().join("docs").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let mut cols = line.split('\t');
            let key = cols.next().unwrap().to_string();
            let shape = cols.next().unwrap().trim_matches(|c| c == '(' || c == ')');
            let shape = shape
                .split(',')
                .filter(|s| !s.trim().is_empty())
                .map(|s| s.trim().parse().unwrap())
                .collect();
            (key, shape)
        })
        .collect()
}

fn check_key_list(config: UNetConfig, file: &str, expected_entries: usize) {
    let keys = reference_keys(file);
    assert_eq!(keys.len(), expected_entries, "{file}: entry count");
    let unet = config.init::<Flex>(&Default::default()).unwrap();
    let ours: BTreeMap<String, Vec<usize>> = unet
        .collect(None, None, false)
        .iter()
        .map(|s| (s.full_path(), s.shape.to_vec()))
        .collect();

    let mut used = BTreeSet::new();
    let mut buffers = 0;
    for (key, shape) in &keys {
        let Some(inner) = key.strip_prefix("denoise_fn.") else {
            assert!(
                SCHEDULE_BUFFERS.contains(&key.as_str()),
                "{file}: unknown top-level key {key}"
            );
            buffers += 1;
            continue;
        };
        let path =
            reference_key_to_path(inner).unwrap_or_else(|| panic!("{file}: no mapping for {key}"));
        let our_shape = ours
            .get(&path)
            .unwrap_or_else(|| panic!("{file}: {key} -> {path}, which the U-Net lacks"));
        // burn stores Linear weights as [in, out], PyTorch as [out, in].
        let mut theirs = shape.clone();
        if path.contains("linear") && path.ends_with("weight") {
            theirs.reverse();
        }
        assert_eq!(our_shape, &theirs, "{file}: shape of {key} ({path})");
        assert!(used.insert(path.clone()), "{file}: two keys map to {path}");
    }
    assert_eq!(buffers, SCHEDULE_BUFFERS.len());
    let unfilled: Vec<_> = ours.keys().filter(|p| !used.contains(*p)).collect();
    assert!(
        unfilled.is_empty(),
        "{file}: parameters no reference key fills: {unfilled:?}"
    );
}

#[test]
fn whole_head_reference_keys_map_one_to_one() {
    // 13 schedule buffers + 246 network tensors (spec 1.8).
    check_key_list(
        UNetConfig::whole_head(),
        "med-ddpm-keys-whole-head.tsv",
        259,
    );
}

#[test]
fn brats_reference_keys_map_one_to_one() {
    check_key_list(UNetConfig::brats(), "med-ddpm-keys-brats.tsv", 351);
}

#[test]
fn attention_sits_where_the_reference_puts_it() {
    let device = Default::default();
    let attn = |blocks: &[medddpm_unet::blocks::EmbedBlock<Flex>]| -> Vec<usize> {
        blocks
            .iter()
            .enumerate()
            .filter(|(_, b)| b.attn.is_some())
            .map(|(i, _)| i)
            .collect()
    };
    let wh = UNetConfig {
        model_channels: 32,
        ..UNetConfig::whole_head()
    }
    .init::<Flex>(&device)
    .unwrap();
    assert_eq!(attn(&wh.input_blocks), vec![7]);
    assert_eq!(attn(&wh.output_blocks), vec![2, 3]);
    let brats = UNetConfig {
        model_channels: 32,
        ..UNetConfig::brats()
    }
    .init::<Flex>(&device)
    .unwrap();
    assert!(attn(&brats.input_blocks).is_empty() && attn(&brats.output_blocks).is_empty());
}

#[test]
fn invalid_configurations_are_errors() {
    let device = Default::default();
    let cases = [
        (
            UNetConfig {
                num_heads: 4,
                ..UNetConfig::whole_head()
            },
            "num_heads",
        ),
        (
            UNetConfig {
                model_channels: 48,
                ..UNetConfig::whole_head()
            },
            "num_groups",
        ),
        (
            UNetConfig {
                channel_mult: vec![],
                ..UNetConfig::whole_head()
            },
            "channel_mult",
        ),
    ];
    for (config, needle) in cases {
        let err = config.init::<Flex>(&device).unwrap_err();
        assert!(matches!(err, UNetError::InvalidConfig { .. }), "{err}");
        assert!(err.to_string().contains(needle), "{err}");
    }
}

#[test]
fn inputs_the_network_cannot_take_are_errors() {
    let unet = UNetConfig {
        model_channels: 32,
        ..UNetConfig::whole_head()
    }
    .init::<Flex>(&Default::default())
    .unwrap();
    assert!(unet.check_input([1, 3, 16, 32, 48], 1).is_ok());
    let e = unet
        .check_input([1, 3, 16, 24, 48], 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("multiple of 16"), "{e}");
    let e = unet
        .check_input([1, 4, 16, 16, 16], 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("expected 3 input channels"), "{e}");
    let e = unet
        .check_input([2, 3, 16, 16, 16], 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("2 volumes but 1 timesteps"), "{e}");
}

#[test]
fn try_forward_reports_a_bad_shape_and_otherwise_equals_forward() {
    use burn::tensor::{Distribution, Tensor};
    let device = Default::default();
    let unet = medddpm_unet::randomize_weights(UNetConfig::tiny().init::<Flex>(&device).unwrap());
    let bad = Tensor::<Flex, 5>::zeros([1, 3, 4, 4, 5], &device);
    let err = unet.try_forward(bad, &[3]).unwrap_err();
    assert!(
        matches!(
            err,
            UNetError::SpatialSize {
                divisor: 2,
                sizes: [4, 4, 5]
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("multiple of 2"), "{err}");
    let x = Tensor::<Flex, 5>::random([1, 3, 4, 4, 4], Distribution::Default, &device);
    let got = unet.try_forward(x.clone(), &[3]).unwrap();
    let want = unet.forward(x, &[3]);
    assert_eq!(got.dims(), [1, 1, 4, 4, 4]);
    let diff = (got - want).abs().max().into_scalar();
    assert!(diff <= 1e-6, "try_forward and forward differ by {diff}");
}

#[test]
fn graphed_forward_equals_forward_and_says_why_the_cpu_replays_nothing() {
    use burn::tensor::{Distribution, Tensor};
    use medddpm_diffusion::Denoiser;
    use medddpm_unet::GraphedUNet;
    let device = Default::default();
    let unet = medddpm_unet::randomize_weights(UNetConfig::tiny().init::<Flex>(&device).unwrap());
    let graphed = GraphedUNet::new(&unet, true);
    // Two warm-up passes, the capture (refused on the CPU), then passes as they come.
    for t in [5, 4, 3, 2] {
        let x = Tensor::<Flex, 5>::random([1, 3, 4, 4, 4], Distribution::Default, &device);
        let got = graphed.predict_noise(x.clone(), &[t]);
        let want = unet.forward(x, &[t]);
        assert_eq!(
            got.into_data().to_vec::<f32>().unwrap(),
            want.into_data().to_vec::<f32>().unwrap(),
            "timestep {t}"
        );
    }
    let status = graphed.status();
    assert_eq!((status.captured, status.replays), (0, 0));
    assert_eq!(
        status.off.as_deref(),
        Some("this backend captures no graphs")
    );
    assert_eq!(status.summary(), None);
    let off = GraphedUNet::new(&unet, false).status();
    assert_eq!(off.off.as_deref(), Some("turned off"));
    assert_eq!(off.summary(), None);
}
