//! `medddpm-bench`: times the Med-DDPM U-Net's forward and training micro-step on a backend and
//! writes the numbers as JSON.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, ValueEnum};
use medddpm_bench::{step_bench, StepBenchConfig, StepBenchResult};
use medddpm_unet::UNetConfig;

#[derive(Debug, Clone, Copy, ValueEnum)]
enum BackendArg {
    /// burn's CUDA backend (needs the `cuda` feature).
    Cuda,
    /// burn's wgpu backend (needs the `wgpu` feature).
    Wgpu,
    /// burn's Flex CPU backend.
    Cpu,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ModelArg {
    /// The released whole-head model (C = 64, 40.2 M parameters).
    WholeHead,
    /// The released BraTS model (C = 64, 57.6 M parameters).
    Brats,
    /// Whole-head shape with C = 32 (the golden fixture's width).
    WholeHeadC32,
}

/// Times one forward and one training micro-step of the Med-DDPM U-Net.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Backend to run on.
    #[arg(long, value_enum, default_value = "cpu")]
    backend: BackendArg,
    /// Network configuration.
    #[arg(long, value_enum, default_value = "whole-head")]
    model: ModelArg,
    /// Volume size as D,H,W (or one number for a cube); every size a multiple of 16.
    #[arg(long, default_value = "128", value_parser = parse_size)]
    size: [usize; 3],
    /// Batch size.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Untimed steps after the first.
    #[arg(long, default_value_t = 2)]
    warmup: usize,
    /// Timed steps (the median is reported).
    #[arg(long, default_value_t = 5)]
    steps: usize,
    /// Write the result as JSON here.
    #[arg(long)]
    out: Option<PathBuf>,
}

fn parse_size(s: &str) -> Result<[usize; 3], String> {
    let parts: Result<Vec<usize>, _> = s
        .split([',', 'x'])
        .map(|p| p.trim().parse::<usize>())
        .collect();
    match parts.map_err(|e| format!("'{s}': {e}"))?.as_slice() {
        [n] => Ok([*n; 3]),
        [d, h, w] => Ok([*d, *h, *w]),
        _ => Err(format!("'{s}': give one size or three (D,H,W)")),
    }
}

fn run(args: Args) -> anyhow::Result<StepBenchResult> {
    let unet = match args.model {
        ModelArg::WholeHead => UNetConfig::whole_head(),
        ModelArg::Brats => UNetConfig::brats(),
        ModelArg::WholeHeadC32 => UNetConfig {
            model_channels: 32,
            ..UNetConfig::whole_head()
        },
    };
    let config = StepBenchConfig {
        unet,
        size: args.size,
        batch: args.batch,
        warmup: args.warmup,
        steps: args.steps,
        lr: 1e-5,
    };
    let progress = |p: &str| eprintln!("[medddpm-bench] {p}");
    match args.backend {
        BackendArg::Cpu => step_bench::<burn::backend::Autodiff<burn::backend::Flex>>(
            "cpu",
            &Default::default(),
            &config,
            progress,
        ),
        #[cfg(feature = "cuda")]
        BackendArg::Cuda => {
            let device = burn::backend::cuda::CudaDevice::default();
            step_bench::<burn::backend::Autodiff<burn::backend::Cuda>>(
                "cuda", &device, &config, progress,
            )
        }
        #[cfg(feature = "wgpu")]
        BackendArg::Wgpu => {
            let device = burn::backend::wgpu::WgpuDevice::default();
            step_bench::<burn::backend::Autodiff<burn::backend::Wgpu>>(
                "wgpu", &device, &config, progress,
            )
        }
        #[allow(unreachable_patterns)]
        other => anyhow::bail!(
            "backend {other:?} is not compiled into this binary: rebuild with --features {}",
            format!("{other:?}").to_lowercase()
        ),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let out = args.out.clone();
    let result = run(args).and_then(|r| {
        println!("{}", serde_json::to_string_pretty(&r)?);
        if let Some(path) = &out {
            let tmp = path.with_extension("json.tmp");
            std::fs::write(&tmp, serde_json::to_string_pretty(&r)?)
                .with_context(|| format!("writing {}", tmp.display()))?;
            std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(r)
    });
    match result {
        Ok(r) => {
            eprintln!(
                "[medddpm-bench] {} {:?}: forward {:.1} ms (first {:.1} s), train micro-step {:.1} ms (first {:.1} s)",
                r.backend, r.config.size, r.forward_median_ms, r.first_forward_s, r.train_step_median_ms, r.first_train_step_s
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
