//! `medddpm train --nnodes N --node-rank R --rdzv HOST:PORT`: a run across machines launched by
//! hand, one such command per machine, each starting its machine's ranks itself as `torchrun`
//! would: one process per listed device, this executable again with torchrun's variables set
//! (`RANK` = R x local devices + i, `WORLD_SIZE` = N x local devices, `LOCAL_RANK` = i,
//! `LOCAL_WORLD_SIZE`, `MASTER_ADDR` and `MASTER_PORT` from `--rdzv`), so that each trains as a
//! rank a launcher started (`cluster`). This process waits for them, forwards SIGINT and SIGTERM
//! to them, and when one fails stops the others and ends naming it (docs/distributed.md,
//! "Several machines").

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use medddpm_train::{ClusterPlace, Launcher};

/// How often the ranks are looked at.
const POLL: Duration = Duration::from_millis(100);

/// How long the other ranks of this machine have, after one failed, to end on their own (rank
/// 0 stops the run at its next meeting; a SIGTERM asks rank 0, if it is here, to checkpoint)
/// before they are killed.
const GRACE: Duration = Duration::from_secs(30);

/// The variables a launcher sets for each process it starts: with one of them already set, this
/// process is a rank already and must not start ranks of its own.
const LAUNCHED: [&str; 3] = ["RANK", "WORLD_SIZE", "LOCAL_RANK"];

/// This machine's part of a manual launch, its flags checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManualLaunch {
    /// Machines in the run (`--nnodes`).
    pub nnodes: usize,
    /// This machine's place among them (`--node-rank`); node 0 holds rank 0.
    pub node_rank: usize,
    /// Rank 0's host (`--rdzv`), an IPv6 address without its brackets.
    pub host: String,
    /// Rank 0's port.
    pub port: u16,
}

