//! A tiny untrained network makes small data sets end to end on the CPU: both layouts, the
//! batch against one volume at a time, resume after a simulated kill, other settings refused,
//! and the augmentation hook.

use std::path::{Path, PathBuf};

use burn::backend::Flex;
use medddpm_diffusion::{CosineSchedule, SamplerConfig, SamplerKind};
use medddpm_nifti::Volume;
use medddpm_train::phantom::generate_phantoms;
use medddpm_train::{ExperimentConfig, SamplingModel, WeightsSource};
use medddpm_unet::UNetConfig;
use serde_json::json;

use crate::*;

/// One test at a time: the CPU backend has one random generator for the process.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

fn config() -> ExperimentConfig {
    let mut config = ExperimentConfig {
        model: UNetConfig {
            model_channels: 4,
            num_groups: 4,
            channel_mult: vec![1, 2],
            num_res_blocks: 1,
            attention_resolutions: vec![],
            image_size: 8,
            ..UNetConfig::whole_head()
        },
        ..Default::default()
    };
    config.data.grid = [8, 8, 8];
    config.diffusion.timesteps = 20;
    config
}

fn model() -> SamplingModel<Flex> {
    let config = config();
    SamplingModel {
        unet: config.model.init::<Flex>(&Default::default()).unwrap(),
        schedule: CosineSchedule::new(config.diffusion.timesteps),
        config,
    }
}

/// Two 8^3 phantom masks in `dir/phantoms/mask`, and a file standing for the weights.
fn inputs(dir: &Path) -> (Vec<PathBuf>, WeightsSource) {
    let set = generate_phantoms(&dir.join("phantoms"), 2, [8, 8, 8], 1).unwrap();
    let weights = dir.join("weights.pt");
    std::fs::write(&weights, b"stand-in weights").unwrap();
    let experiment = Box::new(config());
    (
        set.masks,
        WeightsSource::Reference {
            path: weights,
            experiment,
        },
    )
}

fn options(count: usize, batch_size: usize, layout: DatasetLayout) -> SynthOptions {
    SynthOptions {
        count,
        variants_per_mask: None,
        seed: 5,
        sampler: SamplerConfig {
            kind: SamplerKind::DpmSolver,
            steps: Some(3),
            eta: 0.0,
        },
        layout,
        rescale: None,
        brain_masks: None,
        batch_size,
        cuda_graphs: false,
    }
}

fn nnunet() -> DatasetLayout {
    DatasetLayout::NnUnet {
        id: 7,
        name: "Tiny".into(),
    }
}

/// A whole run as one process: begin, every pending pair, finish.
fn run(s: &Synthesis, model: &SamplingModel<Flex>, masks: &dyn MaskSource) -> FolderState {
    let (_lock, _) = s.begin().unwrap();
    let pairs = s.pending(0, 1).unwrap();
    run_shard(
        s,
        model,
        masks,
        &pairs,
        (0, 1),
        &Default::default(),
        &mut |_| {},
    )
    .unwrap();
    s.finish().unwrap()
}

