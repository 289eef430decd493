//! Several devices: this process holds the output folder and starts `medddpm synthesize ...
//! --devices D --shard R/W` for each device (this executable again), each making its own
//! share of the work list into its own manifest part; it shows their progress from those
//! parts, names a child that failed with its exit status, and merges the manifest at the end.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};
use medddpm_backend::{BackendKind, ComputeSettings, Launch};
use medddpm_synth::manifest::count_part_lines;
use medddpm_synth::Synthesis;

use crate::progress::SynthProgress;

/// How often the lead reads its children's manifest parts.
const POLL: Duration = Duration::from_millis(500);

/// One child process: its device, rank and process.
struct Started {
    device: usize,
    rank: usize,
    child: Child,
    ended: Option<std::process::ExitStatus>,
}

pub fn run(synthesis: Synthesis, settings: &ComputeSettings) -> anyhow::Result<()> {
    let backend = settings.backend.resolve();
    let cpu_processes = backend == BackendKind::Cpu && settings.launch == Launch::Processes;
    if backend != BackendKind::Cuda && !cpu_processes {
        bail!(
            "--devices {:?}: several devices need the CUDA backend (or, to test the processes, the CPU with --launch processes)",
            settings.devices
        );
    }
    let (_lock, state) = synthesis.begin()?;
    super::say_resumed(&synthesis, state);
    let world = settings.devices.len();
    let count = synthesis.list().count();
    eprintln!(
        "synthesizing {} pair(s) of {count} into {}, one process per device ({:?})",
        count - state.done,
        synthesis.out().display(),
        settings.devices
    );
    let exe = std::env::current_exe()?;
    let mut children = Vec::with_capacity(world);
    for (rank, &device) in settings.devices.iter().enumerate() {
        let args = child_args(std::env::args().skip(1), rank, world, device);
        let child = Command::new(&exe)
            .args(args)
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("starting the process for device {device}"))?;
        children.push(Started {
            device,
            rank,
            child,
            ended: None,
        });
    }
    let mut bar = SynthProgress::new(count as u64, state.done as u64, 1);
    while children.iter().any(|c| c.ended.is_none()) {
        std::thread::sleep(POLL);
        bar.set_pairs((state.done + count_part_lines(synthesis.out())) as u64);
        for c in children.iter_mut().filter(|c| c.ended.is_none()) {
            c.ended = c.child.try_wait().context("watching a child process")?;
        }
    }
    bar.finish();
    let failed: Vec<String> = children
        .iter()
        .filter_map(|c| {
            let status = c.ended.filter(|s| !s.success())?;
            Some(format!(
                "the process of device {} (share {}/{world}) ended with {status}",
                c.device, c.rank
            ))
        })
        .collect();
    let finished = super::finish(&synthesis);
    if !failed.is_empty() {
        bail!(
            "{}; the pairs it finished are kept: run the same command again to make the rest",
            failed.join("; ")
        );
    }
    finished
}

/// A child's command line: this command's own arguments (`args`, after the executable)
/// without `--devices` and `--launch`, then its one device and its share.
fn child_args(
    args: impl Iterator<Item = String>,
    rank: usize,
    world: usize,
    device: usize,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut args = args;
    while let Some(arg) = args.next() {
        if arg == "--devices" || arg == "--launch" {
            args.next();
            continue;
        }
        if arg.starts_with("--devices=") || arg.starts_with("--launch=") {
            continue;
        }
        out.push(arg);
    }
    out.extend([
        "--devices".to_string(),
        device.to_string(),
        "--shard".to_string(),
        format!("{rank}/{world}"),
    ]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_gets_the_command_with_its_device_and_share() {
        let args = "synthesize --checkpoint c --devices 0,1 --masks m --launch=processes --count 4"
            .split(' ')
            .map(String::from);
        assert_eq!(
            child_args(args, 1, 2, 3).join(" "),
            "synthesize --checkpoint c --masks m --count 4 --devices 3 --shard 1/2"
        );
    }
}
