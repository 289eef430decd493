//! `medddpm bench` and `medddpm check`: arguments and drivers.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use medddpm_backend::{
    run_on, BackendKind, BackendTask, ComputeSettings, ConvEngine, NormEngine, Precision, RunEnv,
    Unsupported,
};
use medddpm_unet::{Layout, UNetConfig};

use crate::matrix::{placeholder, run_cell, Cell, ChildSpec};
use crate::record::{BenchRecord, RecordStatus};
use crate::report::{append_jsonl, read_jsonl, to_csv, to_markdown, write_png_chart};
use crate::single::{bench_one_with_partial, SingleConfig};

/// Networks the benchmark knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModelArg {
    /// The released whole-head model (C = 64, 40.2 M parameters).
    WholeHead,
    /// The released BraTS model (C = 64, 57.6 M parameters).
    Brats,
    /// Whole-head shape with C = 32 (the golden fixture's width).
    WholeHeadC32,
    /// Two levels, C = 8: every block kind, for tests and quick checks.
    Tiny,
}

impl ModelArg {
    /// The network configuration.
    pub fn config(self) -> UNetConfig {
        match self {
            ModelArg::WholeHead => UNetConfig::whole_head(),
            ModelArg::Brats => UNetConfig::brats(),
            ModelArg::WholeHeadC32 => UNetConfig {
                model_channels: 32,
                ..UNetConfig::whole_head()
            },
            ModelArg::Tiny => UNetConfig::tiny(),
        }
    }

    /// Name in reports.
    pub fn name(self) -> &'static str {
        match self {
            ModelArg::WholeHead => "whole-head",
            ModelArg::Brats => "brats",
            ModelArg::WholeHeadC32 => "whole-head-c32",
            ModelArg::Tiny => "tiny",
        }
    }
}

/// `--size`: one number for a cube or D,H,W (commas or `x`).
pub fn parse_size(s: &str) -> Result<[usize; 3], String> {
    let parts: Result<Vec<usize>, _> = s
        .split([',', 'x'])
        .map(|p| p.trim().parse::<usize>())
        .collect();
    let size = match parts.map_err(|e| format!("'{s}': {e}"))?.as_slice() {
        [n] => [*n; 3],
        [d, h, w] => [*d, *h, *w],
        _ => return Err(format!("'{s}': give one size or three (D,H,W)")),
    };
    if size.iter().any(|&n| n > MAX_SIDE) {
        return Err(format!(
            "'{s}': at most {MAX_SIDE} voxels per side (one 64-channel f32 activation of a {MAX_SIDE}^3 volume is already 256 GiB)"
        ));
    }
    Ok(size)
}

/// Largest volume side `parse_size` accepts: far beyond any GPU's memory, and small enough that
/// no product of sizes and channels overflows.
const MAX_SIDE: usize = 1024;

