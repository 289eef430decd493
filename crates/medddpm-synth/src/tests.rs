//! A tiny untrained network makes small data sets end to end on the CPU: both layouts, the
//! batch against one volume at a time, resume after a simulated kill, other settings refused,
//! and the augmentation hook.

use std::path::{Path, PathBuf};

use burn::backend::Flex;
use medddpm_diffusion::{SamplerConfig, SamplerKind};
use medddpm_nifti::Volume;
use medddpm_train::phantom::generate_phantoms;
use medddpm_train::{ExperimentConfig, SamplingModel, WeightsSource};
use medddpm_unet::UNetConfig;
use serde_json::{json, Value};

use crate::*;

/// One test at a time: the CPU backend has one random generator for the process.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// `tiny` without attention, at 4 channels, on an 8^3 grid with 20 timesteps.
fn config() -> ExperimentConfig {
    let mut config = ExperimentConfig {
        model: UNetConfig {
            model_channels: 4,
            attention_resolutions: vec![],
            image_size: 8,
            ..UNetConfig::tiny()
        },
        ..Default::default()
    };
    config.data.grid = [8, 8, 8];
    config.diffusion.timesteps = 20;
    config
}

/// A test's set-up: two 8^3 phantom masks in `tmp/phantoms/mask`, a file standing for the
/// weights, and the untrained network, with the process's lock held until it is dropped.
struct Setup {
    tmp: tempfile::TempDir,
    masks: Vec<PathBuf>,
    weights: WeightsSource,
    model: SamplingModel<Flex>,
    // Last, so that the lock is released after the folder is removed.
    _one: std::sync::MutexGuard<'static, ()>,
}

impl Setup {
    fn new() -> Self {
        let one = one_at_a_time();
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let set = generate_phantoms(&dir.join("phantoms"), 2, [8, 8, 8], 1).unwrap();
        let weights = dir.join("weights.pt");
        std::fs::write(&weights, b"stand-in weights").unwrap();
        let experiment = Box::new(config());
        let config = config();
        let unet = config.model.init::<Flex>(&Default::default()).unwrap();
        Self {
            masks: set.masks,
            weights: WeightsSource::Reference {
                path: weights,
                experiment,
            },
            model: SamplingModel::new(unet, config),
            tmp,
            _one: one,
        }
    }

    /// `name` in the temporary folder.
    fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    /// The synthesis of the masks with the weights into `out`.
    fn synthesis(
        &self,
        out: &Path,
        options: SynthOptions,
        augmentation: Option<Value>,
    ) -> Synthesis {
        let weights = (&self.weights, false);
        Synthesis::new(out, &self.masks, &config(), weights, options, augmentation).unwrap()
    }

    /// A whole run as one process: begin, every pending pair, finish.
    fn run(&self, s: &Synthesis, masks: &dyn MaskSource) -> FolderState {
        let (_lock, _) = s.begin().unwrap();
        let pairs = s.pending(0, 1).unwrap();
        let model = &self.model;
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

fn records(out: &Path) -> Vec<PairRecord> {
    std::fs::read_to_string(out.join(MANIFEST_FILE))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_run_makes_every_pair_in_both_layouts() {
    let t = Setup::new();
    for (i, layout) in [DatasetLayout::Ours, nnunet()].into_iter().enumerate() {
        let out = t.path(&format!("out{i}"));
        let s = t.synthesis(&out, options(3, 2, layout.clone()), None);
        assert_eq!(t.run(&s, &Identity).done, 3);
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
    let t = Setup::new();
    let image = |batch: usize| {
        let out = t.path(&format!("b{batch}"));
        let s = t.synthesis(&out, options(2, batch, DatasetLayout::Ours), None);
        t.run(&s, &Identity);
        Volume::read(out.join("image/phantom_001_syn000.nii.gz"))
            .unwrap()
            .into_data()
    };
    let (alone, batched) = (image(1), image(2));
    let worst = medddpm_testdata::max_abs_diff(&alone, &batched);
    assert!(worst < 1e-4, "{worst}");
    assert!(alone.iter().any(|&v| v != alone[0]));
}

#[test]
fn a_killed_run_resumes_to_exactly_the_list() {
    let t = Setup::new();
    let out = t.path("out");
    let s = t.synthesis(&out, options(4, 1, nnunet()), None);
    t.run(&s, &Identity);
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
    t.run(&s, &Identity);
    let got: Vec<usize> = records(&out).iter().map(|r| r.pair).collect();
    assert_eq!(got, [0, 1, 2, 3]);
    let images = std::fs::read_dir(out.join("Dataset007_Tiny/imagesTr"))
        .unwrap()
        .count();
    assert_eq!(images, 4);
    // Asking for more extends the same list.
    let more = t.synthesis(&out, options(5, 1, nnunet()), None);
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
    let t = Setup::new();
    let out = t.path("out");
    let new = |o: SynthOptions| t.synthesis(&out, o, None);
    t.run(&new(options(2, 1, DatasetLayout::Ours)), &Identity);
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
    std::fs::write(weights_path(&t.weights), b"other weights").unwrap();
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
    let t = Setup::new();
    let out = t.path("out");
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
    let s = t.synthesis(&out, options(2, 2, DatasetLayout::Ours), settings);
    t.run(&s, &no_tumour);
    for r in records(&out) {
        assert_eq!(
            r.augmentation,
            Some(json!({"pair": r.pair, "seed": r.seed}))
        );
        let label = Volume::read(out.join(&r.files[1])).unwrap();
        assert!(label.data().iter().all(|&v| v == 0.0 || v == 1.0));
    }
    let plain = t.synthesis(&out, options(2, 2, DatasetLayout::Ours), None);
    assert!(plain
        .begin()
        .unwrap_err()
        .to_string()
        .contains("augmentation"));
}
