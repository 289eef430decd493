//! `medddpm check-kernels`: the backend's convolution engine, matrix products, GroupNorm,
//! upsampling, channel join, split and padding, Adam and gradient-sum kernels against their
//! plain-op reference twins (burn's ops in f32 on the CPU, on the same rounded operands) on the U-Net's geometries and odd ones, forward and gradients, per
//! precision and layout; or, with `--collective-devices`, the all-reduce of data-parallel
//! training across devices.

mod collective;
mod conv;
mod copies;

use conv::{conv_rows, Row};
use copies::{channel_rows, upsample_rows, ChannelRow, UpsampleRow};

use std::path::PathBuf;

use anyhow::{bail, Context};
use medddpm_backend::{
    run_on, BackendTask, ComputeSettings, ConvEngine, KernelAutodiffBackend, Layout, Precision,
    RunEnv,
};
use medddpm_kernels::norm::NormCase;
use medddpm_kernels::NormEngine;
use serde::Serialize;

use crate::compute_args::BackendArg;

#[derive(Debug, clap::Args)]
pub struct CheckKernelsArgs {
    /// Backend to check.
    #[arg(long, value_enum, default_value = "auto")]
    backend: BackendArg,
    /// Precision (one per process: the GPU backends' precision switch is process-wide).
    #[arg(long)]
    precision: Option<Precision>,
    /// Convolution engine under test.
    #[arg(long, default_value = "auto")]
    conv_engine: ConvEngine,
    /// GroupNorm code under test.
    #[arg(long, default_value = "kernel")]
    norm_engine: NormEngine,
    /// Spatial scale of the test volumes (1: 2^3 to 8^3 voxels).
    #[arg(long, default_value_t = 2)]
    scale: usize,
    /// Kernel-tuning cache root.
    #[arg(long)]
    tune_cache: Option<PathBuf>,
    /// Write the results as JSON here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Instead of the kernels, check the all-reduce (mean) that averages data-parallel
    /// gradients (NCCL on CUDA) over these devices, one thread each: `0,1`, or `all`.
    #[arg(long, value_parser = collective::parse_devices)]
    collective_devices: Option<collective::DeviceList>,
}

/// One matrix-product case's result.
#[derive(Debug, Serialize)]
struct ProductRow {
    a: [usize; 3],
    b: [usize; 3],
    trans_a: bool,
    trans_b: bool,
    product: f64,
    a_grad: f64,
    b_grad: f64,
    tolerance: f64,
    pass: bool,
}

/// One GroupNorm case's result.
#[derive(Debug, Serialize)]
struct NormRow {
    case: NormCase,
    layout: String,
    forward: f64,
    data_grad: f64,
    gamma_grad: f64,
    beta_grad: f64,
    /// Against the per-channel sums of `|dx|` (see `norm::engine_vs_reference`).
    shift_grad: Option<f64>,
    tolerance: f64,
    pass: bool,
}

/// One Adam-update case's result (parameters, moments).
#[derive(Debug, Serialize)]
struct AdamRow {
    /// The largest tensor's length (the call updates the 70 tensors of
    /// `adam::case_lengths(len)` together).
    len: usize,
    steps: usize,
    /// The gradients' dtype (and of the working copy written with a 16-bit one).
    gradients: String,
    param: f64,
    moment_1: f64,
    moment_2: f64,
    /// Relative L2 of the working copy from the cast of the updated parameter (must be 0).
    working_copy: f64,
    /// Relative L2 of micro-batches' gradients summed in f32 (`KernelBackend::sum_f32` on the
    /// same tensors: two in the gradients' dtype, then a running f32 sum and one more) from the
    /// twin's sums (must be 0).
    gradient_sum: f64,
    /// Relative difference of the gradients' squared norm (`KernelBackend::squared_norm_f32`
    /// on the same tensors) from the exact sum (at most [`NORM_TOLERANCE`]).
    gradient_norm: f64,
    tolerance: f64,
    pass: bool,
}

