//! `medddpm check-kernels`: the backend's convolution engine against the plain-op reference
//! twin (burn's convolution in f32 on the CPU, on the same rounded operands) on the U-Net's geometries and odd ones, forward and
//! both gradients, per precision and layout.

use std::path::PathBuf;

use anyhow::{bail, Context};
use medddpm_backend::{
    run_on, BackendKind, BackendTask, ComputeSettings, ConvEngine, KernelAutodiffBackend, Layout,
    Precision, RunEnv,
};
use medddpm_kernels::conv::{engine_vs_reference, ConvCase};
use serde::Serialize;

#[derive(Debug, clap::Args)]
pub struct CheckKernelsArgs {
    /// Backend to check.
    #[arg(long, value_enum, default_value = "auto")]
    backend: BackendKind,
    /// Precision (one per process: the GPU backends' precision switch is process-wide).
    #[arg(long)]
    precision: Option<Precision>,
    /// Convolution engine under test.
    #[arg(long, default_value = "auto")]
    conv_engine: ConvEngine,
    /// Spatial scale of the test volumes (1: 2^3 to 8^3 voxels).
    #[arg(long, default_value_t = 2)]
    scale: usize,
    /// Kernel-tuning cache root.
    #[arg(long)]
    tune_cache: Option<PathBuf>,
    /// Write the results as JSON here.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// One case's result.
#[derive(Debug, Serialize)]
struct Row {
    case: ConvCase,
    layout: String,
    forward: f64,
    data_grad: f64,
    weight_grad: f64,
    tolerance: f64,
    pass: bool,
}

#[derive(Debug, Serialize)]
struct Report {
    backend: String,
    precision: String,
    conv_engine: String,
    rows: Vec<Row>,
}

struct Task {
    scale: usize,
}

/// How far the engine may be from the f32 CPU convolution of the same (rounded) operands: f32
/// summation order; TF32's 10-bit operand mantissa; bf16 outputs (8-bit mantissa, f32 sums).
fn tolerance(precision: Precision) -> f64 {
    match precision {
        Precision::Fp32 => 1e-5,
        Precision::Tf32 => 5e-3,
        Precision::Bf16 => 1e-2,
    }
}

impl BackendTask for Task {
    type Output = Report;
    fn run<B: KernelAutodiffBackend>(
        self,
        device: B::Device,
        env: &RunEnv,
    ) -> anyhow::Result<Report> {
        let mut rows = Vec::new();
        let tol = tolerance(env.precision);
        for layout in Layout::ALL {
            let compute = medddpm_kernels::Compute {
                layout,
                ..env.compute()
            };
            for (i, case) in ConvCase::standard(self.scale).into_iter().enumerate() {
                let [f, d, w] =
                    engine_vs_reference::<B::InnerBackend>(&device, case, compute, i as u64);
                let pass = [f, d, w].iter().all(|e| e.is_finite() && *e <= tol);
                eprintln!(
                    "{layout} {:>3}->{:<3} k{} s{} {:?} b{}: forward {f:.2e}, data grad {d:.2e}, weight grad {w:.2e} {}",
                    case.c_in,
                    case.c_out,
                    case.kernel,
                    case.stride,
                    case.size,
                    case.batch,
                    if pass { "ok" } else { "OUTSIDE TOLERANCE" }
                );
                rows.push(Row {
                    case,
                    layout: layout.to_string(),
                    forward: f,
                    data_grad: d,
                    weight_grad: w,
                    tolerance: tol,
                    pass,
                });
            }
        }
        Ok(Report {
            backend: env.backend.to_string(),
            precision: env.precision.to_string(),
            conv_engine: env.conv_engine.to_string(),
            rows,
        })
    }
}

pub fn run(args: CheckKernelsArgs) -> anyhow::Result<()> {
    if args.scale == 0 {
        bail!("--scale must be at least 1");
    }
    let settings = ComputeSettings {
        backend: args.backend,
        precision: args
            .precision
            .unwrap_or_else(|| medddpm_backend::default_precision(args.backend)),
        layout: Layout::Ncdhw,
        conv_engine: args.conv_engine,
        tune_cache: args.tune_cache,
        show_tuning: true,
    };
    let report = run_on(&settings, Task { scale: args.scale })?;
    let failed = report.rows.iter().filter(|r| !r.pass).count();
    if let Some(out) = &args.out {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(out, text).with_context(|| format!("writing {}", out.display()))?;
    }
    println!(
        "{} / {} / {}: {} of {} cases within {:.0e}",
        report.backend,
        report.precision,
        report.conv_engine,
        report.rows.len() - failed,
        report.rows.len(),
        tolerance(settings.precision)
    );
    if failed > 0 {
        bail!("{failed} cases outside tolerance");
    }
    Ok(())
}
