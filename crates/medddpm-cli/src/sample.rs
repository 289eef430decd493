//! `medddpm sample`.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, ValueEnum};
use medddpm_backend::KernelAutodiffBackend;
use medddpm_diffusion::{Sampler, SamplerConfig, SamplerKind, Scheduler};
use medddpm_train::data::list_masks;
use medddpm_train::sample::BrainMasks;
use medddpm_train::{
    load_sampling_model, sample_masks, ExperimentConfig, SampleOptions, TrainError, WeightsSource,
};
use medddpm_unet::{cast_compute_params, GraphStatus};

use crate::compute_args::ComputeArgs;
use crate::progress::SamplingProgress;
use medddpm_backend::{run_on, BackendTask, RunEnv};

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ReferenceModel {
    /// The released whole-head model (model_128.pt).
    WholeHead,
    /// The released BraTS model (model_brats.pt).
    Brats,
}

/// Which weights sample: shared by `sample` and `synthesize`.
#[derive(Debug, Args)]
pub struct WeightsArgs {
    /// Our checkpoint folder, a run folder (its latest checkpoint), or a reference `.pt` file.
    #[arg(long)]
    checkpoint: PathBuf,
    /// Use the live training weights instead of the EMA weights.
    #[arg(long)]
    pub live_weights: bool,
    /// The network of a reference `.pt` checkpoint.
    #[arg(long, value_enum, default_value = "whole-head")]
    reference_model: ReferenceModel,
}

impl WeightsArgs {
    /// The weights these switches name.
    pub fn source(&self) -> WeightsSource {
        let is_pt = self
            .checkpoint
            .extension()
            .is_some_and(|e| e == "pt" || e == "pth");
        if !is_pt {
            return WeightsSource::Checkpoint(self.checkpoint.clone());
        }
        let experiment = match self.reference_model {
            ReferenceModel::WholeHead => ExperimentConfig::reference_whole_head(),
            ReferenceModel::Brats => ExperimentConfig::reference_brats(),
        };
        WeightsSource::Reference {
            path: self.checkpoint.clone(),
            experiment: Box::new(experiment),
        }
    }
}

/// How the sampling runs: shared by `sample` and `synthesize`.
#[derive(Debug, Args)]
pub struct RunSwitches {
    /// Brain masks for segmentations that hold tumour labels only, for models conditioned on
    /// a brain label (BraTS: 4): one file for every mask, or a folder with one per case
    /// (`<seg file name>`, `<case>_brain`, `<case>_brainmask` or `<case>`, .nii.gz or .nii).
    /// A voxel above 0 is brain; the label goes where no tumour label is.
    #[arg(long, value_name = "FILE|DIR")]
    brain_mask: Option<PathBuf>,
    /// Replay the network's forward pass from a CUDA graph after two warm-up calls (CUDA; the
    /// network's output is the same bit for bit, whole samples differ in the last bits: up to
    /// 1.6e-4 after 250 DDPM steps, probably because without graphs the network's last
    /// elementwise operations fuse into the sampler's update). Off by default: on an H200 it did not make
    /// the sampling step faster (22.0 against 21.7 ms; docs/benchmarks).
    #[arg(long)]
    pub cuda_graphs: bool,
    /// Start even when the memory plan says the run (its batch) does not fit the device.
    #[arg(long)]
    pub no_memory_check: bool,
}

impl RunSwitches {
    /// `--brain-mask`, for the sampler.
    pub fn brain_masks(&self) -> Option<BrainMasks> {
        self.brain_mask.clone().map(BrainMasks)
    }
}