impl ManualLaunch {
    /// The launch the flags ask for, `None` when none of them is given; `var` reads the
    /// environment, which must not be a launcher's already.
    pub fn from_flags(
        nnodes: Option<usize>,
        node_rank: Option<usize>,
        rdzv: Option<&str>,
        var: &dyn Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Option<Self>> {
        let (nnodes, node_rank) = match (nnodes, node_rank, rdzv) {
            (None, None, None) => return Ok(None),
            (None, _, _) => bail!(
                "--node-rank and --rdzv belong to a manual launch across machines: give --nnodes \
                 (the number of machines) with them"
            ),
            (Some(_), None, _) => bail!(
                "--nnodes without --node-rank: give each machine its place, --node-rank 0 on the \
                 machine of rank 0 (the one --rdzv names), 1..N-1 on the others"
            ),
            (Some(n), Some(r), _) => (n, r),
        };
        if nnodes == 0 {
            bail!("--nnodes 0: a run needs at least one machine");
        }
        if node_rank >= nnodes {
            bail!(
                "--node-rank {node_rank} with --nnodes {nnodes}: node ranks run from 0 to {}",
                nnodes - 1
            );
        }
        let Some(rdzv) = rdzv else {
            bail!(
                "--nnodes needs --rdzv HOST:PORT, the same on every machine: where rank 0 (on \
                 the machine of --node-rank 0) listens for the others"
            );
        };
        let (host, port) = host_port(rdzv)?;
        refuse_a_launcher(var)?;
        Ok(Some(Self {
            nnodes,
            node_rank,
            host,
            port,
        }))
    }

    /// The place of this machine's rank `local_rank` of `local_world`.
    pub fn place(&self, local_rank: usize, local_world: usize) -> ClusterPlace {
        let host = match self.host.contains(':') {
            true => format!("[{}]", self.host),
            false => self.host.clone(),
        };
        ClusterPlace {
            rank: self.node_rank * local_world + local_rank,
            world: self.nnodes * local_world,
            local_rank,
            local_world,
            rendezvous: format!("{host}:{}", self.port),
            launcher: Launcher::Manual,
        }
    }

    /// torchrun's variables for the rank at `place`.
    fn variables(&self, place: &ClusterPlace) -> [(&'static str, String); 6] {
        [
            ("RANK", place.rank.to_string()),
            ("WORLD_SIZE", place.world.to_string()),
            ("LOCAL_RANK", place.local_rank.to_string()),
            ("LOCAL_WORLD_SIZE", place.local_world.to_string()),
            ("MASTER_ADDR", self.host.clone()),
            ("MASTER_PORT", self.port.to_string()),
        ]
    }
}

/// `--rdzv`'s host (brackets of an IPv6 address removed) and port.
fn host_port(rdzv: &str) -> anyhow::Result<(String, u16)> {
    let Some((host, port)) = rdzv.rsplit_once(':') else {
        bail!("--rdzv {rdzv:?} has no port: write HOST:PORT, e.g. node01:29500");
    };
    let bracketed = host.starts_with('[') && host.ends_with(']');
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        bail!("--rdzv {rdzv:?} has no host: write HOST:PORT, e.g. node01:29500");
    }
    if host.contains(':') && !bracketed {
        bail!("--rdzv {rdzv:?}: write an IPv6 address in brackets, e.g. [fd00::1]:29500");
    }
    match port.parse::<u16>() {
        Ok(port) if port > 0 => Ok((host.to_string(), port)),
        _ => bail!("--rdzv {rdzv:?}: {port:?} is not a port (1-65535)"),
    }
}

/// An error when a launcher (torchrun, Slurm's `srun` of several tasks) already started this
/// process as one rank of a run.
fn refuse_a_launcher(var: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<()> {
    let already = |what: String| {
        anyhow::anyhow!(
            "--nnodes, --node-rank and --rdzv start this machine's ranks, but {what}: give either \
             the launcher or the flags (docs/distributed.md, \"Several machines\")"
        )
    };
    if let Some(name) = LAUNCHED.into_iter().find(|name| var(name).is_some()) {
        return Err(already(format!(
            "{name} is set: a launcher (torchrun) started this process as a rank already"
        )));
    }
    match ClusterPlace::from_env(var, medddpm_train::cluster::DEFAULT_RENDEZVOUS_PORT) {
        Ok(None) => Ok(()),
        Ok(Some(place)) => Err(already(format!(
            "{} started this process as rank {} of {}",
            place.launcher, place.rank, place.world
        ))),
        Err(e) => Err(already(format!("a launcher's variables are set ({e})"))),
    }
}

/// One rank this machine started.
struct Rank {
    place: ClusterPlace,
    device: usize,
    child: Child,
    ended: Option<ExitStatus>,
}

impl Rank {
    fn name(&self) -> String {
        format!(
            "local rank {} (rank {} of {}, device {})",
            self.place.local_rank, self.place.rank, self.place.world, self.device
        )
    }

    /// Sends `signal` to the rank's process while it runs.
    fn signal(&self, signal: i32) {
        if self.ended.is_none() {
            // SAFETY: sends a signal to a child this process started and has not reaped.
            unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
        }
    }
}

/// Starts this machine's ranks, one per device of `devices`, waits for them and ends as they
/// did: the first that failed named, or stopped by the signal forwarded to them.
pub fn run(launch: &ManualLaunch, devices: &[usize]) -> anyhow::Result<()> {
    let local_world = devices.len();
    if local_world == 0 {
        bail!("--nnodes: no devices to start ranks on (give --devices)");
    }
    let first = launch.place(0, local_world);
    if first.world > 1 {
        // Checked here, once, rather than in every rank (which inherit it).
        crate::cluster::token(&first)?;
    }
    eprintln!(
        "node {} of {}: starting ranks {}..{} of {} on devices {devices:?}, rank 0 at {}",
        launch.node_rank,
        launch.nnodes,
        first.rank,
        first.rank + local_world - 1,
        first.world,
        first.rendezvous
    );
    // A first SIGINT / SIGTERM is forwarded to the ranks; a second ends this process at once,
    // and its ranks with it (their parent-death signal).
    crate::signals::catch_stop_signals();
    let exe = std::env::current_exe().context("finding this executable to start the ranks")?;
    let args = child_args(std::env::args().skip(1));
    let mut ranks = Vec::with_capacity(local_world);
    for (local_rank, &device) in devices.iter().enumerate() {
        let place = launch.place(local_rank, local_world);
        match start(&exe, &args, &launch.variables(&place)) {
            Ok(child) => ranks.push(Rank {
                place,
                device,
                child,
                ended: None,
            }),
            Err(e) => {
                stop(&mut ranks, Duration::ZERO);
                return Err(e).with_context(|| {
                    format!("starting local rank {local_rank} (rank {})", place.rank)
                });
            }
        }
    }
    watch(&mut ranks)
}

/// A rank: `exe` with `args` and the launcher's `variables`, in a process group of its own (a
/// Ctrl-C at the terminal reaches it once, forwarded by this process) and, on Linux, killed
/// when this process dies.
fn start(exe: &Path, args: &[String], variables: &[(&str, String)]) -> std::io::Result<Child> {
    let mut command = Command::new(exe);
    command
        .args(args)
        .envs(variables.iter().map(|(k, v)| (*k, v)))
        .stdin(Stdio::null());
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        command.process_group(0);
        #[cfg(target_os = "linux")]
        {
            let parent = std::process::id() as libc::pid_t;
            // SAFETY: the closure runs between fork and exec and makes only async-signal-safe
            // system calls (prctl, getppid).
            unsafe {
                command.pre_exec(move || {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    // This process may have died before the call: the rank must not run on.
                    match libc::getppid() == parent {
                        true => Ok(()),
                        false => Err(std::io::Error::from_raw_os_error(libc::ESRCH)),
                    }
                })
            };
        }
    }
    command.spawn()
}

/// Waits for every rank: forwards the first signal this process receives, stops the others
/// when one fails, and ends as they did.
fn watch(ranks: &mut [Rank]) -> anyhow::Result<()> {
    let mut forwarded = None;
    let mut failed: Vec<String> = Vec::new();
    let mut stopping: Option<Instant> = None;
    while ranks.iter().any(|r| r.ended.is_none()) {
        std::thread::sleep(POLL);
        if let (None, Some(signal)) = (forwarded, crate::signals::received()) {
            ranks.iter().for_each(|r| r.signal(signal));
            forwarded = Some(signal);
        }
        for rank in ranks.iter_mut().filter(|r| r.ended.is_none()) {
            let Some(status) = rank.child.try_wait().context("watching a rank's process")? else {
                continue;
            };
            rank.ended = Some(status);
            if !status.success() && stopped_by(status).is_none() {
                failed.push(format!("{} ended with {status}", rank.name()));
            }
        }
        match stopping {
            None if !failed.is_empty() => {
                ranks.iter().for_each(|r| r.signal(libc::SIGTERM));
                stopping = Some(Instant::now());
            }
            Some(since) if since.elapsed() > GRACE => stop(ranks, Duration::ZERO),
            _ => {}
        }
    }
    if !failed.is_empty() {
        let others = match ranks.len() {
            1 => "",
            _ => " (the other ranks of this machine were stopped)",
        };
        bail!("{}{others}", failed.join("; "));
    }
    let mut stopped = ranks.iter().filter_map(|r| r.ended.and_then(stopped_by));
    match forwarded.or_else(|| stopped.next()) {
        Some(signal) => Err(crate::signals::StoppedBySignal(signal).into()),
        None => Ok(()),
    }
}

/// The signal a rank's clean stop ended it with (its exit status 128 + SIGINT or SIGTERM).
fn stopped_by(status: ExitStatus) -> Option<i32> {
    let signal = status.code()? - 128;
    [libc::SIGINT, libc::SIGTERM]
        .contains(&signal)
        .then_some(signal)
}

/// Kills the ranks still running after `wait`, and reaps them.
fn stop(ranks: &mut [Rank], wait: Duration) {
    std::thread::sleep(wait);
    for rank in ranks.iter_mut().filter(|r| r.ended.is_none()) {
        let _ = rank.child.kill();
        rank.ended = rank.child.wait().ok();
    }
}

/// A rank's command line: this command's own arguments (`args`, after the executable) without
/// the manual launch's flags, then `--manual-rank`, which names the launch in its logs.
fn child_args(args: impl Iterator<Item = String>) -> Vec<String> {
    const FLAGS: [&str; 3] = ["--nnodes", "--node-rank", "--rdzv"];
    let mut out = Vec::new();
    let mut args = args;
    while let Some(arg) = args.next() {
        if FLAGS.contains(&arg.as_str()) {
            args.next();
            continue;
        }
        if FLAGS.iter().any(|f| arg.starts_with(&format!("{f}="))) {
            continue;
        }
        out.push(arg);
    }
    out.push("--manual-rank".into());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    fn flags(
        nnodes: Option<usize>,
        node_rank: Option<usize>,
        rdzv: Option<&str>,
    ) -> anyhow::Result<Option<ManualLaunch>> {
        ManualLaunch::from_flags(nnodes, node_rank, rdzv, &env(&[]))
    }

    fn refused(result: anyhow::Result<Option<ManualLaunch>>, says: &str) {
        let e = result.unwrap_err().to_string();
        assert!(e.contains(says), "{e}");
    }

    #[test]
    fn the_flags_give_each_local_rank_its_place() {
        assert_eq!(flags(None, None, None).unwrap(), None);
        let launch = flags(Some(3), Some(1), Some("node01:29400"))
            .unwrap()
            .unwrap();
        let place = launch.place(1, 4);
        assert_eq!(
            (place.rank, place.world, place.local_rank, place.local_world),
            (5, 12, 1, 4)
        );
        assert_eq!(place.rendezvous, "node01:29400");
        assert_eq!(place.launcher, Launcher::Manual);
        let vars = launch.variables(&place).map(|(k, v)| format!("{k}={v}"));
        assert_eq!(
            vars.join(" "),
            "RANK=5 WORLD_SIZE=12 LOCAL_RANK=1 LOCAL_WORLD_SIZE=4 MASTER_ADDR=node01 MASTER_PORT=29400"
        );
        // What the rank reads back from those variables is the same place.
        let set: Vec<(String, String)> = vars
            .iter()
            .map(|kv| kv.split_once('=').unwrap())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let read = |name: &str| set.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let back = ClusterPlace::from_env(&read, 1).unwrap().unwrap();
        assert_eq!(
            back,
            ClusterPlace {
                launcher: Launcher::Torchrun,
                ..place
            }
        );
        let v6 = flags(Some(2), Some(0), Some("[fd00::1]:5"))
            .unwrap()
            .unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("fd00::1", 5));
        assert_eq!(v6.place(0, 1).rendezvous, "[fd00::1]:5");
    }