/// Measures training micro-steps and sampling steps over a matrix of backend x precision x
/// layout, each configuration in its own process, and writes JSON lines, CSV, markdown and a
/// PNG chart.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Backends to measure (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "auto")]
    pub backends: Vec<BackendKind>,
    /// Precisions to measure.
    #[arg(long, value_delimiter = ',', default_value = "fp32,tf32,bf16")]
    pub precisions: Vec<Precision>,
    /// Activation layouts to measure.
    #[arg(long, value_delimiter = ',', default_value = "ncdhw,ndhwc")]
    pub layouts: Vec<Layout>,
    /// Convolution engine of every configuration: auto (cuDNN on CUDA when it loads), cudnn
    /// or cubecl (burn's kernels). cuDNN rows are labelled `cuda+cudnn`.
    #[arg(long, default_value = "auto")]
    pub conv_engine: ConvEngine,
    /// GroupNorm code of every configuration: kernel (CubeCL kernels on the GPU backends) or
    /// ops (burn's ops, the reference). Rows with ops are labelled `+normops`.
    #[arg(long, default_value = "kernel")]
    pub norm_engine: NormEngine,
    /// Network configuration.
    #[arg(long, value_enum, default_value = "whole-head")]
    pub model: ModelArg,
    /// Volume size as D,H,W (or one number for a cube); every size a multiple of the network's
    /// size divisor (16 for the released models).
    #[arg(long, default_value = "128", value_parser = parse_size)]
    pub size: [usize; 3],
    /// Batch size.
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// Untimed steps after the first.
    #[arg(long, default_value_t = 2)]
    pub warmup: usize,
    /// Timed steps (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub steps: usize,
    /// Skip the per-operation breakdown.
    #[arg(long)]
    pub no_breakdown: bool,
    /// Folder for results.jsonl (appended to), results.csv, results.md and results.png.
    #[arg(long, default_value = "bench-results")]
    pub out: PathBuf,
    /// Title of the chart and the markdown file.
    #[arg(long)]
    pub title: Option<String>,
    /// Add the PyTorch reference's figures measured on this GPU (from peer-baseline.md) to the
    /// report, marked as such. Only `h100` is known.
    #[arg(long)]
    pub pytorch_reference: Option<String>,
    /// Kill a configuration's process after this many seconds.
    #[arg(long, default_value_t = 1800)]
    pub timeout: u64,
    /// Kernel-tuning cache root (default: ~/.cache/medddpm/tune).
    #[arg(long)]
    pub tune_cache: Option<PathBuf>,
    /// Seed of weights and inputs.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Only rebuild the CSV, markdown and chart from results.jsonl.
    #[arg(long)]
    pub report_only: bool,
    /// Only run the agreement probe of each configuration (what `medddpm check` does).
    #[arg(long)]
    pub check_only: bool,
    /// When a configuration's output disagrees, compare every operation's output with the
    /// float64 reference's and name the first that deviates (writes locate-*.json into --out;
    /// costs a second float64 pass on the CPU, cached).
    #[arg(long)]
    pub locate: bool,
    /// Sample the host's call stacks during the timed training steps and write them, folded,
    /// into --out (`host-profile-*.folded`; needs a build with the `host-profile` feature).
    #[arg(long)]
    pub host_profile: bool,
    /// Internal: run one configuration from this JSON file in this process.
    #[arg(long, hide = true)]
    pub single_config: Option<PathBuf>,
    /// Internal: where the single configuration's record goes.
    #[arg(long, hide = true)]
    pub single_out: Option<PathBuf>,
}

/// One configuration measured in this process; with `out`, the record as it stands is written
/// there after every phase.
pub(crate) struct SingleTask<'a> {
    pub config: &'a SingleConfig,
    pub out: Option<&'a Path>,
}

impl BackendTask for SingleTask<'_> {
    type Output = BenchRecord;
    fn run<B: medddpm_backend::KernelAutodiffBackend>(
        self,
        device: B::Device,
        env: &RunEnv,
    ) -> anyhow::Result<BenchRecord> {
        let out = self.out;
        bench_one_with_partial::<B>(
            &device,
            env,
            self.config,
            |p| eprintln!("{p}"),
            |r| {
                if let (Some(out), Ok(bytes)) = (out, serde_json::to_vec_pretty(r)) {
                    let _ = write_atomic(out, &bytes);
                }
            },
        )
    }
}

fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let tmp = path.with_extension(format!(
        "{}.tmp",
        path.extension().and_then(|e| e.to_str()).unwrap_or("")
    ));
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

fn single(args: &BenchArgs, config_path: &Path) -> anyhow::Result<()> {
    let out = args
        .single_out
        .as_ref()
        .context("--single-config needs --single-out")?;
    let text = std::fs::read_to_string(config_path)
        .with_context(|| format!("reading {}", config_path.display()))?;
    let config: SingleConfig = serde_json::from_str(&text)
        .with_context(|| format!("parsing {}", config_path.display()))?;
    let [backend] = args.backends[..] else {
        bail!("one backend per single run")
    };
    let [precision] = args.precisions[..] else {
        bail!("one precision per single run")
    };
    let [layout] = args.layouts[..] else {
        bail!("one layout per single run")
    };
    let cell = Cell {
        backend,
        precision,
        layout,
    };
    let settings = ComputeSettings {
        backend,
        precision,
        layout,
        conv_engine: config.conv_engine,
        norm_engine: config.norm_engine,
        tune_cache: args.tune_cache.clone(),
        show_tuning: true,
    };
    let record = match run_on(
        &settings,
        SingleTask {
            config: &config,
            out: Some(out),
        },
    ) {
        Ok(r) => r,
        Err(e) => {
            let status = if e.downcast_ref::<Unsupported>().is_some() {
                RecordStatus::Unsupported
            } else {
                RecordStatus::Failed
            };
            eprintln!("{status:?}: {e:#}");
            placeholder(cell, &config, status, format!("{e:#}"))
        }
    };
    write_atomic(out, &serde_json::to_vec_pretty(&record)?)
}

