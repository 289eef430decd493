//! The switches that choose how a command computes (`--backend`, `--precision`, ...): the
//! command line's side of `medddpm_backend::ComputeRequest`.

use std::path::PathBuf;

use clap::builder::PossibleValue;
use clap::ValueEnum;
use medddpm_backend::{
    BackendKind, Collective, ComputeConfig, ComputeRequest, ComputeSettings, ConvEngine, Launch,
    Layout, NormEngine, Precision,
};

/// A command-line choice wrapping one of the libraries' enums, whose names and help come from
/// its `ALL`, `name` and `description` (clap's derive cannot see into another crate's enum).
macro_rules! described_choice {
    ($(#[$doc:meta])* $arg:ident, $inner:ty, $n:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $arg(pub $inner);

        impl clap::ValueEnum for $arg {
            fn value_variants<'a>() -> &'a [Self] {
                const ALL: [$arg; $n] = {
                    let mut all = [$arg(<$inner>::ALL[0]); $n];
                    let mut i = 0;
                    while i < $n {
                        all[i] = $arg(<$inner>::ALL[i]);
                        i += 1;
                    }
                    all
                };
                &ALL
            }

            fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
                Some(clap::builder::PossibleValue::new(self.0.name()).help(self.0.description()))
            }
        }

        impl From<$arg> for $inner {
            fn from(arg: $arg) -> Self {
                arg.0
            }
        }
    };
}
pub(crate) use described_choice;

described_choice!(
    /// A backend on the command line: its names and help come from [`BackendKind`].
    BackendArg,
    BackendKind,
    4
);

