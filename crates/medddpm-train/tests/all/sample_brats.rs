//! Sampling a BraTS-style model (four modalities from a segmentation with a brain label) on the
//! real case 01306: four NIfTI files per sample named after the case, on the segmentation's
//! grid; a tumour-only segmentation plus a brain mask conditions the network exactly as the
//! segmentation with the brain label does; without either, a clear error and nothing written.

use crate::common;
use std::path::Path;

use burn::backend::Flex;
use medddpm_diffusion::{SamplerConfig, SamplerKind};
use medddpm_nifti::Volume;
use medddpm_train::data::{DataConfig, DataSource, GridPolicy};
use medddpm_train::sample::BrainMasks;
use medddpm_train::{sample_masks, ExperimentConfig, SampleOptions, SamplingModel, TrainError};
use medddpm_unet::UNetConfig;

const CASE: &str = "BraTS2021_01306";

/// An untrained small BraTS network sampling on a 16x16x12 grid (resized from the case's
/// 192x192x144 and back): the files and conditioning are what is tested, not the images.
fn model() -> SamplingModel<Flex> {
    let brats = UNetConfig::brats();
    let mut config = ExperimentConfig {
        // `tiny` without attention, at 4 channels, with BraTS's inputs and outputs.
        model: UNetConfig {
            in_channels: brats.in_channels,
            out_channels: brats.out_channels,
            model_channels: 4,
            attention_resolutions: vec![],
            ..UNetConfig::tiny()
        },
        data: DataConfig::new(DataSource::Brats {
            root: "unused".into(),
        }),
        ..Default::default()
    };
    config.data.grid = [16, 16, 12];
    config.data.grid_policy = GridPolicy::Resize;
    config.diffusion.timesteps = 20;
    let unet = config.model.init::<Flex>(&Default::default()).unwrap();
    SamplingModel::new(unet, config)
}

fn options(brain_masks: Option<BrainMasks>) -> SampleOptions {
    SampleOptions {
        samples_per_mask: 1,
        seed: 3,
        rescale: None,
        sampler: SamplerConfig {
            kind: SamplerKind::Ddim,
            steps: Some(2),
            eta: 0.0,
        },
        trajectory: None,
        overwrite: false,
        brain_masks,
        cuda_graphs: true,
    }
}

fn write(vol: &Volume, data: Vec<f32>, path: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    vol.with_data(data).unwrap().write(path).unwrap();
}

#[test]
fn four_modalities_per_sample_and_the_brain_label_from_a_mask() {
    let (_serial, tmp) = crate::common::serial_tempdir();
    let seg_path = common::shared_dir()
        .join("datasets/medddpm-samples/brats2021/seg")
        .join(format!("{CASE}_seg.nii.gz"));
    let seg = Volume::read(&seg_path).unwrap();
    let model = model();
    let device = Default::default();
    let sample = |seg: &Path, out: &Path, brain_masks| {
        sample_masks(
            &model,
            &[seg.to_path_buf()],
            out,
            &options(brain_masks),
            &device,
            |_, _, _| {},
        )
        .unwrap()
    };

    // The segmentation as prepared (brain label 4 included).
    let full_out = tmp.path().join("with-label");
    let sampled = sample(&seg_path, &full_out, None);
    // The CPU records no graphs: two warm-up passes, then every step as it comes.
    assert_eq!(sampled.graphs.captured, 0);
    let written = sampled.written;
    let names: Vec<String> = written
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        ["t1", "t1ce", "t2", "flair"].map(|m| format!("{CASE}_seed-3_sample-0_{m}.nii.gz"))
    );
    for path in &written {
        let sample = Volume::read(path).unwrap();
        assert_eq!(sample.dims(), [192, 192, 144]);
        assert_eq!(sample.affine(), seg.affine(), "{}", path.display());
        assert!(sample.data().iter().all(|v| v.is_finite()));
    }

    // Tumour labels only, and the brain as a separate mask: the same condition, so the same
    // samples (same seed).
    let tumour_only: Vec<f32> = seg
        .data()
        .iter()
        .map(|&v| if v == 4.0 { 0.0 } else { v })
        .collect();
    let brain: Vec<f32> = seg
        .data()
        .iter()
        .map(|&v| if v > 0.0 { 1.0 } else { 0.0 })
        .collect();
    let tumour_path = tmp.path().join("segs").join(format!("{CASE}_seg.nii.gz"));
    write(&seg, tumour_only, &tumour_path);
    let brain_dir = tmp.path().join("brains");
    write(&seg, brain, &brain_dir.join(format!("{CASE}_brain.nii.gz")));
    let split_out = tmp.path().join("with-mask");
    let again = sample(&tumour_path, &split_out, Some(BrainMasks(brain_dir))).written;
    for (a, b) in written.iter().zip(&again) {
        assert_eq!(
            Volume::read(a).unwrap().data(),
            Volume::read(b).unwrap().data(),
            "{}",
            b.display()
        );
    }

    // Neither: refused before anything is sampled or written.
    let none_out = tmp.path().join("refused");
    let mut calls = 0;
    let err = sample_masks(
        &model,
        std::slice::from_ref(&tumour_path),
        &none_out,
        &options(None),
        &device,
        |_, _, _| calls += 1,
    )
    .unwrap_err();
    assert!(matches!(err, TrainError::BrainLabel { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains(&format!("{CASE}_seg.nii.gz")) && text.contains("no brain label (4)"),
        "{text}"
    );
    assert_eq!(calls, 0);
    assert!(!none_out.exists() || std::fs::read_dir(&none_out).unwrap().next().is_none());
}
