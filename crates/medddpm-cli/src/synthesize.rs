//! `medddpm synthesize`: a data set of image/label pairs sampled from masks, resumable, on one
//! device or one process per device (`synthesize/lead.rs`).

mod augment;
mod lead;

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, ValueEnum};
use medddpm_backend::{
    run_on, BackendKind, BackendTask, ComputeSettings, KernelAutodiffBackend, RunEnv,
};
use medddpm_diffusion::{SamplerConfig, SamplerKind};
use medddpm_kernels::conv::CUDNN_MAX_VALUES;
use medddpm_plan::{plan, RunShape, Work};
use medddpm_synth::{run_shard, DatasetLayout, Progress, SynthOptions, Synthesis};
use medddpm_train::data::list_masks;
use medddpm_train::{load_sampling_model, ExperimentConfig, WeightsSource};
use medddpm_unet::cast_compute_params;

use crate::compute_args::ComputeArgs;
use crate::progress::SynthProgress;
use crate::sample::{at_least_one, experiment_of, parse_range, RunSwitches, WeightsArgs};

/// DDIM's and DPM-Solver++'s network calls when `--steps` is not given.
const DEFAULT_STEPS: usize = 25;
/// The largest batch `--batch-size auto` picks.
const AUTO_MAX_BATCH: usize = 4;

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LayoutArg {
    /// The folders `medddpm train` reads: image/ and mask/ (one image channel), or t1/ t1ce/
    /// t2/ flair/ and seg/ (a BraTS model's four).
    Ours,
    /// nnU-Net v2's raw data set: DatasetNNN_Name/imagesTr, labelsTr and dataset.json.
    Nnunet,
}

#[derive(Debug, Args)]
pub struct SynthesizeArgs {
    #[command(flatten)]
    weights: WeightsArgs,
    #[command(flatten)]
    augment: augment::AugmentArgs,
    /// A mask file, or a folder of masks (*.nii, *.nii.gz): the pairs' sources.
    #[arg(long)]
    masks: PathBuf,
    /// Output folder: the data set, manifest.jsonl (a line per finished pair) and
    /// synthesize.json (the settings a rerun must repeat to resume).
    #[arg(long)]
    out: PathBuf,
    /// Pairs in the data set (pair k: variant k / M of mask k % M). Rerunning the same
    /// command finishes what a killed run left; a larger count adds pairs.
    #[arg(long, value_parser = at_least_one)]
    count: usize,
    /// The most pairs one mask gives (default: as many as --count needs).
    #[arg(long, value_parser = at_least_one)]
    variants_per_mask: Option<usize>,
    /// Seed: pair k's noise comes from a seed derived from (seed, k).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Reverse process: dpm-solver++ (deterministic, second order), ddim or ddpm (every
    /// timestep, the reference's).
    #[arg(long, default_value = "dpm-solver++")]
    sampler: SamplerKind,
    /// Network calls per pair (default 25 for dpm-solver++ and ddim; ddpm takes every timestep).
    #[arg(long, value_parser = at_least_one)]
    steps: Option<usize>,
    /// DDIM's noise scale (0: deterministic).
    #[arg(long, default_value_t = 0.0)]
    eta: f64,
    /// Volumes per network call: a number, or auto (on CUDA the most, up to 4, that the memory
    /// plan fits on the device; 1 elsewhere).
    #[arg(long, default_value = "auto", value_parser = parse_batch)]
    batch_size: BatchSize,
    /// Folder layout of the data set.
    #[arg(long, value_enum, default_value = "ours")]
    dataset_layout: LayoutArg,
    /// nnU-Net data set id (1-999; nnunet layout).
    #[arg(long, default_value_t = 501)]
    dataset_id: u16,
    /// nnU-Net data set name (nnunet layout).
    #[arg(long, default_value = "Synthetic")]
    dataset_name: String,
    /// Rescale the images from [-1, 1] linearly to MIN,MAX before writing.
    #[arg(long, value_parser = parse_range)]
    rescale: Option<(f32, f32)>,
    #[command(flatten)]
    run: RunSwitches,
    /// This process's share of the work, R/W (set by the process that starts one per device).
    #[arg(long, hide = true, value_parser = parse_shard)]
    shard: Option<(usize, usize)>,
    #[command(flatten)]
    compute: ComputeArgs,
}

