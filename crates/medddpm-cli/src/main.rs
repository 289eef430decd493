//! `medddpm`: train Med-DDPM models, sample synthetic MRI from masks, inspect files.

mod bench_args;
mod check_kernels;
mod cluster;
mod compute_args;
mod eval;
mod experiments;
mod gpu_trace;
mod inspect;
mod nodes;
mod notes;
mod oom;
mod plan;
mod prepare;
mod progress;
mod render;
mod replica;
mod sample;
mod signals;
mod synthesize;
mod train;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Mask-conditioned 3D diffusion models of brain MRI (Med-DDPM), on CPU, CUDA or wgpu.
#[derive(Debug, Parser)]
#[command(name = "medddpm", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Train a model (or resume a run).
    Train(train::TrainArgs),
    /// Sample synthetic volumes from masks.
    // One device: the data-parallel training switches stay out of its help.
    #[command(mut_arg("collective", |a| a.hide(true)), mut_arg("launch", |a| a.hide(true)))]
    Sample(sample::SampleArgs),
    /// Make a synthetic data set: N image/label pairs from a folder of masks (DPM-Solver++ 25
    /// steps by default), resumable (manifest.jsonl), in our layout or nnU-Net v2's, one
    /// process per device with --devices.
    #[command(mut_arg("collective", |a| a.hide(true)))]
    Synthesize(synthesize::SynthesizeArgs),
    /// Judge generated volumes against real ones: PSNR, SSIM and MAE inside the mask,
    /// diversity (MS-SSIM among samples of one mask), MMD between the sets, and mask adherence.
    Eval(eval::EvalArgs),
    /// Draw volumes as a three-plane PNG montage (mask outlined) and a slice-sweep GIF.
    Render(render::RenderArgs),
    /// Print a NIfTI header, a resolved experiment config, or a checkpoint summary.
    Inspect(inspect::InspectArgs),
    /// The memory an experiment needs to train and to sample (parameters, Adam state, EMA,
    /// activations, pools), against the device's, with the cheapest change that fits.
    Plan(plan::PlanArgs),
    /// Turn raw scans into the folders `train` reads: BraTS preprocessing, whole-head
    /// resampling, head/brain masks from a T1, a labelled real-MRI demo set.
    Prepare(prepare::PrepareArgs),
    /// Benchmark training and sampling steps over backend x precision x layout.
    Bench(bench_args::BenchArgs),
    /// Check that every backend, precision and layout gives the float64 CPU reference's output
    /// within the precision's tolerance (same weights, same input).
    Check(bench_args::CheckArgs),
    /// Compare the convolution engine (cuDNN or burn's kernels) and the GroupNorm, upsampling
    /// and Adam kernels with burn's plain ops on the U-Net's geometries and odd ones: forward
    /// and gradients, both layouts.
    CheckKernels(check_kernels::CheckKernelsArgs),
    /// One replica of a multi-device run, started by `train --launch processes`.
    #[command(hide = true)]
    Replica(replica::ReplicaArgs),
}

fn self_command(sub: &str) -> anyhow::Result<Vec<String>> {
    let exe = std::env::current_exe()?;
    Ok(vec![exe.to_string_lossy().into_owned(), sub.to_string()])
}

/// `medddpm bench` (and `check`, whose options are a bench run's) with these options.
fn bench(options: medddpm_bench::BenchOptions) -> anyhow::Result<()> {
    let Some(report) = medddpm_bench::run_bench(options, self_command("bench")?)? else {
        return Ok(());
    };
    println!("{}", report.markdown);
    eprintln!(
        "wrote {}/results.{{jsonl,csv,md,png}}",
        report.out.display()
    );
    Ok(report.into_result()?)
}

/// `medddpm bench --devices`: data-parallel throughput on 1..N devices, each count in a
/// process of its own (this command again, with `--scaling-count`).
fn bench_devices(scaling: bench_args::Scaling) -> anyhow::Result<()> {
    let bench_args::Scaling {
        settings,
        options,
        count,
    } = scaling;
    if count.is_some() {
        let tune_cache = settings.tune_cache.clone();
        let launcher: medddpm_bench::LauncherFor =
            Box::new(move |env| Box::new(replica::SelfLauncher::new(env, tune_cache.clone())));
        medddpm_backend::run_on(&settings, medddpm_bench::ScalingTask(options, launcher))?;
        return Ok(());
    }
    // This very command line, from the same executable.
    let mut command = vec![std::env::current_exe()?.to_string_lossy().into_owned()];
    command.extend(std::env::args().skip(1));
    let run = medddpm_bench::run_scaling(&options, settings.devices.len(), &command)?;
    println!("devices  step ms  samples/s  efficiency");
    for r in &run.records {
        println!(
            "{:>7}  {:>7.1}  {:>9.2}  {:>10.3}",
            r.devices, r.step_ms_median, r.samples_per_s, r.efficiency
        );
    }
    println!(
        "appended to {}",
        options.out.join("scaling.jsonl").display()
    );
    if !run.failed.is_empty() {
        anyhow::bail!(
            "the measurement on {:?} device(s) failed (see above)",
            run.failed
        );
    }
    Ok(())
}