#[derive(Debug, Args)]
pub struct SampleArgs {
    #[command(flatten)]
    weights: WeightsArgs,
    /// A mask file, or a folder of masks (*.nii, *.nii.gz).
    #[arg(long)]
    masks: PathBuf,
    /// Output folder.
    #[arg(long)]
    out: PathBuf,
    /// Samples per mask (at least 1).
    #[arg(long, default_value_t = 1, value_parser = at_least_one)]
    samples_per_mask: usize,
    /// Seed of the sampling noise.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Rescale the network's [-1, 1] output linearly to MIN,MAX before writing.
    #[arg(long, value_parser = parse_range)]
    rescale: Option<(f32, f32)>,
    /// Reverse process: `ddpm` (ancestral, every timestep: the reference's), `ddim`, or
    /// `dpm-solver++` (second-order multistep, deterministic; 10-25 steps). Default: the
    /// run's `[sampler]` section (ddpm for reference `.pt` files and runs without one).
    #[arg(long)]
    sampler: Option<SamplerKind>,
    /// Network calls per sample (DDIM and DPM-Solver++; default: the run's `[sampler]`
    /// steps, else every timestep of the schedule).
    #[arg(long)]
    steps: Option<usize>,
    /// DDIM's noise scale: 0 is deterministic, 1 gives DDPM's variance (default: the run's
    /// `[sampler]` eta, else 0).
    #[arg(long)]
    eta: Option<f64>,
    /// Also write `<mask>_seed-<seed>_sample-<n>_trajectory.gif` beside each sample: the
    /// denoising, three planes per frame (at most FRAMES frames, evenly spaced over the reverse
    /// steps).
    #[arg(long, num_args = 0..=1, default_missing_value = "50", value_name = "FRAMES", value_parser = at_least_one)]
    trajectory: Option<usize>,
    /// Replace files of the same names in --out (without it, sampling refuses to start when
    /// any of its outputs exists).
    #[arg(long)]
    overwrite: bool,
    #[command(flatten)]
    run: RunSwitches,
    #[command(flatten)]
    compute: ComputeArgs,
}

/// A count that must be at least 1 (0 samples or 0 frames would write nothing and succeed).
pub fn at_least_one(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("'{s}': {e}")),
    }
}

/// `--rescale MIN,MAX`: finite and ordered.
pub fn parse_range(s: &str) -> Result<(f32, f32), String> {
    let (a, b) = s
        .split_once(',')
        .ok_or_else(|| format!("'{s}': expected MIN,MAX"))?;
    let lo = a.trim().parse::<f32>().map_err(|e| format!("'{a}': {e}"))?;
    let hi = b.trim().parse::<f32>().map_err(|e| format!("'{b}': {e}"))?;
    if !(lo.is_finite() && hi.is_finite()) {
        return Err(format!("'{s}': MIN and MAX must be finite numbers"));
    }
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
    samples_per_mask: usize,
    seed: u64,
    rescale: Option<(f32, f32)>,
    trajectory: Option<usize>,
    overwrite: bool,
    brain_masks: Option<BrainMasks>,
    cuda_graphs: bool,
    sampler: SamplerFlags,
}

/// The sampler switches given on the command line; the rest comes from the run's config.
struct SamplerFlags {
    kind: Option<SamplerKind>,
    steps: Option<usize>,
    eta: Option<f64>,
}

impl SamplerFlags {
    /// A new `--sampler` starts from that sampler's defaults (the run's step count belongs to
    /// the run's sampler); otherwise the run's sampler with any `--steps` / `--eta` applied.
    fn resolve(&self, run: &SamplerConfig) -> SamplerConfig {
        let base = match self.kind {
            Some(kind) if kind != run.kind => SamplerConfig {
                kind,
                ..Default::default()
            },
            _ => *run,
        };
        SamplerConfig {
            kind: base.kind,
            steps: self.steps.or(base.steps),
            eta: self.eta.unwrap_or(base.eta),
        }
    }
}

impl BackendTask for SampleTask {
    type Output = ();
    type Error = anyhow::Error;
    fn run<B: KernelAutodiffBackend>(self, device: B::Device, env: &RunEnv) -> anyhow::Result<()> {
        let mut model = load_sampling_model::<B::InnerBackend>(&self.source, self.live, &device)?;
        model.unet =
            cast_compute_params(model.unet, env.compute_dtype()).with_compute(env.compute());
        let options = SampleOptions {
            samples_per_mask: self.samples_per_mask,
            seed: self.seed,
            rescale: self.rescale,
            sampler: self.sampler.resolve(&model.config.sampler),
            trajectory: self.trajectory,
            overwrite: self.overwrite,
            brain_masks: self.brain_masks,
            cuda_graphs: self.cuda_graphs,
        };
        let steps = Sampler::new(model.schedule.clone(), &options.sampler)?.num_steps();
        crate::oom::describe(format!(
            "sampling {:?} volumes (model_channels {}) in {} {} on {}",
            model.config.data.grid,
            model.config.model.model_channels,
            env.precision,
            env.layout,
            env.backend
        ));
        eprintln!(
            "sampling {} mask(s) x {} on the {} backend ({}, {}), {} sampler, {steps} reverse steps each",
            self.masks.len(),
            options.samples_per_mask,
            env.backend,
            env.precision,
            env.layout,
            options.sampler.kind,
        );
        let mut bar =
            SamplingProgress::new((self.masks.len() * options.samples_per_mask * steps) as u64);
        let sampled = sample_masks(
            &model,
            &self.masks,
            &self.out,
            &options,
            &device,
            |m, n, done| {
                bar.update(
                    ((m * options.samples_per_mask + n) * steps + done) as u64,
                    format!("mask {}/{} sample {}", m + 1, self.masks.len(), n + 1),
                );
            },
        )
        .map_err(|e| match e {
            TrainError::WouldOverwrite { .. } => anyhow::anyhow!(
                "{e}: pass --overwrite to replace them, or choose another --out or --seed"
            ),
            e => e.into(),
        })?;
        bar.finish();
        graphs_line(&sampled.graphs);
        let written = sampled.written;
        for path in &written {
            println!("{}", path.display());
        }
        eprintln!("wrote {} file(s) to {}", written.len(), self.out.display());
        Ok(())
    }
}

