//! Training on the real sample data for a few steps with the released configurations shrunk only
//! in channels, so that a 2-core CPU with 24 GiB runs them: the whole-head pair `sample_3` at
//! 128^3 (C = 8, 8 GroupNorm groups: 4 minutes, 7.8 GB) and the BraTS case 01306 at
//! 192x192x144 (C = 4, 4 groups). The two run one after the other: together they would not fit
//! in memory.

use crate::common;
use std::path::Path;

use medddpm_train::data::{DataConfig, DataSource};
use medddpm_train::{ExperimentConfig, RunDir};
use medddpm_unet::UNetConfig;

fn link_dir(from: &Path, to: &Path, names: &[&str]) {
    std::fs::create_dir_all(to).unwrap();
    for n in names {
        std::os::unix::fs::symlink(from.join(n), to.join(n)).unwrap();
    }
}

fn shrink(mut model: UNetConfig, channels: usize) -> UNetConfig {
    model.model_channels = channels;
    model.num_groups = channels;
    model
}

fn train_one_optimizer_step(config: &ExperimentConfig, dir: &Path) {
    let run = RunDir::new(dir);
    let s = common::session(config, &run, false, None).unwrap();
    assert_eq!(s.end_step, config.train.steps);
    assert!(s.last_loss.is_finite() && s.last_loss > 0.0);
    assert!(
        s.checkpoint.join("model.mpk").is_file() && s.checkpoint.join("optimizer.mpk").is_file()
    );
}

#[test]
fn trains_on_the_whole_head_sample_pair() {
    let _one = common::one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let src = common::shared_dir().join("datasets/medddpm-samples/whole_head");
    link_dir(
        &src.join("mask"),
        &tmp.path().join("mask"),
        &["sample_3.nii.gz"],
    );
    link_dir(
        &src.join("image"),
        &tmp.path().join("image"),
        &["sample_3.nii.gz"],
    );
    let mut config = ExperimentConfig {
        model: shrink(UNetConfig::whole_head(), 8),
        data: DataConfig::new(DataSource::WholeHead {
            mask_dir: tmp.path().join("mask"),
            image_dir: tmp.path().join("image"),
        }),
        ..Default::default()
    };
    assert_eq!(config.data.grid, [128, 128, 128]);
    config.train.steps = 1; // one optimizer step = the reference's two micro-steps
    config.train.samples_per_checkpoint = 0;
    train_one_optimizer_step(&config, &tmp.path().join("run"));
}

#[test]
fn trains_on_the_brats_case() {
    let _one = common::one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let src = common::shared_dir().join("datasets/medddpm-samples/brats2021");
    for m in ["t1", "t1ce", "t2", "flair", "seg"] {
        link_dir(
            &src.join(m),
            &tmp.path().join("brats").join(m),
            &[&format!("BraTS2021_01306_{m}.nii.gz")],
        );
    }
    let mut config = ExperimentConfig {
        model: shrink(UNetConfig::brats(), 4),
        data: DataConfig::new(DataSource::Brats {
            root: tmp.path().join("brats"),
        }),
        ..Default::default()
    };
    assert_eq!(config.data.grid, [192, 192, 144]);
    config.train.steps = 1;
    config.train.grad_accum = 1;
    config.train.samples_per_checkpoint = 0;
    train_one_optimizer_step(&config, &tmp.path().join("run"));
}