/// The bench's parent refuses a configuration of its matrix that cannot fit before starting
/// any (its children, each one configuration, are not checked again).
fn bench_fits(options: &medddpm_bench::BenchOptions, anyway: bool) -> anyhow::Result<()> {
    if options.single_config.is_some() || options.report_only {
        return Ok(());
    }
    let workload = &options.workload;
    let [d, h, w] = workload.size;
    for &backend in &options.backends {
        for &precision in &options.precisions {
            let settings = medddpm_backend::ComputeSettings {
                backend,
                precision: Some(precision),
                ..Default::default()
            };
            let shape = medddpm_plan::RunShape {
                model: workload.model.config(),
                grid: [d, h, w],
                batch: workload.batch,
                half: matches!(
                    precision,
                    medddpm_backend::Precision::Bf16 | medddpm_backend::Precision::F16
                ),
                checkpointing: workload.activation_checkpointing,
                strict_fp32: precision == medddpm_backend::Precision::Fp32,
            };
            let what = format!("the {backend} {precision} configuration");
            let work = medddpm_plan::Work::Training { ema: false };
            plan::check_fits(&what, &shape, work, &settings, anyway)?;
        }
    }
    Ok(())
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Train(args) => train::run(args),
        Command::Sample(args) => sample::run(args),
        Command::Synthesize(args) => synthesize::run(args),
        Command::Eval(args) => eval::run(args),
        Command::Render(args) => render::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Plan(args) => plan::run(args),
        Command::Prepare(args) => prepare::run(args),
        Command::Bench(args) => match args.scaling() {
            Some(scaling) => bench_devices(scaling.map_err(anyhow::Error::msg)?),
            None => {
                let anyway = args.no_memory_check;
                let options = args.into_options();
                bench_fits(&options, anyway)?;
                bench(options)
            }
        },
        Command::Check(args) => bench(args.into_options()),
        Command::CheckKernels(args) => check_kernels::run(args),
        Command::Replica(args) => replica::run(args),
    }
}

/// Rust ignores SIGPIPE, so printing into a closed pipe (`medddpm inspect FILE | head`) panics
/// with a backtrace; with the default action the process ends quietly, as `cat` does.
fn end_quietly_on_closed_pipe() {
    #[cfg(unix)]
    // SAFETY: sets a signal's disposition to its default before any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// An error and its causes on one line, as anyhow's `{:#}` writes them, but without a cause
/// its error already states (the libraries' errors say "path: cause" and also keep the cause
/// as their source, so a full disk read "No space left on device" twice).
fn error_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    let full = e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::StorageFull)
    });
    if full {
        line.push_str(" (the disk is full: free space there, or keep fewer checkpoints with [train] keep_checkpoints; the checkpoints already written are intact)");
    }
    line
}

fn main() -> ExitCode {
    end_quietly_on_closed_pipe();
    notes::install();
    oom::install_hook();
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_line(&e));
            // Stopped by a signal: the status a shell gives a process the signal ended.
            match e.downcast_ref::<signals::StoppedBySignal>() {
                Some(s) => ExitCode::from((128 + s.0) as u8),
                None => ExitCode::FAILURE,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// A cause the error's own message already holds is not repeated; others are chained.
    #[test]
    fn an_error_line_states_each_cause_once() {
        let full = std::io::Error::from(std::io::ErrorKind::StorageFull);
        let cause = full.to_string();
        let e = anyhow::Error::new(medddpm_train::TrainError::Io {
            path: "runs/q/checkpoints/.tmp-step-000010/ema.mpk".into(),
            source: full,
        })
        .context("writing the checkpoint of step 10");
        let line = super::error_line(&e);
        assert_eq!(line.matches(&cause).count(), 1, "{line}");
        assert!(line.contains("the disk is full"), "{line}");
        assert!(
            line.starts_with("writing the checkpoint of step 10: runs/q/"),
            "{line}"
        );
    }
}
