//! `medddpm`: train Med-DDPM models, sample synthetic MRI from masks, inspect files.

mod backend;
mod experiments;
mod inspect;
mod progress;
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
    /// Print a NIfTI header, a resolved experiment config, or a checkpoint summary.
    Inspect(inspect::InspectArgs),
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Train(args) => train::run(args),
        Command::Sample(args) => sample::run(args),
        Command::Inspect(args) => inspect::run(args),
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
