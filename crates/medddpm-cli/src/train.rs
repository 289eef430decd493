//! `medddpm train`.

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Args;
use medddpm_backend::KernelAutodiffBackend;
use medddpm_backend::Launch;
use medddpm_train::{
    train_cluster_lead, train_on, train_processes, ClusterPlace, ExperimentConfig, RunDir,
    SessionOptions, TrainSummary,
};

use crate::compute_args::ComputeArgs;
use crate::progress::TrainBar;
use medddpm_backend::{run_on, BackendTask, RunEnv};

#[derive(Debug, Args)]
pub struct TrainArgs {
    /// A built-in experiment (quickstart, whole-head-128, brats-192) or an experiment TOML file.
    #[arg(long, default_value = "quickstart", conflicts_with = "resume")]
    experiment: String,
    /// Run folder (checkpoints, metrics, samples). Default: runs/<experiment>.
    #[arg(long, conflicts_with = "resume")]
    run_dir: Option<PathBuf>,
    /// Continue the run in this folder from its latest checkpoint, with its saved config.
    #[arg(long)]
    resume: Option<PathBuf>,
    /// Override train.steps (total optimizer steps of the run).
    #[arg(long)]
    steps: Option<usize>,
    /// Stop after this many optimizer steps of this session (a checkpoint is written).
    #[arg(long)]
    max_steps: Option<usize>,
    /// Override train.save_every.
    #[arg(long)]
    save_every: Option<usize>,
    /// Override train.lr.
    #[arg(long)]
    lr: Option<f64>,
    /// Override train.seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Trace the GPU's work over this many optimizer steps (after the first five) and report
    /// its busy time beside the steps' wall time, by operation class (CUDA only; needs
    /// libcupti.so on the library path or named by MEDDDPM_CUPTI; writes gpu-trace.json).
    #[arg(long, value_name = "STEPS")]
    gpu_trace: Option<usize>,
    /// Replay each micro-step from a CUDA graph after two warm-up steps (CUDA, one device,
    /// no activation checkpointing; the same losses and weights bit for bit). Off by default:
    /// on one H200 (whole-head, 128^3, bf16, two runs) a replayed optimizer step took 119.1 ms
    /// against 118.6 ms as it comes, and 406 MiB more GPU memory for the graph's own buffers
    /// (docs/benchmarks).
    #[arg(long)]
    cuda_graphs: bool,
    /// Start even when the memory plan says the run does not fit the device.
    #[arg(long)]
    no_memory_check: bool,
    /// The port rank 0 listens on in a run that Slurm's `srun` started (torchrun names its
    /// own, MASTER_PORT); see docs/distributed.md.
    #[arg(long, default_value_t = medddpm_train::cluster::DEFAULT_RENDEZVOUS_PORT)]
    rdzv_port: u16,
    /// A run across machines launched by hand: the number of machines. Give every machine the
    /// same command with its own --node-rank; each starts one rank per device of --devices (the
    /// same count on every machine) and needs MEDDDPM_RDZV_TOKEN (docs/distributed.md).
    #[arg(long, value_name = "N")]
    nnodes: Option<usize>,
    /// With --nnodes: this machine's place, 0 (the machine of rank 0) to N-1.
    #[arg(long, value_name = "R")]
    node_rank: Option<usize>,
    /// With --nnodes: where rank 0 listens, on the machine of --node-rank 0, e.g. node01:29500.
    #[arg(long, value_name = "HOST:PORT")]
    rdzv: Option<String>,
    /// Set by --nnodes on the ranks it starts: the launcher's variables are that launch's.
    #[arg(long, hide = true)]
    manual_rank: bool,
    #[command(flatten)]
    compute: ComputeArgs,
}

