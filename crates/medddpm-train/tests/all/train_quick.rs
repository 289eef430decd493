//! A briefly overfitted tiny model learns the phantom's intensities per label: its samples are
//! darkest in the background, brighter in the head and brightest in the tumour, as the training
//! image is. Also checks that the loss falls and that sampling writes NIfTI files on the mask's
//! grid.

use crate::common;
use burn::backend::Flex;
use medddpm_diffusion::{SamplerConfig, SamplerKind};
use medddpm_nifti::Volume;
use medddpm_train::data::list_masks;
use medddpm_train::{load_sampling_model, sample_masks, RunDir, SampleOptions, WeightsSource};

fn mean_per_label(values: &[f32], labels: &[f32]) -> [f64; 3] {
    let mut sum = [0.0f64; 3];
    let mut n = [0usize; 3];
    for (v, l) in values.iter().zip(labels) {
        let l = *l as usize;
        sum[l] += *v as f64;
        n[l] += 1;
    }
    assert!(n.iter().all(|&k| k > 0), "every label must occur: {n:?}");
    [
        sum[0] / n[0] as f64,
        sum[1] / n[1] as f64,
        sum[2] / n[2] as f64,
    ]
}

/// The same sampling again is refused before it starts and leaves the files as they were; with
/// `overwrite` it replaces them; another seed writes beside them; a bad mask after a good one,
/// or an output folder that cannot be written, fails before any sample is drawn.
fn check_nothing_is_overwritten(
    model: &medddpm_train::SamplingModel<Flex>,
    masks: &[std::path::PathBuf],
    out: &std::path::Path,
    options: &SampleOptions,
    written: &[std::path::PathBuf],
) {
    let device = Default::default();
    let before: Vec<Vec<u8>> = written.iter().map(|p| std::fs::read(p).unwrap()).collect();
    std::fs::write(written[0].clone(), b"user's own file").unwrap();
    let mut calls = 0;
    let err = sample_masks(model, masks, out, options, &device, |_, _, _| calls += 1).unwrap_err();
    assert!(
        matches!(
            err,
            medddpm_train::TrainError::WouldOverwrite { count: 2, .. }
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("phantom_000_seed-5_sample-0.nii.gz"),
        "{err}"
    );
    assert_eq!(calls, 0, "nothing is sampled before the refusal");
    assert_eq!(std::fs::read(&written[0]).unwrap(), b"user's own file");
    assert_eq!(std::fs::read(&written[1]).unwrap(), before[1]);

    let replace = SampleOptions {
        overwrite: true,
        ..options.clone()
    };
    sample_masks(model, masks, out, &replace, &device, |_, _, _| {}).unwrap();
    // The same seed gives the same samples.
    assert_eq!(std::fs::read(&written[0]).unwrap(), before[0]);

    let other_seed = SampleOptions {
        seed: options.seed + 1,
        samples_per_mask: 1,
        ..options.clone()
    };
    let beside = sample_masks(model, masks, out, &other_seed, &device, |_, _, _| {})
        .unwrap()
        .written;
    assert!(beside[0].ends_with("phantom_000_seed-6_sample-0.nii.gz"));
    assert_eq!(std::fs::read(&written[1]).unwrap(), before[1]);
    std::fs::remove_file(&beside[0]).unwrap();

    // A second mask that is not a mask: refused up front, naming it.
    let dir = out.parent().unwrap().join("masks-with-a-bad-one");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(&masks[0], dir.join("a_good.nii.gz")).unwrap();
    std::fs::write(dir.join("b_bad.nii.gz"), b"not a NIfTI file").unwrap();
    let listed = list_masks(&dir).unwrap();
    let fresh = out.parent().unwrap().join("samples-never");
    let mut calls = 0;
    let err = sample_masks(model, &listed, &fresh, options, &device, |_, _, _| {
        calls += 1
    })
    .unwrap_err();
    assert!(err.to_string().contains("b_bad.nii.gz"), "{err}");
    assert_eq!(calls, 0);
    assert!(
        !fresh.exists(),
        "no output folder for a run that cannot start"
    );

    // An output path under a regular file cannot be a folder.
    let blocked = written[1].join("sub");
    let err = sample_masks(model, masks, &blocked, options, &device, |_, _, _| {
        calls += 1
    })
    .unwrap_err();
    assert!(err.to_string().contains("sub"), "{err}");
    assert_eq!(calls, 0);
}

#[test]
fn overfitted_tiny_model_samples_follow_the_mask() {
    let (_serial, tmp, mut config) = common::tiny_setup(1);
    config.train.steps = 200;
    config.train.lr = 3e-3;
    config.train.grad_accum = 1;
    config.train.save_every = 200;
    config.train.ema_start = 10_000; // the EMA copies the live weights: no averaging lag
    let device = Default::default();
    let run = RunDir::new(tmp.path().join("run"));
    let summary = common::session(&config, &run, false, None).unwrap();

    let losses: Vec<f64> = common::logged(&run, "loss");
    let first: f64 = losses[..10].iter().sum::<f64>() / 10.0;
    let last: f64 = losses[losses.len() - 10..].iter().sum::<f64>() / 10.0;
    println!("loss: first 10 steps {first:.4}, last 10 steps {last:.4}");
    assert!(
        last < 0.6 * first,
        "the loss did not fall: {first} -> {last}"
    );

    let model = load_sampling_model::<Flex>(
        &WeightsSource::Checkpoint(summary.checkpoint.clone()),
        false,
        &device,
    )
    .unwrap();
    let masks = list_masks(&tmp.path().join("phantoms/mask")).unwrap();
    let out = tmp.path().join("samples");
    let options = SampleOptions {
        samples_per_mask: 2,
        seed: 5,
        rescale: None,
        sampler: SamplerConfig::default(),
        trajectory: None,
        overwrite: false,
        brain_masks: None,
        cuda_graphs: true,
    };
    let mut written = sample_masks(&model, &masks, &out, &options, &device, |_, _, _| {})
        .unwrap()
        .written;
    assert_eq!(written.len(), 2);
    assert!(
        written[1].ends_with("phantom_000_seed-5_sample-1.nii.gz"),
        "{written:?}"
    );
    check_nothing_is_overwritten(&model, &masks, &out, &options, &written);

    // A mask on another grid (20 x 16 x 12 voxels of another size) is resized to the model's
    // 16^3 for the network, and its sample is written back on the mask's own grid.
    let odd_dir = tmp.path().join("odd-mask");
    std::fs::create_dir_all(&odd_dir).unwrap();
    let odd_path = odd_dir.join("odd.nii.gz");
    Volume::read(&masks[0])
        .unwrap()
        .resize([20, 16, 12], medddpm_nifti::Interpolation::Nearest)
        .unwrap()
        .write(&odd_path)
        .unwrap();
    let odd = Volume::read(&odd_path).unwrap();
    let one = SampleOptions {
        samples_per_mask: 1,
        ..options.clone()
    };
    let odd_written = sample_masks(&model, &[odd_path], &odd_dir, &one, &device, |_, _, _| {})
        .unwrap()
        .written;
    let sample = Volume::read(&odd_written[0]).unwrap();
    assert_eq!(sample.dims(), [20, 16, 12]);
    assert!(sample.same_grid(&odd), "written on the mask's own grid");
    // The same model through 25 deterministic DDIM steps (a tenth of the network calls).
    let ddim = SampleOptions {
        samples_per_mask: 1,
        sampler: SamplerConfig {
            kind: SamplerKind::Ddim,
            steps: Some(25),
            eta: 0.0,
        },
        ..options
    };
    let mut calls = 0;
    let ddim_out = tmp.path().join("samples-ddim");
    let ddim_written = sample_masks(&model, &masks, &ddim_out, &ddim, &device, |_, _, done| {
        calls = calls.max(done)
    })
    .unwrap();
    assert_eq!(calls, 25);
    // The CPU captures nothing and says nothing about it.
    assert!(ddim_written.graphs.unsupported);
    assert_eq!(ddim_written.graphs.summary(), None);
    written.extend(ddim_written.written);
    // And through 15 DPM-Solver++(2M) steps, with the denoising drawn as a GIF of 5 frames.
    let dpm = SampleOptions {
        sampler: SamplerConfig {
            kind: SamplerKind::DpmSolver,
            steps: Some(15),
            eta: 0.0,
        },
        trajectory: Some(5),
        ..ddim
    };
    let mut calls = 0;
    let dpm_written = sample_masks(
        &model,
        &masks,
        &tmp.path().join("samples-dpm"),
        &dpm,
        &device,
        |_, _, done| calls = calls.max(done),
    )
    .unwrap()
    .written;
    assert_eq!(calls, 15);
    // The NIfTI sample, then its trajectory: steps 3, 6, ..., 15, the last held for a second.
    assert_eq!(dpm_written.len(), 2, "{dpm_written:?}");
    let gif = &dpm_written[1];
    assert!(gif.to_string_lossy().ends_with("_sample-0_trajectory.gif"));
    let mut options = gif::DecodeOptions::new();
    options.set_color_output(gif::ColorOutput::RGBA);
    let mut decoder = options
        .read_info(std::fs::File::open(gif).unwrap())
        .unwrap();
    let mut frames = 0;
    while decoder.read_next_frame().unwrap().is_some() {
        frames += 1;
    }
    assert_eq!(frames, 5 + 8, "5 steps and the last held 8 more frames");
    written.push(dpm_written[0].clone());

    let mask = Volume::read(&masks[0]).unwrap();
    let image = Volume::read(
        tmp.path()
            .join("phantoms/image")
            .join(masks[0].file_name().unwrap()),
    )
    .unwrap();
    let truth = mean_per_label(image.data(), mask.data());
    for path in &written {
        let sample = Volume::read(path).unwrap();
        assert!(
            sample.same_grid(&mask),
            "{} is not on the mask's grid",
            path.display()
        );
        assert!(sample.data().iter().all(|v| (-1.0..=1.0).contains(v)));
        let got = mean_per_label(sample.data(), mask.data());
        println!(
            "{}: mean per label {got:.3?} (training image {truth:.3?})",
            path.display()
        );
        assert!(
            got[0] + 0.2 < got[1] && got[1] + 0.2 < got[2],
            "label means not ordered and apart like the image's: {got:?} vs {truth:?}"
        );
    }
}