/// `--batch-size`: decided per process from the memory plan, or given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BatchSize {
    Auto,
    Fixed(usize),
}

/// `auto` or a count of at least 1.
fn parse_batch(s: &str) -> Result<BatchSize, String> {
    match s {
        "auto" => Ok(BatchSize::Auto),
        n => at_least_one(n).map(BatchSize::Fixed),
    }
}

/// `R/W`: rank R of W processes.
fn parse_shard(s: &str) -> Result<(usize, usize), String> {
    let parsed = s
        .split_once('/')
        .and_then(|(r, w)| Some((r.parse().ok()?, w.parse().ok()?)));
    match parsed {
        Some((r, w)) if r < w => Ok((r, w)),
        _ => Err(format!("'{s}': expected R/W with R below W")),
    }
}

impl SynthesizeArgs {
    fn sampler(&self) -> SamplerConfig {
        let steps = match self.sampler {
            SamplerKind::Ddpm => self.steps,
            _ => Some(self.steps.unwrap_or(DEFAULT_STEPS)),
        };
        SamplerConfig {
            kind: self.sampler,
            steps,
            eta: self.eta,
        }
    }

    fn layout(&self) -> DatasetLayout {
        match self.dataset_layout {
            LayoutArg::Ours => DatasetLayout::Ours,
            LayoutArg::Nnunet => DatasetLayout::NnUnet {
                id: self.dataset_id,
                name: self.dataset_name.clone(),
            },
        }
    }

    fn options(&self, batch_size: usize) -> SynthOptions {
        SynthOptions {
            count: self.count,
            variants_per_mask: self.variants_per_mask,
            seed: self.seed,
            sampler: self.sampler(),
            layout: self.layout(),
            rescale: self.rescale,
            brain_masks: self.run.brain_masks(),
            batch_size,
            cuda_graphs: self.run.cuda_graphs,
        }
    }
}

pub fn run(args: SynthesizeArgs) -> anyhow::Result<()> {
    let source = args.weights.source();
    let config = experiment_of(&source)
        .with_context(|| "reading the checkpoint's configuration".to_string())?;
    let masks = list_masks(&args.masks)
        .with_context(|| format!("finding masks in {}", args.masks.display()))?;
    let settings = args.compute.settings();
    let augmentation = args.augment.config()?;
    let plan = |batch: usize| {
        let options = args.options(batch);
        let weights = (&source, args.weights.live_weights);
        let recorded = augmentation.as_ref().map(augment::settings_value);
        Synthesis::new(&args.out, &masks, &config, weights, options, recorded)
    };
    match args.shard {
        Some((rank, world)) => {
            let synthesis = plan(1)?;
            synthesis.check_settings()?;
            let task = (synthesis, augmentation);
            one_process(&args, &config, &source, task, (rank, world), settings)
        }
        None if settings.devices.len() > 1 => lead::run(plan(1)?, &settings),
        None => {
            let synthesis = plan(1)?;
            let (_lock, state) = synthesis.begin()?;
            say_resumed(&synthesis, state);
            let task = (synthesis, augmentation);
            one_process(&args, &config, &source, task, (0, 1), settings)
        }
    }
}

/// What a rerun found, in one line (nothing for a fresh folder).
fn say_resumed(synthesis: &Synthesis, state: medddpm_synth::FolderState) {
    if state.done + state.torn + state.removed > 0 {
        eprintln!(
            "resuming {}: {} of {} pairs done ({} torn manifest line(s) dropped, {} leftover file(s) removed)",
            synthesis.out().display(),
            state.done,
            synthesis.list().count(),
            state.torn,
            state.removed
        );
    }
}

