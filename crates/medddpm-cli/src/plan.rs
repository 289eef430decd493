//! `medddpm plan`, and the memory check `train`, `sample` and `bench` run before they start:
//! the estimate of `medddpm-plan` against the device's memory (the host's on the CPU).

use std::path::Path;

use anyhow::bail;
use clap::Args;
use medddpm_backend::{default_precision, BackendKind, ComputeSettings, Precision};
use medddpm_plan::{
    cheapest_fit, gib, measured_steps, plan, Allocator, MemoryPlan, RunShape, Work,
};
use medddpm_train::{ExperimentConfig, RunDir};

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// A built-in experiment (quickstart, whole-head-128, brats-192), an experiment TOML file,
    /// or a run folder (its config.toml).
    experiment: String,
    /// The device to plan for: cuda:N, wgpu or cpu (default: the one `--backend auto` picks,
    /// device 0).
    #[arg(long)]
    device: Option<String>,
    /// Precision to plan for (default: the experiment's `[compute]`, else the device's).
    #[arg(long)]
    precision: Option<Precision>,
    /// Examples per micro-batch, instead of the experiment's `batch_size`.
    #[arg(long)]
    batch_size: Option<usize>,
    /// Print the plan as JSON.
    #[arg(long)]
    json: bool,
}

/// Where a run would land and what it has room for.
pub struct Target {
    pub backend: BackendKind,
    pub allocator: Allocator,
    /// Bytes the run may use, where known.
    pub capacity: Option<u64>,
    /// The device as a sentence names it.
    pub name: String,
    /// The GPU's name as the driver reports it (for measured step times).
    pub gpu: Option<String>,
}

/// The device `backend` (resolved) and `device` index name.
pub fn target(backend: BackendKind, device: usize) -> Target {
    match backend.resolve() {
        BackendKind::Cuda => {
            let info = gpu_info(device);
            Target {
                backend: BackendKind::Cuda,
                allocator: Allocator::Cuda,
                capacity: info.as_ref().map(|(_, total)| *total),
                name: match &info {
                    Some((gpu, total)) => format!("cuda:{device} ({gpu}, {})", gib(*total)),
                    None => format!("cuda:{device} (its memory could not be read)"),
                },
                gpu: info.map(|(gpu, _)| gpu),
            }
        }
        BackendKind::Wgpu => Target {
            backend: BackendKind::Wgpu,
            allocator: Allocator::Wgpu,
            capacity: None,
            name: "the wgpu adapter (its memory is not known to the plan)".into(),
            gpu: None,
        },
        _ => {
            let available = medddpm_nifti::available_memory();
            Target {
                backend: BackendKind::Cpu,
                allocator: Allocator::Host,
                capacity: available,
                name: match available {
                    Some(bytes) => format!("the CPU ({} available)", gib(bytes)),
                    None => "the CPU (available memory unknown)".into(),
                },
                gpu: None,
            }
        }
    }
}

#[cfg(feature = "cuda")]
fn gpu_info(device: usize) -> Option<(String, u64)> {
    medddpm_kernels::cudnn::gpu_memory(device)
}

#[cfg(not(feature = "cuda"))]
fn gpu_info(_device: usize) -> Option<(String, u64)> {
    None
}

/// The precision a run gets: asked for, else the backend's default.
pub fn precision_of(settings: &ComputeSettings) -> Precision {
    settings
        .precision
        .unwrap_or_else(|| default_precision(settings.backend))
}

fn is_half(precision: Precision) -> bool {
    matches!(precision, Precision::Bf16 | Precision::F16)
}

/// One micro-batch of `config`'s training in `precision`.
pub fn training_shape(config: &ExperimentConfig, precision: Precision) -> RunShape {
    let [i, j, k] = config.data.grid;
    RunShape {
        model: config.model.clone(),
        grid: [k, j, i],
        batch: config.train.batch_size,
        half: is_half(precision),
        checkpointing: config.train.activation_checkpointing,
        strict_fp32: precision == Precision::Fp32,
    }
}

/// What the plan says against a run on the device it would start on: a sentence with the
/// estimate, the device's memory and the cheapest change that fits, when it does not fit;
/// `None` when it fits or the device's memory is unknown (wgpu).
pub fn shortfall(what: &str, shape: &RunShape, work: Work, target: &Target) -> Option<String> {
    let capacity = target.capacity?;
    let needed = plan(shape, work, target.allocator);
    let tuning = needed.total() as f64 * medddpm_plan::FIRST_RUN_FACTOR;
    if target.allocator != Allocator::Host && needed.total() <= capacity && tuning > capacity as f64
    {
        eprintln!(
            "note: {what} needs about {} on {}; while kernels are first tuned for these shapes it may need up to {} (more than its {})",
            gib(needed.total()),
            target.name,
            gib(tuning as u64),
            gib(capacity)
        );
    }
    (needed.total() > capacity).then(|| {
        format!(
            "{what} needs about {} on {}, more than its {}: {}; `medddpm plan` shows the parts",
            gib(needed.total()),
            target.name,
            gib(capacity),
            remedy(shape, work, target, capacity),
        )
    })
}

/// Refuses a run the plan says cannot fit on the device it would start on, before anything
/// is allocated there; with `anyway` (`--no-memory-check`) warns instead.
pub fn check_fits(
    what: &str,
    shape: &RunShape,
    work: Work,
    settings: &ComputeSettings,
    anyway: bool,
) -> anyhow::Result<()> {
    match shortfall(
        what,
        shape,
        work,
        &target(settings.backend, settings.devices[0]),
    ) {
        None => Ok(()),
        Some(message) if anyway => {
            eprintln!("warning: {message} (starting anyway: --no-memory-check)");
            Ok(())
        }
        Some(message) => bail!("{message}; --no-memory-check starts anyway"),
    }
}

