//! `medddpm bench` and `medddpm check`: their switches, turned into the benchmark's options in
//! one place ([`BenchArgs::into_options`], [`CheckArgs::into_options`]).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use medddpm_backend::{BackendKind, ComputeSettings, ConvEngine, NormEngine, Precision};
use medddpm_bench::{BenchOptions, Model, ScalingOptions, Workload};
use medddpm_unet::{ActivationCheckpointing, Layout};

use crate::compute_args::{BackendArg, PlacementArgs};

crate::compute_args::described_choice!(
    /// A network on the command line: its names and help come from [`Model`].
    ModelArg,
    Model,
    4
);

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

/// `bench --devices`'s help, in place of the shared switch's.
const DEVICES_HELP: &str = "Measure data-parallel training throughput instead of the \
    matrix: the trainer's optimizer steps on the first 1, 2, .., N of these CUDA devices \
    (comma-separated), one micro-batch of --batch volumes per device and step, in samples per \
    second with the scaling efficiency (appended to scaling.jsonl in --out). Takes one backend, \
    precision and layout; --collective and --launch say how its replicas average and where \
    they live";

/// Measures training micro-steps and sampling steps over a matrix of backend x precision x
/// layout, each configuration in its own process, and writes JSON lines, CSV, markdown and a
/// PNG chart.
#[derive(Debug, Args)]
#[command(mut_arg("devices", |a| a.help(DEVICES_HELP)))]
pub struct BenchArgs {
    /// Backends to measure (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "auto")]
    pub backends: Vec<BackendArg>,
    /// Precisions to measure (f16 too when asked: fp32, tf32, bf16, f16).
    #[arg(long, value_delimiter = ',', default_value = "fp32,tf32,bf16")]
    pub precisions: Vec<Precision>,
    /// Activation layouts to measure.
    #[arg(long, value_delimiter = ',', default_value = "ncdhw,ndhwc")]
    pub layouts: Vec<Layout>,
    /// Convolution engine of every configuration: auto (cuDNN on CUDA when it loads, else
    /// burn's kernels), cudnn, cubecl (our portable CubeCL kernels) or burn (burn's own).
    /// Rows are labelled `cuda+cudnn`, `cuda+cubecl` and so on, where not burn's.
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
    /// Activations the training micro-step recomputes in its backward pass instead of
    /// keeping: none, norms (the ResBlocks' GroupNorm + SiLU outputs) or blocks (only each
    /// U-Net block's output is kept); the trainer's `[train] activation_checkpointing`.
    #[arg(long, default_value = "none")]
    pub activation_checkpointing: ActivationCheckpointing,
    /// Untimed steps after the first.
    #[arg(long, default_value_t = 2)]
    pub warmup: usize,
    /// Timed steps (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub steps: usize,
    /// Start even when the memory plan says a configuration does not fit the device.
    #[arg(long)]
    pub no_memory_check: bool,
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
    /// Tune every kernel on this machine: without it, an empty tuning cache on an H100 or H200
    /// starts from the results shipped in the binary.
    #[arg(long)]
    pub no_shipped_tuning: bool,
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
    /// Also time sampling steps and training micro-steps replayed from CUDA graphs (CUDA),
    /// each checked value for value against the step run as it comes (the run's peak memory
    /// then includes the graphs' pool).
    #[arg(long)]
    pub cuda_graphs: bool,
    /// `--devices` measures data-parallel training throughput instead of the matrix
    /// ([`DEVICES_HELP`]).
    #[command(flatten)]
    pub placement: PlacementArgs,
    /// Internal: run one configuration from this JSON file in this process.
    #[arg(long, hide = true)]
    pub single_config: Option<PathBuf>,
    /// Internal: where the single configuration's record goes.
    #[arg(long, hide = true)]
    pub single_out: Option<PathBuf>,
    /// Internal: with --devices, measure only the first K devices, in this process.
    #[arg(long, hide = true)]
    pub scaling_count: Option<usize>,
}

/// What `medddpm bench --devices` runs: the compute settings (with `count`, only its first
/// devices), the measurement's options, and the one device count this process measures, if it
/// is one of the measurement's processes.
#[derive(Debug, Clone)]
pub struct Scaling {
    pub settings: ComputeSettings,
    pub options: ScalingOptions,
    pub count: Option<usize>,
}