/// The PyTorch reference's whole-head 128^3 figures on an H100, as measured by the reference
/// code and recorded in `../shared/docs/peer-baseline.md` (mean of 8 steps, CUDA events).
pub fn pytorch_reference_h100() -> Vec<BenchRecord> {
    let row = |precision: &str, layout: &str, train: f64, sample: f64, mem_gib: f64| {
        let mut r = BenchRecord::new(
            "pytorch",
            "NVIDIA H100 80GB HBM3 (peer-baseline.md)",
            precision,
            layout,
            "whole-head",
            [128; 3],
            1,
            RecordStatus::Ok,
        );
        r.message =
            Some("measured by the PyTorch reference (peer-baseline.md), mean of 8 steps".into());
        r.train_step_median_ms = Some(train);
        r.sample_step_median_ms = Some(sample);
        r.peak_memory_mib = Some(mem_gib * 1024.0);
        r.memory_source = Some("torch.cuda.max_memory_allocated".into());
        r
    };
    vec![
        row("fp32", "ncdhw", 1236.0, 201.0, 18.9),
        row("tf32", "ncdhw", 249.0, 96.0, 18.9),
        row("tf32", "ncdhw+cudnn.benchmark", 239.0, 94.0, 18.9),
        row("fp32", "ndhwc", 1401.0, 273.0, 21.8),
        row("tf32", "ndhwc", 366.0, 145.0, 21.3),
    ]
}

/// Keeps the last record of each configuration (reruns replace earlier results).
fn latest_per_configuration(records: Vec<BenchRecord>) -> Vec<BenchRecord> {
    let mut out: Vec<BenchRecord> = Vec::new();
    for r in records {
        let same = |o: &BenchRecord| {
            o.backend == r.backend
                && o.precision == r.precision
                && o.layout == r.layout
                && o.model == r.model
                && o.size == r.size
                && o.batch == r.batch
        };
        if let Some(i) = out.iter().position(same) {
            out.remove(i);
        }
        out.push(r);
    }
    out
}

/// Rewrites results.csv, results.md and results.png from results.jsonl.
pub fn write_reports(args: &BenchArgs) -> anyhow::Result<Vec<BenchRecord>> {
    let jsonl = args.out.join("results.jsonl");
    let mut records = latest_per_configuration(read_jsonl(&jsonl)?);
    match args.pytorch_reference.as_deref() {
        None => {}
        Some("h100") => records.extend(pytorch_reference_h100()),
        Some(other) => bail!("no PyTorch reference figures for '{other}' (known: h100)"),
    }
    let title = args.title.clone().unwrap_or_else(|| {
        let r = records.first();
        format!(
            "Med-DDPM U-Net ({}, {}), batch {}",
            r.map_or("?".into(), |r| r.model.clone()),
            r.map_or("?".into(), |r| r.size.map(|s| s.to_string()).join("x")),
            r.map_or(1, |r| r.batch)
        )
    });
    write_atomic(&args.out.join("results.csv"), to_csv(&records).as_bytes())?;
    let md = format!("# {title}\n\n{}", to_markdown(&records));
    write_atomic(&args.out.join("results.md"), md.as_bytes())?;
    write_png_chart(&records, &args.out.join("results.png"), &title)?;
    Ok(records)
}

