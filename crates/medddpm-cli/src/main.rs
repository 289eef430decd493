//! `medddpm`: train Med-DDPM models, sample synthetic MRI from masks, inspect files.

mod check_kernels;
mod eval;
mod experiments;
mod inspect;
mod oom;
mod progress;
mod render;
mod sample;
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
    Sample(sample::SampleArgs),
    /// Judge generated volumes against real ones: PSNR, SSIM and MAE inside the mask,
    /// diversity (MS-SSIM among samples of one mask), MMD between the sets, and mask adherence.
    Eval(eval::EvalArgs),
    /// Draw volumes as a three-plane PNG montage (mask outlined) and a slice-sweep GIF.
    Render(render::RenderArgs),
    /// Print a NIfTI header, a resolved experiment config, or a checkpoint summary.
    Inspect(inspect::InspectArgs),
    /// Benchmark training and sampling steps over backend x precision x layout.
    Bench(medddpm_bench::BenchArgs),
    /// Check that every backend, precision and layout gives the float64 CPU reference's output
    /// within the precision's tolerance (same weights, same input).
    Check(CheckArgs),
    /// Compare the convolution engine (cuDNN or burn's kernels) and the GroupNorm, upsampling
    /// and Adam kernels with burn's plain ops on the U-Net's geometries and odd ones: forward
    /// and gradients, both layouts.
    CheckKernels(check_kernels::CheckKernelsArgs),
}

/// `medddpm check`: the benchmark's agreement probe alone.
#[derive(Debug, clap::Args)]
struct CheckArgs {
    /// Backends to check (default: the CPU and every GPU backend compiled in).
    #[arg(long, value_enum, value_delimiter = ',')]
    backends: Option<Vec<medddpm_backend::BackendKind>>,
    /// Precisions to check.
    #[arg(long, value_delimiter = ',', default_value = "fp32,tf32,bf16")]
    precisions: Vec<medddpm_backend::Precision>,
    /// Layouts to check.
    #[arg(long, value_delimiter = ',', default_value = "ncdhw,ndhwc")]
    layouts: Vec<medddpm_unet::Layout>,
    /// Convolution engine: auto (cuDNN on CUDA when it loads), cudnn or cubecl.
    #[arg(long, default_value = "auto")]
    conv_engine: medddpm_backend::ConvEngine,
    /// Network configuration.
    #[arg(long, value_enum, default_value = "whole-head")]
    model: medddpm_bench::ModelArg,
    /// Probe volume, D,H,W or one number (the float64 CPU reference of a whole-head network
    /// takes minutes at 128^3 on a small machine; it is cached in the tuning-cache folder).
    #[arg(long, default_value = "32", value_parser = medddpm_bench::cli::parse_size)]
    size: [usize; 3],
    /// Folder for the results.
    #[arg(long, default_value = "check-results")]
    out: std::path::PathBuf,
    /// Kernel-tuning cache root.
    #[arg(long)]
    tune_cache: Option<std::path::PathBuf>,
    /// Do not locate the first deviating operation of a configuration that disagrees (locating
    /// costs one more float64 pass on the CPU, cached).
    #[arg(long)]
    no_locate: bool,
}

fn self_command(sub: &str) -> anyhow::Result<Vec<String>> {
    let exe = std::env::current_exe()?;
    Ok(vec![exe.to_string_lossy().into_owned(), sub.to_string()])
}

fn check(args: CheckArgs) -> anyhow::Result<()> {
    use medddpm_backend::BackendKind;
    let backends = args.backends.unwrap_or_else(|| {
        [BackendKind::Cpu, BackendKind::Cuda, BackendKind::Wgpu]
            .into_iter()
            .filter(|b| b.compiled_in())
            .collect()
    });
    let bench = medddpm_bench::BenchArgs {
        backends,
        precisions: args.precisions,
        layouts: args.layouts,
        conv_engine: args.conv_engine,
        norm_engine: Default::default(),
        model: args.model,
        size: args.size,
        batch: 1,
        warmup: 0,
        steps: 1,
        no_breakdown: true,
        out: args.out,
        title: None,
        pytorch_reference: None,
        timeout: 1800,
        tune_cache: args.tune_cache,
        seed: 0,
        report_only: false,
        check_only: true,
        locate: !args.no_locate,
        host_profile: false,
        single_config: None,
        single_out: None,
    };
    medddpm_bench::run_bench(bench, self_command("bench")?)
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Train(args) => train::run(args),
        Command::Sample(args) => sample::run(args),
        Command::Eval(args) => eval::run(args),
        Command::Render(args) => render::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Bench(args) => medddpm_bench::run_bench(args, self_command("bench")?),
        Command::Check(args) => check(args),
        Command::CheckKernels(args) => check_kernels::run(args),
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

fn main() -> ExitCode {
    end_quietly_on_closed_pipe();
    oom::install_hook();
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