/// The experiment a checkpoint was trained with, read without loading weights.
pub fn experiment_of(source: &WeightsSource) -> Result<ExperimentConfig, TrainError> {
    match source {
        WeightsSource::Reference { experiment, .. } => Ok((**experiment).clone()),
        WeightsSource::Checkpoint(path) => {
            let checkpoint = medddpm_train::RunDir::resolve_checkpoint(path)?;
            medddpm_train::checkpoint::read_config(&checkpoint)
        }
    }
}

/// One line on what the CUDA graphs did (nothing where the backend has none).
fn graphs_line(graphs: &GraphStatus) {
    if let Some(line) = graphs.summary() {
        eprintln!("{line}");
    }
}

pub fn run(args: SampleArgs) -> anyhow::Result<()> {
    let source = args.weights.source();
    let masks = list_masks(&args.masks)
        .with_context(|| format!("finding masks in {}", args.masks.display()))?;
    let settings = args.compute.settings();
    // Sampling runs on one device (`--devices 1` picks which).
    settings.one_device("sample")?;
    // The plan needs the run's network and grid; a checkpoint that cannot say is left to the
    // loading below, whose errors name the problem.
    if let Ok(config) = experiment_of(&source) {
        let shape = medddpm_plan::RunShape {
            batch: 1,
            ..crate::plan::training_shape(&config, crate::plan::precision_of(&settings))
        };
        let work = medddpm_plan::Work::Sampling;
        crate::plan::check_fits(
            "sampling",
            &shape,
            work,
            &settings,
            args.run.no_memory_check,
        )?;
    }
    run_on(
        &settings,
        SampleTask {
            source,
            live: args.weights.live_weights,
            masks,
            out: args.out,
            samples_per_mask: args.samples_per_mask,
            seed: args.seed,
            rescale: args.rescale,
            trajectory: args.trajectory,
            overwrite: args.overwrite,
            brain_masks: args.run.brain_masks(),
            cuda_graphs: args.run.cuda_graphs,
            sampler: SamplerFlags {
                kind: args.sampler,
                steps: args.steps,
                eta: args.eta,
            },
        },
    )
}

#[cfg(test)]
mod tests {
    use super::{parse_range, SampleArgs};
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        sample: SampleArgs,
    }

    /// Zero samples or zero trajectory frames would write nothing and report success.
    #[test]
    fn counts_of_zero_are_refused() {
        let base = [
            "x",
            "--checkpoint",
            "run",
            "--masks",
            "m.nii.gz",
            "--out",
            "o",
        ];
        let with = |extra: &[&str]| Cli::try_parse_from(base.iter().chain(extra));
        assert!(with(&[]).is_ok());
        assert!(with(&["--samples-per-mask", "2", "--trajectory", "3"]).is_ok());
        assert!(with(&["--trajectory"]).is_ok(), "the flag alone: 50 frames");
        for bad in [["--samples-per-mask", "0"], ["--trajectory", "0"]] {
            let err = with(&bad).err().expect("refused").to_string();
            assert!(err.contains("at least 1"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn rescale_ranges_are_finite_and_ordered() {
        assert_eq!(parse_range("0, 255"), Ok((0.0, 255.0)));
        for bad in ["nan,1", "0,inf", "-inf,0", "1,1", "2,1", "1"] {
            assert!(parse_range(bad).is_err(), "{bad} accepted");
        }
    }
}