/// Process `rank` of `world` makes its pending pairs (and, alone, finishes the data set).
fn one_process(
    args: &SynthesizeArgs,
    config: &ExperimentConfig,
    source: &WeightsSource,
    (mut synthesis, augmentation): (Synthesis, Option<medddpm_mask::augment::AugmentConfig>),
    (rank, world): (usize, usize),
    mut settings: ComputeSettings,
) -> anyhow::Result<()> {
    let pairs = synthesis.pending(rank, world)?;
    if pairs.is_empty() {
        // Nothing to sample: no backend to start.
        return match world {
            1 => finish(&synthesis),
            _ => Ok(()),
        };
    }
    if world > 1 {
        end_with_the_lead();
        // Each process is one device; on the CPU a device other than 0 needs `processes`.
        settings.launch = medddpm_backend::Launch::Processes;
        settings.show_tuning = false;
    } else {
        settings.one_device("synthesize")?;
    }
    let batch = match args.batch_size {
        BatchSize::Fixed(k) => k,
        BatchSize::Auto => auto_batch(config, &settings),
    }
    .min(pairs.len());
    let shape = RunShape {
        batch,
        ..crate::plan::training_shape(config, crate::plan::precision_of(&settings))
    };
    crate::plan::check_fits(
        "synthesizing",
        &shape,
        Work::Sampling,
        &settings,
        args.run.no_memory_check,
    )?;
    synthesis.set_batch_size(batch);
    let task = SynthTask {
        masks: augment::mask_source(augmentation, &config.data.label_scheme),
        synthesis,
        live: args.weights.live_weights,
        source,
        pairs,
        place: (rank, world),
    };
    run_on(&settings, task)
}

/// A process of a multi-device run ends when the process that started it does (Linux), so
/// that a lead killed with -9 leaves none writing into the folder a rerun will tidy.
fn end_with_the_lead() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with PR_SET_PDEATHSIG only sets this process's parent-death signal.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        // The lead may have ended before the call: then this process was handed to init.
        if libc::getppid() == 1 {
            libc::_exit(1);
        }
    }
}

/// The largest batch (up to [`AUTO_MAX_BATCH`]) whose sampling the memory plan fits on the
/// CUDA device, with the first-run margin, and that cuDNN takes in one call (past
/// [`CUDNN_MAX_VALUES`] the engine splits the batch: on an H200 BraTS batches of 4 ran at batch
/// 3's rate with 8 GiB more memory); 1 on the other backends, where batching gains little (the
/// CPU) or the memory is not known (wgpu).
fn auto_batch(config: &ExperimentConfig, settings: &ComputeSettings) -> usize {
    let target = crate::plan::target(settings.backend, settings.devices[0]);
    let (BackendKind::Cuda, Some(capacity)) = (target.backend, target.capacity) else {
        return 1;
    };
    let base = crate::plan::training_shape(config, crate::plan::precision_of(settings));
    let largest = medddpm_plan::census(&base.model, base.grid).largest_tensor;
    let indexable = (CUDNN_MAX_VALUES as u64 / largest.max(1)).max(1) as usize;
    (1..=AUTO_MAX_BATCH.min(indexable))
        .take_while(|&batch| {
            let shape = RunShape {
                batch,
                ..base.clone()
            };
            let needed = plan(&shape, Work::Sampling, target.allocator).total() as f64;
            needed * medddpm_plan::FIRST_RUN_FACTOR <= capacity as f64
        })
        .last()
        .unwrap_or(1)
}

/// One process's pairs on the backend it runs.
struct SynthTask<'a> {
    synthesis: Synthesis,
    /// Where each pair's mask comes from (the source mask, or its augmented variant).
    masks: Box<dyn medddpm_synth::MaskSource>,
    source: &'a WeightsSource,
    live: bool,
    pairs: Vec<medddpm_synth::Pair>,
    place: (usize, usize),
}