/// Adam updates run in f32 (the master weights) whatever the precision: the kernel does the
/// twin's arithmetic, so only rounding differences (contracted multiply-adds) remain.
const ADAM_TOLERANCE: f64 = 1e-5;

/// The squared norm's f32 additions, in any order, over about a million exact squares.
const NORM_TOLERANCE: f64 = 1e-5;

#[derive(Debug, Serialize)]
struct Report {
    backend: String,
    precision: Precision,
    conv_engine: String,
    rows: Vec<Row>,
    product_rows: Vec<ProductRow>,
    norm_engine: String,
    norm_rows: Vec<NormRow>,
    upsample_rows: Vec<UpsampleRow>,
    channel_rows: Vec<ChannelRow>,
    adam_rows: Vec<AdamRow>,
}

impl Report {
    fn failed(&self) -> usize {
        self.rows.iter().filter(|r| !r.pass).count()
            + self.product_rows.iter().filter(|r| !r.pass).count()
            + self.norm_rows.iter().filter(|r| !r.pass).count()
            + self.upsample_rows.iter().filter(|r| !r.pass).count()
            + self.channel_rows.iter().filter(|r| !r.pass).count()
            + self.adam_rows.iter().filter(|r| !r.pass).count()
    }

    fn cases(&self) -> usize {
        self.rows.len()
            + self.product_rows.len()
            + self.norm_rows.len()
            + self.upsample_rows.len()
            + self.channel_rows.len()
            + self.adam_rows.len()
    }
}

/// How far GroupNorm may be from the f32 CPU twin on the same (rounded) operands: f32 summation
/// order; in bf16 the rounding of the output and of the input gradient (8-bit mantissa), in
/// f16 the same with an 11-bit one.
fn norm_tolerance(precision: Precision) -> f64 {
    match precision {
        Precision::Fp32 | Precision::Tf32 => 5e-6,
        Precision::Bf16 => 1e-2,
        Precision::F16 => 2e-3,
    }
}

struct Task {
    scale: usize,
}

/// How far the engine may be from the f32 CPU convolution of the same (rounded) operands: f32
/// summation order; TF32's 10-bit operand mantissa; bf16 outputs (8-bit mantissa, f32 sums);
/// f16 outputs (11-bit mantissa).
fn tolerance(precision: Precision) -> f64 {
    match precision {
        Precision::Fp32 => 1e-5,
        Precision::Tf32 => 5e-3,
        Precision::Bf16 => 1e-2,
        Precision::F16 => 2e-3,
    }
}

/// Whether every error is finite and within `tol` (a NaN fails).
fn within(errs: &[f64], tol: f64) -> bool {
    errs.iter().all(|e| e.is_finite() && *e <= tol)
}

/// What every group of cases runs on: the device, the run's settings and the test volumes'
/// spatial scale.
struct Cases<'a, B: KernelAutodiffBackend> {
    device: &'a B::Device,
    env: &'a RunEnv,
    scale: usize,
}

/// What a check prints after a case.
fn verdict(pass: bool) -> &'static str {
    if pass {
        "ok"
    } else {
        "OUTSIDE TOLERANCE"
    }
}

impl BackendTask for Task {
    type Output = Report;
    type Error = anyhow::Error;
    fn run<B: KernelAutodiffBackend>(
        self,
        device: B::Device,
        env: &RunEnv,
    ) -> anyhow::Result<Report> {
        let cases = &Cases::<B> {
            device: &device,
            env,
            scale: self.scale,
        };
        Ok(Report {
            backend: env.backend.to_string(),
            precision: env.precision,
            conv_engine: env.conv_engine.to_string(),
            rows: conv_rows(cases),
            product_rows: product_rows(cases),
            norm_engine: env.norm_engine.to_string(),
            norm_rows: norm_rows(cases),
            upsample_rows: upsample_rows(cases),
            channel_rows: channel_rows(cases),
            adam_rows: adam_rows(cases),
        })
    }
}