/// `medddpm bench`. `command` is how to start this program's `bench` subcommand again (for
/// the child processes).
pub fn run_bench(args: BenchArgs, command: Vec<String>) -> anyhow::Result<()> {
    if let Some(config_path) = args.single_config.clone() {
        return single(&args, &config_path);
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    // This run's configurations that failed or disagreed (the JSON lines may hold earlier runs').
    let mut failed = Vec::new();
    let mut disagreeing = Vec::new();
    if !args.report_only {
        let unet = args.model.config();
        unet.validate()?;
        let divisor = unet.size_divisor();
        if args.size.iter().any(|&s| s == 0 || s % divisor != 0) {
            bail!(
                "--size {:?}: every size must be a positive multiple of {divisor} for the {} model",
                args.size,
                args.model.name()
            );
        }
        if args.steps == 0 {
            bail!("--steps must be at least 1");
        }
        if args.batch == 0 {
            bail!("--batch must be at least 1");
        }
        // The sampling steps walk down from the last timestep, one per step.
        let timesteps = crate::single::TIMESTEPS;
        if 1 + args.warmup + args.steps > timesteps {
            bail!(
                "--warmup {} and --steps {} need {} sampling steps, more than the {timesteps} timesteps of the schedule",
                args.warmup,
                args.steps,
                1 + args.warmup + args.steps
            );
        }
        let config = SingleConfig {
            model: args.model.name().to_string(),
            unet,
            size: args.size,
            batch: args.batch,
            warmup: args.warmup,
            steps: args.steps,
            lr: 1e-5,
            breakdown: !args.no_breakdown,
            check_only: args.check_only,
            seed: args.seed,
            conv_engine: args.conv_engine,
            norm_engine: args.norm_engine,
            probe_cache: Some(
                args.tune_cache
                    .clone()
                    .unwrap_or_else(medddpm_backend::default_tune_cache)
                    .join("probe-reference"),
            ),
            locate: args.locate.then(|| args.out.clone()),
            host_profile: args.host_profile.then(|| args.out.clone()),
        };
        let spec = ChildSpec {
            command,
            timeout: Duration::from_secs(args.timeout),
            tune_cache: args.tune_cache.clone(),
        };
        let jsonl = args.out.join("results.jsonl");
        for &backend in &args.backends {
            let backend = backend.resolve();
            for &precision in &args.precisions {
                for &layout in &args.layouts {
                    let cell = Cell {
                        backend,
                        precision,
                        layout,
                    };
                    eprintln!("== {backend} / {precision} / {layout}");
                    let record = if backend.compiled_in() {
                        run_cell(&spec, cell, &config, &args.out)
                    } else {
                        placeholder(
                            cell,
                            &config,
                            RecordStatus::Unsupported,
                            format!("the {backend} backend is not compiled into this binary"),
                        )
                    };
                    eprintln!(
                        "== {backend} / {precision} / {layout}: {:?}{}",
                        record.status,
                        record
                            .message
                            .as_deref()
                            .map(|m| format!(" ({m})"))
                            .unwrap_or_default()
                    );
                    let name = format!("{backend}/{precision}/{layout}");
                    match record.status {
                        RecordStatus::Failed => failed.push(name),
                        RecordStatus::Disagrees => disagreeing.push(name),
                        RecordStatus::Ok | RecordStatus::Unsupported => {}
                    }
                    append_jsonl(&jsonl, &record)?;
                }
            }
        }
    }
    let records = write_reports(&args)?;
    println!("{}", to_markdown(&records));
    eprintln!("wrote {}/results.{{jsonl,csv,md,png}}", args.out.display());
    // A failed or disagreeing configuration makes the exit status non-zero (after the reports
    // are written), so that scripts and CI see it.
    match (failed.is_empty(), disagreeing.is_empty()) {
        (true, true) => Ok(()),
        (true, false) => bail!(
            "outputs disagree with the float64 reference: {}",
            disagreeing.join(", ")
        ),
        (false, true) => bail!("failed: {} (see the log above)", failed.join(", ")),
        (false, false) => bail!(
            "failed: {}; outputs disagree with the float64 reference: {}",
            failed.join(", "),
            disagreeing.join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_and_absurd_ones_are_refused() {
        assert_eq!(parse_size("32"), Ok([32; 3]));
        assert_eq!(parse_size("16,32x48"), Ok([16, 32, 48]));
        assert!(parse_size("16,32")
            .unwrap_err()
            .contains("one size or three"));
        let err = parse_size("4294967296").unwrap_err();
        assert!(err.contains("at most 1024"), "{err}");
    }
}
