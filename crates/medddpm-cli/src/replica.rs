//! The replica processes of a multi-device run (`--launch processes`): how the lead starts
//! them (this executable again, with the hidden `replica` command) and what that command does.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use clap::Args;
use medddpm_backend::{
    run_on, BackendTask, Collective, ComputeSettings, KernelAutodiffBackend, Launch, RunEnv,
};
use medddpm_train::{train_replica, LaunchedReplica, ReplicaLauncher, ReplicaSpec};

/// The environment variable that carries the run's token to a replica (not its command line,
/// which other users of the machine can read).
const TOKEN_VAR: &str = "MEDDDPM_REPLICA_TOKEN";

/// Starts each replica as `medddpm replica ...` with the lead's resolved compute settings.
pub struct SelfLauncher {
    env: RunEnv,
    tune_cache: Option<PathBuf>,
}

impl SelfLauncher {
    /// Replicas computing as `env` says; `tune_cache` is the `--tune-cache` given, if any.
    pub fn new(env: &RunEnv, tune_cache: Option<PathBuf>) -> Self {
        Self {
            env: env.clone(),
            tune_cache,
        }
    }

    fn args(&self, spec: &ReplicaSpec) -> Vec<String> {
        let (e, c) = (&self.env, &spec.compute);
        let mut args: Vec<String> = [
            "replica",
            "--lead",
            &spec.lead,
            "--rank",
            &spec.rank.to_string(),
            "--world",
            &spec.world.to_string(),
            "--backend",
            e.backend.name(),
            "--devices",
            &spec.device.to_string(),
            "--precision",
            &c.precision.to_string(),
            "--layout",
            &c.layout.to_string(),
            "--conv-engine",
            &c.conv_engine.to_string(),
            "--norm-engine",
            &c.norm_engine.to_string(),
        ]
        .map(String::from)
        .to_vec();
        if let Some(dir) = &self.tune_cache {
            args.push("--tune-cache".into());
            args.push(dir.display().to_string());
        }
        args
    }
}

impl ReplicaLauncher for SelfLauncher {
    fn launch(&self, spec: &ReplicaSpec) -> std::io::Result<Box<dyn LaunchedReplica>> {
        let child = Command::new(std::env::current_exe()?)
            .args(self.args(spec))
            .env(TOKEN_VAR, &spec.token)
            .stdin(Stdio::null())
            .spawn()?;
        Ok(Box::new(child))
    }
}

/// `medddpm replica`: one replica of a multi-device run, started by its lead.
#[derive(Debug, Args)]
pub struct ReplicaArgs {
    /// The lead's address.
    #[arg(long)]
    lead: String,
    /// This replica's rank (1..world).
    #[arg(long)]
    rank: usize,
    /// Replicas in the run, the lead included.
    #[arg(long)]
    world: usize,
    #[command(flatten)]
    compute: crate::compute_args::ComputeArgs,
}

/// The replica's part of the run, once its backend is up; it computes as its command line
/// said (the lead's resolved settings, through the backend's set-up as any command's).
struct ReplicaTask {
    rank: usize,
    world: usize,
    device: usize,
    lead: String,
    token: String,
}

impl BackendTask for ReplicaTask {
    type Output = ();
    type Error = anyhow::Error;
    fn run<B: KernelAutodiffBackend>(self, device: B::Device, env: &RunEnv) -> anyhow::Result<()> {
        let spec = ReplicaSpec {
            rank: self.rank,
            world: self.world,
            device: self.device,
            lead: self.lead,
            token: self.token,
            compute: env.compute(),
        };
        Ok(train_replica::<B>(&spec, &device)?)
    }
}

pub fn run(args: ReplicaArgs) -> anyhow::Result<()> {
    let token = std::env::var(TOKEN_VAR).map_err(|_| {
        anyhow::anyhow!("`medddpm replica` is started by `medddpm train --launch processes`, which sets {TOKEN_VAR}")
    })?;
    // The lead decides when the run stops (a Ctrl-C or a scheduler signals the whole group).
    crate::signals::ignore_stop_signals();
    // One device; `processes` lets the CPU backend take an index other than 0 (each CPU
    // process is its own device).
    let settings = ComputeSettings {
        show_tuning: false,
        // The lead wrote the shipped tuning results for every device of the run, or was told
        // not to.
        shipped_tuning: false,
        collective: Collective::Host,
        launch: Launch::Processes,
        ..args.compute.settings()
    };
    let device = match settings.devices.as_slice() {
        [d] => *d,
        other => anyhow::bail!("a replica runs on one device, not {other:?}"),
    };
    let task = ReplicaTask {
        rank: args.rank,
        world: args.world,
        device,
        lead: args.lead,
        token,
    };
    run_on(&settings, task)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        command: Sub,
    }

    #[derive(clap::Subcommand)]
    enum Sub {
        Replica(ReplicaArgs),
    }

    #[test]
    fn a_replicas_command_line_parses_back_to_the_leads_settings() {
        let env = RunEnv {
            backend: medddpm_backend::BackendKind::Cuda,
            precision: medddpm_backend::Precision::Bf16,
            layout: medddpm_backend::Layout::Ndhwc,
            conv_engine: medddpm_backend::ConvEngine::Cudnn,
            norm_engine: medddpm_backend::NormEngine::Kernel,
            tune_cache: None,
            tuned_before: 0,
            devices: vec![2, 5],
            collective: Collective::Nccl,
            launch: Launch::Processes,
        };
        let spec = ReplicaSpec {
            rank: 1,
            world: 2,
            device: 5,
            lead: "127.0.0.1:4000".into(),
            token: "secret".into(),
            compute: env.compute(),
        };
        let launcher = SelfLauncher::new(&env, Some("/tmp/tune".into()));
        let args = launcher.args(&spec);
        assert!(!args.iter().any(|a| a.contains("secret")), "{args:?}");
        let cli = Cli::parse_from(std::iter::once("medddpm".to_string()).chain(args));
        let Sub::Replica(r) = cli.command;
        let s = r.compute.settings();
        assert_eq!((r.rank, r.world, r.lead.as_str()), (1, 2, "127.0.0.1:4000"));
        assert_eq!(s.devices, vec![5]);
        assert_eq!(
            (
                s.backend,
                s.precision,
                s.layout,
                s.conv_engine,
                s.norm_engine
            ),
            (
                env.backend,
                Some(env.precision),
                env.layout,
                env.conv_engine,
                env.norm_engine
            )
        );
        assert_eq!(s.tune_cache, Some(PathBuf::from("/tmp/tune")));
    }
}