fn records(out: &Path) -> Vec<PairRecord> {
    std::fs::read_to_string(out.join(MANIFEST_FILE))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_run_makes_every_pair_in_both_layouts() {
    let _one = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let (masks, weights) = inputs(tmp.path());
    let model = model();
    for (i, layout) in [DatasetLayout::Ours, nnunet()].into_iter().enumerate() {
        let out = tmp.path().join(format!("out{i}"));
        let s = Synthesis::new(
            &out,
            &masks,
            &config(),
            (&weights, false),
            options(3, 2, layout.clone()),
            None,
        )
        .unwrap();
        assert_eq!(run(&s, &model, &Identity).done, 3);
        let got = records(&out);
        assert_eq!(got.iter().map(|r| r.pair).collect::<Vec<_>>(), [0, 1, 2]);
        for r in &got {
            assert_eq!((r.sampler.as_str(), r.steps), ("dpm-solver++", 3));
            assert!(r.checkpoint.starts_with("crc32:"), "{}", r.checkpoint);
            let files = layout.files(&r.case, 1);
            assert_eq!(r.files.len(), 2);
            let image = Volume::read(out.join(&files.images[0])).unwrap();
            let label = Volume::read(out.join(&files.label)).unwrap();
            let source = Volume::read(&r.source_mask).unwrap();
            assert_eq!(label.data(), source.data(), "the label is the mask used");
            assert_eq!(
                (image.dims(), image.affine()),
                (source.dims(), source.affine())
            );
            assert!(image.data().iter().all(|v| v.is_finite() && v.abs() <= 1.0));
        }
        if layout == nnunet() {
            let path = out.join("Dataset007_Tiny/dataset.json");
            let json: serde_json::Value =
                serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
            assert_eq!(json["numTraining"], 3);
            assert_eq!(json["labels"]["tumour"], 2);
        }
    }
}

#[test]
fn a_pair_samples_alike_alone_and_in_a_batch() {
    let _one = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let (masks, weights) = inputs(tmp.path());
    let model = model();
    let image = |batch: usize| {
        let out = tmp.path().join(format!("b{batch}"));
        let s = Synthesis::new(
            &out,
            &masks,
            &config(),
            (&weights, false),
            options(2, batch, DatasetLayout::Ours),
            None,
        )
        .unwrap();
        run(&s, &model, &Identity);
        Volume::read(out.join("image/phantom_001_syn000.nii.gz"))
            .unwrap()
            .into_data()
    };
    let (alone, batched) = (image(1), image(2));
    let worst = alone
        .iter()
        .zip(&batched)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    assert!(worst < 1e-4, "{worst}");
    assert!(alone.iter().any(|&v| v != alone[0]));
}

#[test]
fn a_killed_run_resumes_to_exactly_the_list() {
    let _one = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let (masks, weights) = inputs(tmp.path());
    let model = model();
    let out = tmp.path().join("out");
    let s = Synthesis::new(
        &out,
        &masks,
        &config(),
        (&weights, false),
        options(4, 1, nnunet()),
        None,
    )
    .unwrap();
    run(&s, &model, &Identity);
    // As a kill leaves it: the last pair's files written but its line torn, the one before
    // it listed but its label gone, a temporary half-written.
    let label = out.join(&records(&out)[2].files[1]);
    std::fs::remove_file(label).unwrap();
    let manifest = out.join(MANIFEST_FILE);
    let text = std::fs::read_to_string(&manifest).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    std::fs::write(
        &manifest,
        format!(
            "{}\n{}\n{}\n{}",
            lines[0],
            lines[1],
            lines[2],
            &lines[3][..30]
        ),
    )
    .unwrap();
    let temporary = out.join("Dataset007_Tiny/imagesTr/.phantom_000_syn001_0000.nii.gz.99.0.tmp");
    std::fs::write(&temporary, b"half").unwrap();
    let (lock, state) = s.begin().unwrap();
    assert_eq!(
        state,
        FolderState {
            done: 2,
            torn: 1,
            removed: 4
        }
    );
    assert!(!temporary.exists());
    let pending: Vec<usize> = s.pending(0, 1).unwrap().iter().map(|p| p.id).collect();
    assert_eq!(pending, [2, 3]);
    drop(lock);
    run(&s, &model, &Identity);
    let got: Vec<usize> = records(&out).iter().map(|r| r.pair).collect();
    assert_eq!(got, [0, 1, 2, 3]);
    let images = std::fs::read_dir(out.join("Dataset007_Tiny/imagesTr"))
        .unwrap()
        .count();
    assert_eq!(images, 4);
    // Asking for more extends the same list.
    let more = Synthesis::new(
        &out,
        &masks,
        &config(),
        (&weights, false),
        options(5, 1, nnunet()),
        None,
    )
    .unwrap();
    assert_eq!(
        more.pending(0, 1)
            .unwrap()
            .iter()
            .map(|p| p.id)
            .collect::<Vec<_>>(),
        [4]
    );
}

#[test]
fn a_folder_made_otherwise_is_refused_naming_its_manifest() {
    let _one = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let (masks, weights) = inputs(tmp.path());
    let model = model();
    let out = tmp.path().join("out");
    let new = |o: SynthOptions| {
        Synthesis::new(&out, &masks, &config(), (&weights, false), o, None).unwrap()
    };
    run(&new(options(2, 1, DatasetLayout::Ours)), &model, &Identity);
    let mut other = options(2, 1, DatasetLayout::Ours);
    other.sampler.steps = Some(4);
    let err = new(other).begin().unwrap_err().to_string();
    assert!(
        err.contains("manifest.jsonl") && err.contains("steps 3"),
        "{err}"
    );
    let mut other = options(2, 1, DatasetLayout::Ours);
    other.seed = 6;
    assert!(new(other)
        .check_settings()
        .unwrap_err()
        .to_string()
        .contains("seed"));
    assert!(new(options(2, 1, nnunet()))
        .begin()
        .unwrap_err()
        .to_string()
        .contains("layout"));
    std::fs::write(weights_path(&weights), b"other weights").unwrap();
    let err = new(options(2, 1, DatasetLayout::Ours))
        .begin()
        .unwrap_err()
        .to_string();
    assert!(err.contains("checkpoint weights"), "{err}");
}

fn weights_path(w: &WeightsSource) -> PathBuf {
    match w {
        WeightsSource::Reference { path, .. } | WeightsSource::Checkpoint(path) => path.clone(),
    }
}

#[test]
fn the_augmentation_hook_gives_the_mask_and_its_record() {
    let _one = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let (masks, weights) = inputs(tmp.path());
    let model = model();
    let out = tmp.path().join("out");
    // Drops the tumour label: an augmentation the label file must show.
    let no_tumour = FnMaskSource::new(
        |mut source: Volume, pair, seed| {
            source
                .data_mut()
                .iter_mut()
                .filter(|v| **v == 2.0)
                .for_each(|v| *v = 1.0);
            Ok(ChosenMask {
                mask: source,
                record: Some(json!({"pair": pair, "seed": seed})),
            })
        },
        Some(json!({"drop": "tumour"})),
    );
    let settings = no_tumour.settings();
    let s = Synthesis::new(
        &out,
        &masks,
        &config(),
        (&weights, false),
        options(2, 2, DatasetLayout::Ours),
        settings,
    )
    .unwrap();
    run(&s, &model, &no_tumour);
    for r in records(&out) {
        assert_eq!(
            r.augmentation,
            Some(json!({"pair": r.pair, "seed": r.seed}))
        );
        let label = Volume::read(out.join(&r.files[1])).unwrap();
        assert!(label.data().iter().all(|&v| v == 0.0 || v == 1.0));
    }
    let plain = Synthesis::new(
        &out,
        &masks,
        &config(),
        (&weights, false),
        options(2, 2, DatasetLayout::Ours),
        None,
    )
    .unwrap();
    assert!(plain
        .begin()
        .unwrap_err()
        .to_string()
        .contains("augmentation"));
}