/// GroupNorm (+ SiLU) against its plain-op twin, both layouts.
fn norm_rows<B: KernelAutodiffBackend>(cases: &Cases<B>) -> Vec<NormRow> {
    let &Cases { device, env, scale } = cases;
    let mut norm_rows = Vec::new();
    let tol = norm_tolerance(env.precision);
    for layout in Layout::ALL {
        for (i, case) in NormCase::standard(scale).into_iter().enumerate() {
            let errs = medddpm_kernels::norm::engine_vs_reference::<B::InnerBackend>(
                device,
                case,
                layout,
                env.norm_engine,
                env.compute_dtype(),
                100 + i as u64,
            );
            let pass = within(&errs, tol);
            let [y, dx, dg, db, ds] = errs;
            eprintln!(
                    "{layout} GroupNorm {} channels / {} groups{}{}{} {:?} b{}: forward {y:.2e}, data grad {dx:.2e}, gamma grad {dg:.2e}, beta grad {db:.2e}{} {}",
                    case.channels,
                    case.groups,
                    if case.silu { " + SiLU" } else { "" },
                    if case.shift { ", shifted" } else { "" },
                    match case.split {
                        Some(first) => format!(", parts {first} + {}", case.channels - first),
                        None => String::new(),
                    },
                    case.size,
                    case.batch,
                    if case.shift { format!(", shift grad {ds:.2e}") } else { String::new() },
                    verdict(pass)
                );
            norm_rows.push(NormRow {
                case,
                layout: layout.to_string(),
                forward: y,
                data_grad: dx,
                gamma_grad: dg,
                beta_grad: db,
                shift_grad: case.shift.then_some(ds),
                tolerance: tol,
                pass,
            });
        }
    }
    norm_rows
}

/// The matrix products (cuBLAS on CUDA with cuDNN) and their gradients against burn's f32
/// `matmul` on the CPU, with the convolutions' tolerance (the same arithmetic: 16-bit or TF32
/// operands, f32 sums).
fn product_rows<B: KernelAutodiffBackend>(cases: &Cases<B>) -> Vec<ProductRow> {
    let &Cases { device, env, scale } = cases;
    let tol = tolerance(env.precision);
    let mut rows = Vec::new();
    for (i, (a, b, trans_a, trans_b)) in medddpm_kernels::product::cases(scale)
        .into_iter()
        .enumerate()
    {
        let spec = medddpm_kernels::ProductSpec::plain(env.compute()).with(trans_a, trans_b);
        let errs = medddpm_kernels::product::engine_vs_reference::<B::InnerBackend>(
            device,
            a,
            b,
            spec,
            env.compute_dtype(),
            400 + i as u64,
        );
        let [p, da, db] = errs;
        let pass = within(&errs, tol);
        eprintln!(
            "product {a:?}{} x {b:?}{}: product {p:.2e}, gradients {da:.2e} / {db:.2e} {}",
            if trans_a { "ᵀ" } else { "" },
            if trans_b { "ᵀ" } else { "" },
            verdict(pass)
        );
        rows.push(ProductRow {
            a,
            b,
            trans_a,
            trans_b,
            product: p,
            a_grad: da,
            b_grad: db,
            tolerance: tol,
            pass,
        });
    }
    rows
}

