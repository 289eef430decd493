//! `medddpm inspect`.

use std::path::{Path, PathBuf};

use anyhow::bail;
use burn::backend::Flex;
use burn::module::Module;
use clap::Args;
use medddpm_nifti::Volume;
use medddpm_train::checkpoint::{read_config, read_state, RunDir};
use medddpm_train::integrity::{verify_or_offer, Verification};
use medddpm_train::{load_sampling_model, WeightsSource};

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// A NIfTI file, an experiment (built-in name or TOML file), a checkpoint folder or a run folder.
    path: String,
}

pub fn run(args: InspectArgs) -> anyhow::Result<()> {
    let path = PathBuf::from(&args.path);
    let name = medddpm_nifti::file_name(&path);
    if name.ends_with(".nii") || name.ends_with(".nii.gz") || name.ends_with(".hdr") {
        return volume(&path);
    }
    if path.is_dir() {
        return checkpoint(&path);
    }
    if name.ends_with(".toml")
        || crate::experiments::BUILT_IN
            .iter()
            .any(|(n, _)| *n == args.path)
    {
        return experiment(&args.path);
    }
    bail!("don't know how to inspect '{}': give a .nii/.nii.gz file, an experiment, or a checkpoint or run folder", args.path)
}

/// A NIfTI file's geometry, value range and header.
fn volume(path: &Path) -> anyhow::Result<()> {
    let v = Volume::read(path)?;
    println!("file:     {}", path.display());
    println!(
        "shape:    {:?} (network order {:?})",
        v.dims(),
        v.network_shape()
    );
    println!("dtype:    {:?}", v.dtype());
    println!("spacing:  {:?}", v.spacing());
    println!("affine:");
    for row in v.affine() {
        println!(
            "  {:>10.4} {:>10.4} {:>10.4} {:>10.4}",
            row[0], row[1], row[2], row[3]
        );
    }
    let (min, max, sum) = v.data().iter().fold(
        (f32::INFINITY, f32::NEG_INFINITY, 0.0f64),
        |(a, b, s), &x| (a.min(x), b.max(x), s + x as f64),
    );
    println!(
        "values:   min {min} max {max} mean {:.6}",
        sum / v.voxel_count() as f64
    );
    println!("header:\n{}", v.header());
    Ok(())
}

/// A checkpoint (or a run folder's latest): state, integrity, and the resolved config.
fn checkpoint(path: &Path) -> anyhow::Result<()> {
    let ckpt = RunDir::resolve_checkpoint(path)?;
    let state = read_state(&ckpt)?;
    let config = read_config(&ckpt)?;
    let params = config.model.init::<Flex>(&Default::default())?.num_params();
    // The checks sampling and resuming make: checksums, shapes against the config, and
    // finite weights, for both sets of weights.
    let checked = verify_or_offer(&ckpt)?;
    for live in [false, true] {
        load_sampling_model::<Flex>(
            &WeightsSource::Checkpoint(ckpt.clone()),
            live,
            &Default::default(),
        )?;
    }
    let integrity = match checked {
        Verification::Verified { files } => format!("{files} files match their checksums"),
        Verification::NoManifest => {
            "no checksums (written by an older medddpm), not verified".to_string()
        }
    };
    println!("checkpoint: {}", ckpt.display());
    println!(
        "step:       {} (micro-batches {}, seed {})",
        state.step, state.micro_batches, state.seed
    );
    println!("last loss:  {}", state.last_loss);
    println!("trained:    {:.1} s", state.elapsed_s);
    println!("parameters: {params}");
    println!("integrity:  {integrity}; live and EMA weights fit the config and are finite");
    println!("\n# resolved config\n{}", config.to_toml());
    Ok(())
}

/// An experiment file or built-in experiment, validated and resolved.
fn experiment(name: &str) -> anyhow::Result<()> {
    let (_, config) = crate::experiments::load(name)?;
    config.validate()?;
    for warning in config.model.unmatched_attention() {
        eprintln!("warning: [model] {warning}");
    }
    println!("{}", config.to_toml());
    // A config can be valid and still beyond this machine: say so here, not at an allocation.
    let settings = medddpm_backend::ComputeSettings {
        precision: config.compute.precision,
        ..Default::default()
    };
    let precision = crate::plan::precision_of(&settings);
    let shape = crate::plan::training_shape(&config, precision);
    let work = medddpm_plan::Work::Training { ema: true };
    let target = crate::plan::target(settings.backend, 0);
    eprintln!(
        "memory: training needs about {} here in {precision} (`medddpm plan {name}` shows the parts)",
        medddpm_plan::gib(medddpm_plan::plan(&shape, work, target.allocator).total()),
    );
    if let Some(message) = crate::plan::shortfall("training", &shape, work, &target) {
        eprintln!("warning: {message}");
    }
    Ok(())
}