impl BackendTask for SynthTask<'_> {
    type Output = ();
    type Error = anyhow::Error;
    fn run<B: KernelAutodiffBackend>(self, device: B::Device, env: &RunEnv) -> anyhow::Result<()> {
        let s = &self.synthesis;
        let (rank, world) = self.place;
        let mut model = load_sampling_model::<B::InnerBackend>(self.source, self.live, &device)?;
        model.unet =
            cast_compute_params(model.unet, env.compute_dtype()).with_compute(env.compute());
        let o = s.options();
        let share = match world {
            1 => format!("of {}", s.list().count()),
            _ => format!("(process {} of {world})", rank + 1),
        };
        eprintln!(
            "synthesizing {} pair(s) {share} into {} on the {} backend ({}, {}): {} sampler, {} steps, batches of {}",
            self.pairs.len(),
            s.out().display(),
            env.backend,
            env.precision,
            env.layout,
            o.sampler.kind,
            s.settings().steps,
            o.batch_size,
        );
        let mut bar = (world == 1).then(|| {
            let done = s.list().count() - self.pairs.len();
            SynthProgress::new(
                s.list().count() as u64,
                done as u64,
                s.settings().steps as u64,
            )
        });
        let mut progress = |p: Progress| match (&mut bar, p) {
            (Some(bar), Progress::Step { batch, done, .. }) => bar.step(batch, done),
            (Some(bar), Progress::Pair(_)) => bar.pair(),
            _ => {}
        };
        let summary = run_shard(
            s,
            &model,
            self.masks.as_ref(),
            &self.pairs,
            (rank, world),
            &device,
            &mut progress,
        )?;
        if let Some(bar) = bar {
            bar.finish();
        }
        if let Some(line) = summary.graphs.summary() {
            eprintln!("{line}");
        }
        if world == 1 {
            finish(s)?;
        }
        Ok(())
    }
}

/// Merges the manifest and writes `dataset.json`; says where the data set is.
fn finish(s: &Synthesis) -> anyhow::Result<()> {
    let state = s.finish()?;
    let root = s.dataset_dir();
    println!("{}", root.display());
    eprintln!(
        "{} of {} pairs in {} (manifest: {})",
        state.done,
        s.list().count(),
        root.display(),
        s.out().join(medddpm_synth::MANIFEST_FILE).display()
    );
    if state.done < s.list().count() {
        anyhow::bail!(
            "{} pair(s) are missing: run the same command again to make them",
            s.list().count() - state.done
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        synthesize: SynthesizeArgs,
    }

    fn parse(extra: &[&str]) -> Result<SynthesizeArgs, clap::Error> {
        let base = [
            "x",
            "--checkpoint",
            "run",
            "--masks",
            "m",
            "--out",
            "o",
            "--count",
            "4",
        ];
        Cli::try_parse_from(base.iter().chain(extra)).map(|c| c.synthesize)
    }

    #[test]
    fn defaults_are_dpm_solver_25_steps_and_an_automatic_batch() {
        let args = parse(&[]).unwrap();
        let s = args.sampler();
        assert_eq!((s.kind, s.steps), (SamplerKind::DpmSolver, Some(25)));
        assert_eq!(args.batch_size, BatchSize::Auto);
        assert_eq!(args.layout(), DatasetLayout::Ours);
        let args = parse(&[
            "--sampler",
            "ddpm",
            "--batch-size",
            "3",
            "--dataset-layout",
            "nnunet",
        ])
        .unwrap();
        assert_eq!(args.sampler().steps, None);
        assert_eq!(args.batch_size, BatchSize::Fixed(3));
        assert_eq!(
            args.layout(),
            DatasetLayout::NnUnet {
                id: 501,
                name: "Synthetic".into()
            }
        );
        assert!(parse(&["--batch-size", "0"]).is_err());
        assert!(parse(&["--shard", "2/2"]).is_err());
        assert_eq!(parse(&["--shard", "1/2"]).unwrap().shard, Some((1, 2)));
    }
}