/// The Adam update against its plain-op twin: f32 gradients, and the precision's own.
fn adam_rows<B: KernelAutodiffBackend>(cases: &Cases<B>) -> Vec<AdamRow> {
    let &Cases { device, env, scale } = cases;
    let mut adam_rows = Vec::new();
    // f32 gradients, and in a 16-bit precision also that precision's gradients with the
    // working copy the forward pass reads.
    let mut works = vec![None];
    if env.compute_dtype() != burn::tensor::DType::F32 {
        works.push(Some(env.compute_dtype()));
    }
    for work in works {
        for (i, len) in [1, 1000, 3 * 64 * 64 * 27 * scale + 7]
            .into_iter()
            .enumerate()
        {
            let steps = 4;
            let errs = medddpm_kernels::adam::engine_vs_reference::<B::InnerBackend>(
                device,
                len,
                steps,
                300 + i as u64,
                work,
            );
            let [p, m, v, c] = errs;
            let sum = medddpm_kernels::adam::sum::engine_vs_reference::<B::InnerBackend>(
                device,
                len,
                310 + i as u64,
                work.unwrap_or(burn::tensor::DType::F32),
            );
            let norm = medddpm_kernels::adam::sum::squared_norm_vs_reference::<B::InnerBackend>(
                device,
                len,
                320 + i as u64,
                work.unwrap_or(burn::tensor::DType::F32),
            );
            // The working copy must be exactly the cast of the master parameter, the sums
            // exactly the twin's.
            let pass = within(&[p, m, v], ADAM_TOLERANCE)
                && c == 0.0
                && sum == 0.0
                && norm <= NORM_TOLERANCE;
            let grads = work.map_or("f32".to_string(), |d| format!("{d:?}"));
            eprintln!(
                    "Adam update of {} tensors in one call (the largest {len} values), {steps} steps, {grads} gradients: parameter {p:.2e}, first moment {m:.2e}, second moment {v:.2e}, working copy {c:.2e}, gradient sum {sum:.2e}, squared norm {norm:.2e} {}",
                    medddpm_kernels::adam::case_lengths(len).len(),
                    verdict(pass)
                );
            adam_rows.push(AdamRow {
                len,
                steps,
                gradients: grads,
                param: p,
                moment_1: m,
                moment_2: v,
                working_copy: c,
                gradient_sum: sum,
                gradient_norm: norm,
                tolerance: ADAM_TOLERANCE,
                pass,
            });
        }
    }
    adam_rows
}

pub fn run(args: CheckKernelsArgs) -> anyhow::Result<()> {
    if args.scale == 0 {
        bail!("--scale must be at least 1");
    }
    let backend = args.backend.into();
    let settings = ComputeSettings {
        backend,
        precision: args.precision,
        layout: Layout::Ncdhw,
        conv_engine: args.conv_engine,
        norm_engine: args.norm_engine,
        tune_cache: args.tune_cache,
        show_tuning: true,
        // One device: the checks compare engines, not replicas.
        ..ComputeSettings::default()
    };
    if let Some(devices) = args.collective_devices {
        let check = run_on(&settings, collective::Task { devices })?;
        return finish_collective(&check, args.out.as_deref());
    }
    let report = run_on(&settings, Task { scale: args.scale })?;
    let failed = report.failed();
    if let Some(out) = &args.out {
        let text = serde_json::to_string_pretty(&report)?;
        medddpm_atomic::write(out, text.as_bytes())
            .with_context(|| format!("writing {}", out.display()))?;
    }
    println!(
        "{} / {} / {} convolutions, {} GroupNorm: {} of {} cases within tolerance ({:.0e} and {:.0e})",
        report.backend,
        report.precision,
        report.conv_engine,
        report.norm_engine,
        report.cases() - failed,
        report.cases(),
        tolerance(report.precision),
        norm_tolerance(report.precision)
    );
    if failed > 0 {
        bail!("{failed} cases outside tolerance");
    }
    Ok(())
}

/// Writes and judges the all-reduce check.
fn finish_collective(
    check: &medddpm_kernels::collective::CollectiveCheck,
    out: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    if let Some(out) = out {
        let text = serde_json::to_string_pretty(check)?;
        medddpm_atomic::write(out, text.as_bytes())
            .with_context(|| format!("writing {}", out.display()))?;
    }
    let failed = collective::print(check);
    if failed > 0 {
        bail!("{failed} all-reduce cases outside tolerance");
    }
    Ok(())
}