impl BenchArgs {
    /// With `--devices`: the device-scaling measurement's compute settings and options.
    pub fn scaling(&self) -> Option<Result<Scaling, String>> {
        let mut devices = self.placement.devices.clone()?;
        if let Some(k) = self.scaling_count {
            if k == 0 || k > devices.len() {
                return Some(Err(format!(
                    "--scaling-count {k}: give 1 to {} (the --devices listed)",
                    devices.len()
                )));
            }
            devices.truncate(k);
        }
        let one = |what: &str, n: usize| {
            (n != 1).then(|| format!("--devices measures one configuration: give one {what}"))
        };
        if let Some(e) = one("--backends", self.backends.len())
            .or_else(|| one("--precisions", self.precisions.len()))
            .or_else(|| one("--layouts", self.layouts.len()))
        {
            return Some(Err(e));
        }
        let settings = ComputeSettings {
            backend: self.backends[0].into(),
            precision: Some(self.precisions[0]),
            layout: self.layouts[0],
            conv_engine: self.conv_engine,
            norm_engine: self.norm_engine,
            tune_cache: self.tune_cache.clone(),
            show_tuning: true,
            shipped_tuning: !self.no_shipped_tuning,
            devices,
            collective: self.placement.collective.map(|c| c.0).unwrap_or_default(),
            launch: self.placement.launch.map(|l| l.0).unwrap_or_default(),
            cluster_world: None,
        };
        Some(Ok(Scaling {
            settings,
            options: ScalingOptions {
                workload: self.workload(),
                warmup: self.warmup,
                steps: self.steps,
                out: self.out.clone(),
                seed: self.seed,
                host_profile: self.host_profile,
                timeout_s: self.timeout,
            },
            count: self.scaling_count,
        }))
    }

    /// The network, volume, batch and activation checkpointing these switches select.
    fn workload(&self) -> Workload {
        Workload {
            model: self.model.0,
            size: self.size,
            batch: self.batch,
            activation_checkpointing: self.activation_checkpointing,
        }
    }

    /// The benchmark's options these switches select.
    pub fn into_options(self) -> BenchOptions {
        let workload = self.workload();
        BenchOptions {
            backends: self.backends.into_iter().map(BackendKind::from).collect(),
            precisions: self.precisions,
            layouts: self.layouts,
            conv_engine: self.conv_engine,
            norm_engine: self.norm_engine,
            workload,
            warmup: self.warmup,
            steps: self.steps,
            breakdown: !self.no_breakdown,
            out: self.out,
            title: self.title,
            pytorch_reference: self.pytorch_reference,
            timeout: Duration::from_secs(self.timeout),
            tune_cache: self.tune_cache,
            shipped_tuning: !self.no_shipped_tuning,
            seed: self.seed,
            report_only: self.report_only,
            check_only: self.check_only,
            locate: self.locate,
            host_profile: self.host_profile,
            cuda_graphs: self.cuda_graphs,
            single_config: self.single_config,
            single_out: self.single_out,
        }
    }
}

/// `medddpm check`: the benchmark's agreement probe alone.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Backends to check (default: the CPU and every GPU backend compiled in).
    #[arg(long, value_enum, value_delimiter = ',')]
    backends: Option<Vec<BackendArg>>,
    /// Precisions to check.
    #[arg(long, value_delimiter = ',', default_value = "fp32,tf32,bf16")]
    precisions: Vec<Precision>,
    /// Layouts to check.
    #[arg(long, value_delimiter = ',', default_value = "ncdhw,ndhwc")]
    layouts: Vec<Layout>,
    /// Convolution engine: auto (cuDNN on CUDA when it loads), cudnn, cubecl (ours) or burn.
    #[arg(long, default_value = "auto")]
    conv_engine: ConvEngine,
    /// Network configuration.
    #[arg(long, value_enum, default_value = "whole-head")]
    model: ModelArg,
    /// Probe volume, D,H,W or one number (the float64 CPU reference of a whole-head network
    /// takes minutes at 128^3 on a small machine; it is cached in the tuning-cache folder).
    #[arg(long, default_value = "32", value_parser = parse_size)]
    size: [usize; 3],
    /// Folder for the results.
    #[arg(long, default_value = "check-results")]
    out: PathBuf,
    /// Kernel-tuning cache root.
    #[arg(long)]
    tune_cache: Option<PathBuf>,
    /// Do not locate the first deviating operation of a configuration that disagrees (locating
    /// costs one more float64 pass on the CPU, cached).
    #[arg(long)]
    no_locate: bool,
}