/// The cheapest change that fits, as a sentence.
fn remedy(shape: &RunShape, work: Work, target: &Target, capacity: u64) -> String {
    let half_allowed = target.backend != BackendKind::Cpu;
    match cheapest_fit(shape, work, target.allocator, capacity, half_allowed) {
        Some(s) => format!(
            "the cheapest change that fits is {} (about {})",
            s.change,
            gib(s.plan.total())
        ),
        None => {
            "no precision, checkpointing or batch size fits: the grid or the model must be smaller"
                .into()
        }
    }
}

/// The experiment `name` names: built in, a file, or a run folder's config.toml.
fn load(name: &str) -> anyhow::Result<(String, ExperimentConfig)> {
    let dir = Path::new(name);
    if dir.is_dir() {
        let path = RunDir::new(dir).config_path();
        if !path.is_file() {
            bail!("{name} is a folder without a config.toml: give an experiment or a run folder");
        }
        return Ok((name.to_string(), ExperimentConfig::from_file(&path)?));
    }
    crate::experiments::load(name)
}

/// `--device`: cuda:N, wgpu or cpu.
fn parse_device(text: &str) -> anyhow::Result<(BackendKind, usize)> {
    let (kind, index) = match text.split_once(':') {
        Some((kind, index)) => (kind, index.parse::<usize>().ok()),
        None => (text, Some(0)),
    };
    let backend: BackendKind = kind.parse()?;
    let Some(index) = index else {
        bail!("--device {text}: give cuda:N with N a GPU index, wgpu or cpu");
    };
    Ok((backend, index))
}

pub fn run(args: PlanArgs) -> anyhow::Result<()> {
    let (name, mut config) = load(&args.experiment)?;
    config.validate()?;
    if let Some(batch) = args.batch_size {
        config.train.batch_size = batch;
    }
    let (backend, device) = match &args.device {
        Some(text) => parse_device(text)?,
        None => (BackendKind::Auto, 0),
    };
    let target = target(backend, device);
    let precision = args
        .precision
        .or(config.compute.precision)
        .unwrap_or_else(|| default_precision(target.backend));
    let shape = training_shape(&config, precision);
    let training = plan(&shape, Work::Training { ema: true }, target.allocator);
    let sampling = plan(
        &RunShape {
            batch: 1,
            ..shape.clone()
        },
        Work::Sampling,
        target.allocator,
    );
    if args.json {
        let json = serde_json::json!({
            "experiment": name,
            "device": target.name,
            "capacity_bytes": target.capacity,
            "precision": precision.to_string(),
            "grid": shape.grid,
            "batch_size": shape.batch,
            "activation_checkpointing": shape.checkpointing.name(),
            "training": training,
            "training_bytes": training.total(),
            "sampling": sampling,
            "sampling_bytes": sampling.total(),
        });
        println!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(());
    }
    let plans = Plans {
        training: &training,
        sampling: &sampling,
    };
    print_plan(&name, &config, (&target, precision, &shape), plans);
    Ok(())
}

/// The plan's two estimates.
struct Plans<'a> {
    training: &'a MemoryPlan,
    sampling: &'a MemoryPlan,
}

/// The plan as text: the run, the parts, measured step times, whether it fits.
fn print_plan(
    name: &str,
    config: &ExperimentConfig,
    (target, precision, shape): (&Target, Precision, &RunShape),
    Plans { training, sampling }: Plans<'_>,
) {
    println!(
        "memory plan of {name} on {}, {precision}: {} parameters; grid {}x{}x{}; micro-batch {} (grad_accum {}); activation checkpointing {}",
        target.name,
        training.parameters,
        shape.grid[0],
        shape.grid[1],
        shape.grid[2],
        shape.batch,
        config.train.grad_accum,
        config.train.activation_checkpointing,
    );
    print_parts("training", training);
    print_parts("sampling (one volume)", sampling);
    if let Some(gpu) = &target.gpu {
        match measured_steps(shape, &precision.to_string(), gpu) {
            Some(m) => println!(
                "measured on {}: training micro-step {} ms{}, sampling step {} ms ({})",
                m.gpu,
                m.micro_step_ms,
                m.optimizer_step_ms
                    .map(|ms| format!(", `medddpm train` optimizer step {ms} ms"))
                    .unwrap_or_default(),
                m.sampling_step_ms,
                m.source
            ),
            None => {
                println!("no step time measured for this GPU and run: `medddpm bench` measures one")
            }
        }
    }
    match target.capacity {
        Some(capacity) if training.total() <= capacity => println!(
            "fits: training uses about {:.0} % of {}{}",
            100.0 * training.total() as f64 / capacity as f64,
            gib(capacity),
            if target.allocator == Allocator::Host {
                String::new()
            } else {
                format!(
                    " (the first steps of shapes not yet tuned on this GPU took up to {:.0} % more)",
                    100.0 * (medddpm_plan::FIRST_RUN_FACTOR - 1.0)
                )
            }
        ),
        Some(capacity) => println!(
            "does not fit in {}: {}",
            gib(capacity),
            remedy(shape, Work::Training { ema: true }, target, capacity)
        ),
        None => println!("not checked against the device: its memory is not known"),
    }
}

fn print_parts(title: &str, plan: &MemoryPlan) {
    println!("{title}: {}", gib(plan.total()));
    for part in &plan.parts {
        println!("  {:<44} {:>12}", part.name, gib(part.bytes));
    }
}
