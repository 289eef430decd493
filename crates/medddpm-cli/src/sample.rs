//! `medddpm sample`.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, ValueEnum};
use medddpm_backend::KernelAutodiffBackend;
use medddpm_diffusion::{Sampler, SamplerConfig, SamplerKind};
use medddpm_train::data::list_masks;
use medddpm_train::{load_sampling_model, sample_masks, SampleOptions, WeightsSource};
use medddpm_unet::{cast_compute_params, UNetConfig};

use crate::progress::SamplingProgress;
use medddpm_backend::{run_on, BackendTask, ComputeArgs, RunEnv};

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ReferenceModel {
    /// The released whole-head model (model_128.pt).
    WholeHead,
    /// The released BraTS model (model_brats.pt).
    Brats,
}

#[derive(Debug, Args)]
pub struct SampleArgs {
    /// Our checkpoint folder, a run folder (its latest checkpoint), or a reference `.pt` file.
    #[arg(long)]
    checkpoint: PathBuf,
    /// A mask file, or a folder of masks (*.nii, *.nii.gz).
    #[arg(long)]
    masks: PathBuf,
    /// Output folder.
    #[arg(long)]
    out: PathBuf,
    /// Samples per mask.
    #[arg(long, default_value_t = 1)]
    samples_per_mask: usize,
    /// Seed of the sampling noise.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Rescale the network's [-1, 1] output linearly to MIN,MAX before writing.
    #[arg(long, value_parser = parse_range)]
    rescale: Option<(f32, f32)>,
    /// Use the live training weights instead of the EMA weights.
    #[arg(long)]
    live_weights: bool,
    /// The network of a reference `.pt` checkpoint.
    #[arg(long, value_enum, default_value = "whole-head")]
    reference_model: ReferenceModel,
    /// Reverse process: `ddpm` (ancestral, every timestep: the reference's), `ddim`, or
    /// `dpm-solver++` (second-order multistep, deterministic; 10-25 steps).
    #[arg(long, default_value = "ddpm")]
    sampler: SamplerKind,
    /// Network calls per sample (DDIM and DPM-Solver++; default: every timestep of the
    /// schedule).
    #[arg(long)]
    steps: Option<usize>,
    /// DDIM's noise scale: 0 is deterministic, 1 gives DDPM's variance.
    #[arg(long, default_value_t = 0.0)]
    eta: f64,
    #[command(flatten)]
    compute: ComputeArgs,
}

fn parse_range(s: &str) -> Result<(f32, f32), String> {
    let (a, b) = s
        .split_once(',')
        .ok_or_else(|| format!("'{s}': expected MIN,MAX"))?;
    let lo = a.trim().parse::<f32>().map_err(|e| format!("'{a}': {e}"))?;
    let hi = b.trim().parse::<f32>().map_err(|e| format!("'{b}': {e}"))?;
    if lo >= hi {
        return Err(format!("'{s}': MIN must be below MAX"));
    }
    Ok((lo, hi))
}

struct SampleTask {
    source: WeightsSource,
    live: bool,
    masks: Vec<PathBuf>,
    out: PathBuf,
    options: SampleOptions,
}

impl BackendTask for SampleTask {
    type Output = ();
    fn run<B: KernelAutodiffBackend>(self, device: B::Device, env: &RunEnv) -> anyhow::Result<()> {
        let mut model = load_sampling_model::<B::InnerBackend>(&self.source, self.live, &device)?;
        model.unet =
            cast_compute_params(model.unet, env.compute_dtype()).with_compute(env.compute());
        let steps = Sampler::new(model.schedule.clone(), &self.options.sampler)?.num_steps();
        eprintln!(
            "sampling {} mask(s) x {} on the {} backend ({}, {}), {} sampler, {steps} reverse steps each",
            self.masks.len(),
            self.options.samples_per_mask,
            env.backend,
            env.precision,
            env.layout,
            self.options.sampler.kind,
        );
        let mut bar = SamplingProgress::new(
            (self.masks.len() * self.options.samples_per_mask * steps) as u64,
        );
        let written = sample_masks(
            &model,
            &self.masks,
            &self.out,
            &self.options,
            &device,
            |m, n, done| {
                bar.update(
                    ((m * self.options.samples_per_mask + n) * steps + done) as u64,
                    format!("mask {}/{} sample {}", m + 1, self.masks.len(), n + 1),
                );
            },
        )?;
        bar.finish();
        for path in &written {
            println!("{}", path.display());
        }
        eprintln!("wrote {} file(s) to {}", written.len(), self.out.display());
        Ok(())
    }
}

pub fn run(args: SampleArgs) -> anyhow::Result<()> {
    let is_pt = args
        .checkpoint
        .extension()
        .is_some_and(|e| e == "pt" || e == "pth");
    let source = if is_pt {
        let model = match args.reference_model {
            ReferenceModel::WholeHead => UNetConfig::whole_head(),
            ReferenceModel::Brats => UNetConfig::brats(),
        };
        WeightsSource::Reference {
            path: args.checkpoint.clone(),
            model,
        }
    } else {
        WeightsSource::Checkpoint(args.checkpoint.clone())
    };
    let masks = list_masks(&args.masks)
        .with_context(|| format!("finding masks in {}", args.masks.display()))?;
    let options = SampleOptions {
        samples_per_mask: args.samples_per_mask,
        seed: args.seed,
        rescale: args.rescale,
        sampler: SamplerConfig {
            kind: args.sampler,
            steps: args.steps,
            eta: args.eta,
        },
    };
    run_on(
        &args.compute.settings(),
        SampleTask {
            source,
            live: args.live_weights,
            masks,
            out: args.out,
            options,
        },
    )
}