struct TrainTask {
    config: ExperimentConfig,
    run: RunDir,
    resume: bool,
    max_steps: Option<usize>,
    /// `--tune-cache`, handed on to replica processes.
    tune_cache: Option<PathBuf>,
    /// `--gpu-trace`: optimizer steps to trace.
    gpu_trace: Option<usize>,
    cuda_graphs: bool,
    /// Rank 0 of a run a cluster launcher started, with the run's token.
    cluster: Option<(ClusterPlace, String)>,
}

impl BackendTask for TrainTask {
    type Output = ();
    type Error = anyhow::Error;
    fn run<B: KernelAutodiffBackend>(self, device: B::Device, env: &RunEnv) -> anyhow::Result<()> {
        eprintln!(
            "training on the {} backend ({}, {}){}, run folder {}",
            env.backend,
            env.precision,
            env.layout,
            match env.devices.as_slice() {
                [_] => String::new(),
                many => format!(", devices {many:?}"),
            },
            self.run.root.display()
        );
        let t = &self.config.train;
        crate::oom::describe(format!(
            "training {:?} volumes (batch {}, grad_accum {}, model_channels {}) in {} {} on {}",
            self.config.data.grid,
            t.batch_size,
            t.grad_accum,
            self.config.model.model_channels,
            env.precision,
            env.layout,
            env.backend
        ));
        let options = SessionOptions {
            resume: self.resume,
            max_steps: self.max_steps,
            compute: env.compute(),
            collective: env.collective,
            cuda_graphs: self.cuda_graphs,
        };
        // The other devices of the run, on the backend of the first.
        let devices = env.devices_like(&device);
        // SIGINT / SIGTERM stop the run cleanly at a step boundary (see `signals`).
        crate::signals::catch_stop_signals();
        let mut bar = TrainBar::new();
        let mut traced;
        let observer: &mut dyn medddpm_train::TrainObserver = match self.gpu_trace {
            Some(steps) => {
                traced = crate::gpu_trace::TracingObserver::new(&mut bar, steps, &self.run.root);
                &mut traced
            }
            None => &mut bar,
        };
        let summary = match (&self.cluster, env.launch) {
            (Some((place, token)), _) => {
                observer.message(&crate::cluster::describe(place, env.devices[0]));
                train_cluster_lead::<B>(
                    &self.config,
                    &self.run,
                    &options,
                    (place, token),
                    &devices[0],
                    observer,
                )?
            }
            (None, Launch::Processes) => train_processes::<B>(
                &self.config,
                &self.run,
                &options,
                (&env.devices, &devices[0]),
                &crate::replica::SelfLauncher::new(env, self.tune_cache.clone()),
                observer,
            )?,
            _ => train_on::<B>(&self.config, &self.run, &options, &devices, observer)?,
        };
        drop(bar);
        // The session's samples before its summary, which ends the output.
        for s in &summary.samples {
            eprintln!("sample written: {}", s.display());
        }
        eprintln!("{}", summary_line(&summary, self.config.train.steps));
        match crate::signals::received() {
            Some(signal) => Err(crate::signals::StoppedBySignal(signal).into()),
            None => Ok(()),
        }
    }
}