    #[test]
    fn contradicting_flags_are_refused() {
        refused(
            flags(Some(2), Some(2), Some("h:1")),
            "node ranks run from 0 to 1",
        );
        refused(flags(Some(0), Some(0), Some("h:1")), "--nnodes 0");
        refused(
            flags(Some(2), None, Some("h:1")),
            "--nnodes without --node-rank",
        );
        refused(flags(None, Some(1), Some("h:1")), "give --nnodes");
        refused(flags(None, None, Some("h:1")), "give --nnodes");
        refused(
            flags(Some(2), Some(1), None),
            "--nnodes needs --rdzv HOST:PORT",
        );
        refused(flags(Some(2), Some(1), Some("node01")), "has no port");
        refused(flags(Some(2), Some(1), Some(":29500")), "has no host");
        refused(flags(Some(2), Some(1), Some("h:0")), "is not a port");
        refused(flags(Some(2), Some(1), Some("h:http")), "is not a port");
        refused(flags(Some(2), Some(1), Some("fd00::1:5")), "in brackets");
    }

    #[test]
    fn the_flags_under_a_launcher_are_refused() {
        let with = |vars| ManualLaunch::from_flags(Some(2), Some(0), Some("h:1"), &env(vars));
        refused(with(&[("LOCAL_RANK", "0")]), "LOCAL_RANK is set");
        refused(
            with(&[
                ("SLURM_PROCID", "1"),
                ("SLURM_STEP_ID", "0"),
                ("SLURM_NTASKS", "2"),
                ("SLURM_LOCALID", "0"),
                ("SLURM_JOB_NODELIST", "a[1-2]"),
            ]),
            "Slurm (srun) started this process as rank 1 of 2",
        );
        refused(
            with(&[("SLURM_PROCID", "1"), ("SLURM_STEP_ID", "0")]),
            "a launcher's variables are set",
        );
        // An sbatch script itself (no job step) may start a manual launch.
        assert!(with(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "2")]).is_ok());
    }

    #[test]
    fn a_rank_gets_the_command_without_the_launch_s_flags() {
        let args =
            "train --nnodes 2 --devices 0,1 --node-rank=1 --rdzv h:1 --rdzv-port 5 --steps 3"
                .split(' ')
                .map(String::from);
        assert_eq!(
            child_args(args).join(" "),
            "train --devices 0,1 --rdzv-port 5 --steps 3 --manual-rank"
        );
    }

    #[test]
    fn a_clean_stop_is_told_from_a_failure() {
        use std::os::unix::process::ExitStatusExt;
        let code = |c: i32| ExitStatus::from_raw(c << 8);
        assert_eq!(stopped_by(code(128 + libc::SIGTERM)), Some(libc::SIGTERM));
        assert_eq!(stopped_by(code(128 + libc::SIGINT)), Some(libc::SIGINT));
        assert_eq!(stopped_by(code(1)), None);
        assert_eq!(stopped_by(ExitStatus::from_raw(libc::SIGKILL)), None);
    }
}