impl CheckArgs {
    /// The benchmark's options of a check: one untimed step per configuration, the probe alone.
    pub fn into_options(self) -> BenchOptions {
        let backends = match self.backends {
            Some(backends) => backends.into_iter().map(BackendKind::from).collect(),
            None => [BackendKind::Cpu, BackendKind::Cuda, BackendKind::Wgpu]
                .into_iter()
                .filter(|b| b.compiled_in())
                .collect(),
        };
        BenchOptions {
            backends,
            precisions: self.precisions,
            layouts: self.layouts,
            conv_engine: self.conv_engine,
            norm_engine: NormEngine::default(),
            workload: Workload {
                model: self.model.0,
                size: self.size,
                batch: 1,
                activation_checkpointing: ActivationCheckpointing::None,
            },
            warmup: 0,
            steps: 1,
            breakdown: false,
            out: self.out,
            title: None,
            pytorch_reference: None,
            timeout: Duration::from_secs(1800),
            tune_cache: self.tune_cache,
            shipped_tuning: true,
            seed: 0,
            report_only: false,
            check_only: true,
            locate: !self.no_locate,
            host_profile: false,
            cuda_graphs: false,
            single_config: None,
            single_out: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        command: Command,
    }

    #[derive(clap::Subcommand)]
    enum Command {
        Bench(BenchArgs),
        Check(CheckArgs),
    }

    fn bench(args: &[&str]) -> BenchOptions {
        let all = [&["medddpm", "bench"], args].concat();
        match Cli::parse_from(all).command {
            Command::Bench(args) => args.into_options(),
            Command::Check(_) => unreachable!(),
        }
    }

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

    #[test]
    fn the_switches_defaults_are_the_benchmarks() {
        assert_eq!(bench(&[]), BenchOptions::default());
    }

    #[test]
    fn every_switch_reaches_the_options() {
        let options = bench(&[
            "--backends",
            "cpu,wgpu",
            "--precisions",
            "bf16",
            "--layouts",
            "ndhwc",
            "--conv-engine",
            "cubecl",
            "--norm-engine",
            "ops",
            "--model",
            "whole-head-c32",
            "--size",
            "16,32,48",
            "--batch",
            "2",
            "--activation-checkpointing",
            "blocks",
            "--warmup",
            "3",
            "--steps",
            "4",
            "--no-breakdown",
            "--out",
            "o",
            "--title",
            "t",
            "--pytorch-reference",
            "h100",
            "--timeout",
            "7",
            "--tune-cache",
            "c",
            "--seed",
            "9",
            "--report-only",
            "--check-only",
            "--locate",
            "--host-profile",
            "--cuda-graphs",
            "--no-shipped-tuning",
            "--single-config",
            "s.json",
            "--single-out",
            "r.json",
        ]);
        let expected = BenchOptions {
            backends: vec![BackendKind::Cpu, BackendKind::Wgpu],
            precisions: vec![Precision::Bf16],
            layouts: vec![Layout::Ndhwc],
            conv_engine: ConvEngine::Cubecl,
            norm_engine: NormEngine::Ops,
            workload: Workload {
                model: Model::WholeHeadC32,
                size: [16, 32, 48],
                batch: 2,
                activation_checkpointing: ActivationCheckpointing::Blocks,
            },
            warmup: 3,
            steps: 4,
            breakdown: false,
            out: "o".into(),
            title: Some("t".into()),
            pytorch_reference: Some("h100".into()),
            timeout: Duration::from_secs(7),
            tune_cache: Some("c".into()),
            shipped_tuning: false,
            seed: 9,
            report_only: true,
            check_only: true,
            locate: true,
            host_profile: true,
            cuda_graphs: true,
            single_config: Some("s.json".into()),
            single_out: Some("r.json".into()),
        };
        assert_eq!(options, expected);
    }

    #[test]
    fn check_runs_the_probe_alone() {
        let Command::Check(args) =
            Cli::parse_from(["medddpm", "check", "--backends", "cpu", "--model", "tiny"]).command
        else {
            unreachable!()
        };
        let options = args.into_options();
        assert_eq!(options.backends, vec![BackendKind::Cpu]);
        assert_eq!(options.workload.model, Model::Tiny);
        assert_eq!(options.workload.size, [32; 3]);
        assert!(options.check_only && options.locate && !options.breakdown);
        let batch = options.workload.batch;
        assert_eq!((options.warmup, options.steps, batch), (0, 1, 1));
        assert_eq!(options.out, PathBuf::from("check-results"));
    }

    #[test]
    fn more_steps_than_timesteps_is_an_error() {
        let out = std::env::temp_dir().join(format!("medddpm-cli-steps-{}", std::process::id()));
        let options = bench(&[
            "--backends",
            "cpu",
            "--steps",
            "300",
            "--out",
            out.to_str().unwrap(),
        ]);
        let err = medddpm_bench::run_bench(options, vec!["unused".into()]).unwrap_err();
        assert!(err.to_string().contains("250 timesteps"), "{err}");
        let _ = std::fs::remove_dir_all(out);
    }
}