/// The run folder, the experiment with the command line's overrides, and whether it resumes.
fn load(args: &TrainArgs) -> anyhow::Result<(RunDir, ExperimentConfig, bool)> {
    let (run, mut config, resume) = match &args.resume {
        Some(dir) => {
            let run = RunDir::new(dir);
            let path = run.config_path();
            if !path.is_file() {
                bail!(
                    "{} is not a run folder: it has no config.toml",
                    dir.display()
                );
            }
            let config = ExperimentConfig::from_file(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            (run, config, true)
        }
        None => {
            let (name, config) = crate::experiments::load(&args.experiment)?;
            let dir = args
                .run_dir
                .clone()
                .unwrap_or_else(|| PathBuf::from("runs").join(&name));
            (RunDir::new(dir), config, false)
        }
    };
    if let Some(steps) = args.steps {
        config.train.steps = steps;
    }
    if let Some(n) = args.save_every {
        config.train.save_every = n;
    }
    if let Some(lr) = args.lr {
        config.train.lr = lr;
    }
    if let Some(seed) = args.seed {
        config.train.seed = seed;
    }
    for warning in config.model.unmatched_attention() {
        eprintln!("warning: [model] {warning}");
    }
    config.validate()?;
    Ok((run, config, resume))
}

pub fn run(args: TrainArgs) -> anyhow::Result<()> {
    let env = |name: &str| std::env::var(name).ok();
    let rdzv = args.rdzv.as_deref();
    let manual = crate::nodes::ManualLaunch::from_flags(args.nnodes, args.node_rank, rdzv, &env)?;
    let (run, config, resume) = load(&args)?;
    let mut settings = args.compute.settings_with(&config.compute);
    if let Some(launch) = manual {
        return crate::nodes::run(&launch, &settings.devices);
    }
    let cluster = match crate::cluster::place(args.rdzv_port)? {
        Some(mut place) => {
            if args.manual_rank {
                place.launcher = medddpm_train::Launcher::Manual;
            }
            let token = crate::cluster::token(&place)?;
            let listed =
                args.compute.placement.devices.is_some() || config.compute.devices.is_some();
            settings = crate::cluster::settings_for(&place, settings, listed)?;
            if place.rank > 0 {
                // Rank 0 decides when the run stops (a scheduler signals every rank).
                crate::signals::ignore_stop_signals();
                return run_on(&settings, crate::cluster::RankTask { place, token });
            }
            Some((place, token))
        }
        None => None,
    };
    let shape = crate::plan::training_shape(&config, crate::plan::precision_of(&settings));
    let work = medddpm_plan::Work::Training { ema: true };
    crate::plan::check_fits("training", &shape, work, &settings, args.no_memory_check)?;
    run_on(
        &settings,
        TrainTask {
            config,
            run,
            resume,
            max_steps: args.max_steps,
            tune_cache: args.compute.tune_cache.clone(),
            gpu_trace: args.gpu_trace,
            cuda_graphs: args.cuda_graphs,
            cluster,
        },
    )
}

/// The session's last line: the steps trained and the loss's first and last means, or, when
/// the run had already reached its end, that (a session of no steps has no loss to show).
fn summary_line(summary: &TrainSummary, steps: usize) -> String {
    if summary.end_step == summary.start_step {
        return format!(
            "nothing to train: the run is already at step {} of train.steps = {steps} (give a larger --steps to train on); checkpoint {}",
            summary.end_step,
            summary.checkpoint.display()
        );
    }
    format!(
        "trained steps {}..{}: loss {:.4} -> {:.4} (mean of the first and last {} steps); checkpoint {}",
        summary.start_step,
        summary.end_step,
        summary.first_mean_loss,
        summary.last_mean_loss,
        summary.loss_window,
        summary.checkpoint.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(start_step: usize, end_step: usize, loss: f32) -> TrainSummary {
        TrainSummary {
            start_step,
            end_step,
            first_loss: loss,
            last_loss: loss,
            first_mean_loss: loss,
            last_mean_loss: loss,
            loss_window: end_step - start_step,
            checkpoint: PathBuf::from("runs/q/checkpoints/step-40"),
            samples: Vec::new(),
        }
    }

    /// A run resumed at its end trains nothing: said so, without a NaN loss.
    #[test]
    fn a_session_of_no_steps_says_so_without_a_nan_loss() {
        let done = summary_line(&summary(40, 40, f32::NAN), 40);
        assert!(
            !done.contains("NaN") && done.contains("already at step 40 of train.steps = 40"),
            "{done}"
        );
        let trained = summary_line(&summary(0, 40, 0.5), 40);
        assert!(
            trained.starts_with("trained steps 0..40: loss 0.5000 -> 0.5000"),
            "{trained}"
        );
    }
}