/// A command-line choice wrapping a library enum that has no `description`: its variants,
/// names and help are listed here.
macro_rules! listed_choice {
    ($(#[$doc:meta])* $arg:ident, $inner:ident { $($variant:ident => ($name:literal, $help:literal),)* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $arg(pub $inner);

        impl ValueEnum for $arg {
            fn value_variants<'a>() -> &'a [Self] {
                const ALL: &[$arg] = &[$($arg($inner::$variant)),*];
                ALL
            }

            fn to_possible_value(&self) -> Option<PossibleValue> {
                let (name, help) = match self.0 {
                    $($inner::$variant => ($name, $help),)*
                };
                Some(PossibleValue::new(name).help(help))
            }
        }
    };
}

listed_choice!(
    /// `--collective` on the command line.
    CollectiveArg,
    Collective {
        Auto => ("auto", "NCCL on CUDA when libnccl loads, else the host"),
        Nccl => ("nccl", "NCCL's all-reduce between the GPUs (an error where it cannot run)"),
        Host => ("host", "gathered and averaged through host threads (slower)"),
    }
);

listed_choice!(
    /// `--launch` on the command line.
    LaunchArg,
    Launch {
        Auto => ("auto", "a process per device on CUDA, threads elsewhere"),
        Threads => ("threads", "one process drives every device"),
        Processes => (
            "processes",
            "one process per device, started by the first (also on the CPU, to test it)"
        ),
    }
);

/// The command-line switches every command that computes shares.
#[derive(Debug, Clone, clap::Args)]
pub struct ComputeArgs {
    /// Backend to run on.
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: BackendArg,
    /// Precision of convolutions and matrix products: fp32 (strict IEEE, no tensor cores),
    /// tf32 (tensor cores; CUDA only), bf16 (mixed precision, f32 master weights) or f16 (as
    /// bf16 with dynamic loss scaling, for Vulkan GPUs without bf16).
    /// Default: tf32 on CUDA (what burn and PyTorch's cuDNN convolutions do by default; strict
    /// fp32 is many times slower there), fp32 elsewhere.
    #[arg(long)]
    pub precision: Option<Precision>,
    /// Memory layout of the activations: ncdhw (channels-first, the default) or ndhwc
    /// (channels-last).
    #[arg(long)]
    pub layout: Option<Layout>,
    /// Library for the 3-D convolutions: auto (the default: cuDNN on CUDA when libcudnn.so.9
    /// loads, else burn's kernels), cudnn (an error where it cannot run), cubecl (our portable
    /// CubeCL kernels, CUDA and wgpu) or burn (burn's own kernels).
    #[arg(long)]
    pub conv_engine: Option<ConvEngine>,
    /// GroupNorm code: kernel (the default: CubeCL kernels on the CUDA and wgpu backends, burn's
    /// ops on the CPU) or ops (burn's ops everywhere, the kernels' reference).
    #[arg(long)]
    pub norm_engine: Option<NormEngine>,
    /// Kernel-tuning cache folder of the GPU backends (default: $MEDDDPM_TUNE_CACHE,
    /// ~/.cache/medddpm/tune).
    #[arg(long)]
    pub tune_cache: Option<PathBuf>,
    /// Tune every kernel on this machine: without it, an empty tuning cache on an H100 or H200
    /// starts from the results shipped in the binary (kernel choices timed on those GPUs).
    #[arg(long)]
    pub no_shipped_tuning: bool,
    #[command(flatten)]
    pub placement: PlacementArgs,
}

/// Where a run's model replicas go (the backend's placement): the switches `ComputeArgs` and
/// `bench` share, declared once so the device list is parsed one way everywhere.
#[derive(Debug, Clone, clap::Args)]
pub struct PlacementArgs {
    /// CUDA devices to run on, comma-separated GPU indices, e.g. 0,1 (default: 0). Training runs
    /// one model replica per device, the experiment's batch split across them; the other
    /// commands take one device.
    #[arg(long, value_delimiter = ',')]
    pub devices: Option<Vec<usize>>,
    /// How the replicas of a multi-device run average their gradients each optimizer step.
    #[arg(long, value_enum)]
    pub collective: Option<CollectiveArg>,
    /// Where the replicas of a multi-device run live.
    #[arg(long, value_enum)]
    pub launch: Option<LaunchArg>,
}

impl ComputeArgs {
    /// What these switches ask for.
    pub fn request(&self) -> ComputeRequest {
        ComputeRequest {
            backend: self.backend.into(),
            precision: self.precision,
            layout: self.layout,
            conv_engine: self.conv_engine,
            norm_engine: self.norm_engine,
            tune_cache: self.tune_cache.clone(),
            no_shipped_tuning: self.no_shipped_tuning,
            devices: self.placement.devices.clone(),
            collective: self.placement.collective.map(|c| c.0),
            launch: self.placement.launch.map(|l| l.0),
        }
    }

    /// The settings these switches select.
    pub fn settings(&self) -> ComputeSettings {
        self.request().settings()
    }

    /// The settings these switches select, with an experiment's `[compute]` table filling in
    /// what was not given on the command line.
    pub fn settings_with(&self, config: &ComputeConfig) -> ComputeSettings {
        self.request().settings_with(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        compute: ComputeArgs,
    }

    #[test]
    fn switches_win_over_the_experiment_file() {
        let file = ComputeConfig {
            precision: Some(Precision::Bf16),
            layout: Some(Layout::Ndhwc),
            conv_engine: Some(ConvEngine::Cubecl),
            norm_engine: Some(NormEngine::Ops),
            devices: Some(vec![2, 3]),
            collective: Some(Collective::Host),
            launch: None,
        };
        let s = Cli::parse_from(["x", "--backend", "cpu"])
            .compute
            .settings_with(&file);
        assert_eq!(
            (s.precision, s.layout, s.conv_engine, s.norm_engine),
            (
                Some(Precision::Bf16),
                Layout::Ndhwc,
                ConvEngine::Cubecl,
                NormEngine::Ops
            )
        );
        let cli = Cli::parse_from([
            "x",
            "--backend",
            "cpu",
            "--layout",
            "ncdhw",
            "--conv-engine",
            "auto",
        ]);
        let s = cli.compute.settings_with(&file);
        assert_eq!((s.layout, s.conv_engine), (Layout::Ncdhw, ConvEngine::Auto));
        // Nothing asked for: the backend that runs decides (medddpm-backend's tests).
        let s = cli.compute.settings();
        assert_eq!(s.precision, None);
    }

    #[test]
    fn devices_and_collective_fill_the_request() {
        let file = ComputeConfig {
            devices: Some(vec![2, 3]),
            collective: Some(Collective::Host),
            ..Default::default()
        };
        let s = Cli::parse_from(["x"]).compute.settings();
        assert_eq!((s.devices, s.collective), (vec![0], Collective::Auto));
        let s = Cli::parse_from(["x"]).compute.settings_with(&file);
        assert_eq!((s.devices, s.collective), (vec![2, 3], Collective::Host));
        let cli = Cli::parse_from(["x", "--devices", "0,1", "--collective", "nccl"]);
        let s = cli.compute.settings_with(&file);
        assert_eq!((s.devices, s.collective), (vec![0, 1], Collective::Nccl));
        let s = Cli::parse_from(["x", "--devices", "3"]).compute.settings();
        assert_eq!(s.devices, vec![3]);
        assert!(Cli::try_parse_from(["x", "--devices", "0,a"]).is_err());
        assert!(Cli::try_parse_from(["x", "--collective", "mpi"]).is_err());
    }

    #[test]
    fn backends_are_named_as_the_library_names_them() {
        for b in BackendKind::ALL {
            let arg = BackendArg::from_str(b.name(), false).unwrap();
            assert_eq!(BackendKind::from(arg), b);
        }
        assert!(BackendArg::from_str("metal", false).is_err());
        let s = Cli::parse_from(["x"]).compute.settings();
        assert_eq!(s.backend, BackendKind::Auto);
    }
}
