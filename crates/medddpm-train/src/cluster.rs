//! Where this process stands in a run that a cluster launcher started, one process per GPU:
//! its rank, the run's size, its device on its node and where rank 0 listens, read from the
//! environment `torchrun` or Slurm's `srun` gives every process it starts.
//!
//! A run of one process (`WORLD_SIZE=1`, or a Slurm allocation of one task) is not a cluster
//! run: it trains as a plain `medddpm train` does.

use thiserror::Error;

/// The port rank 0 listens on when the launcher names none (Slurm): PyTorch's default
/// `MASTER_PORT`, which cluster firewalls and documentation already know.
pub const DEFAULT_RENDEZVOUS_PORT: u16 = 29500;

/// Which launcher's environment the place was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    /// `torchrun` (also `torch.distributed.launch` and anything else that sets `RANK`,
    /// `WORLD_SIZE`, `MASTER_ADDR` and `MASTER_PORT`).
    Torchrun,
    /// A Slurm job step started by `srun`.
    Slurm,
    /// `medddpm train --nnodes N --node-rank R --rdzv HOST:PORT` on each machine, which starts
    /// that machine's ranks itself with torchrun's variables set.
    Manual,
}

impl std::fmt::Display for Launcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Launcher::Torchrun => "torchrun",
            Launcher::Slurm => "Slurm (srun)",
            Launcher::Manual => "manual launch",
        })
    }
}

/// This process's place in a run of one process per GPU across one or more machines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterPlace {
    /// The process's rank in the run (0 reads and writes the run folder).
    pub rank: usize,
    /// Processes in the run.
    pub world: usize,
    /// Its rank among the processes of its machine: which of the machine's GPUs it takes.
    pub local_rank: usize,
    /// Processes on its machine.
    pub local_world: usize,
    /// Where rank 0 listens for the others (`host:port`).
    pub rendezvous: String,
    /// The launcher whose environment said so.
    pub launcher: Launcher,
}

/// An environment that names a cluster run but cannot be followed.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ClusterError {
    /// A variable the launcher sets is missing.
    #[error("{launcher} started this process ({present} is set) but {missing} is not set")]
    Missing {
        /// The launcher the other variables name.
        launcher: Launcher,
        /// A variable that is set.
        present: &'static str,
        /// The one that is missing.
        missing: &'static str,
    },
    /// A variable does not read.
    #[error("{name}={value:?} is not {what}")]
    Unreadable {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
        /// What it should be.
        what: &'static str,
    },
    /// The numbers contradict each other.
    #[error("{0}")]
    Inconsistent(String),
}

impl ClusterPlace {
    /// The place the launcher's environment gives (`var` reads one variable), `None` when no
    /// launcher started a run of several processes. `port` is rank 0's port where the
    /// launcher names none (Slurm). torchrun's variables win over Slurm's: `torchrun` inside a
    /// Slurm allocation sets its own.
    pub fn from_env(
        var: &dyn Fn(&str) -> Option<String>,
        port: u16,
    ) -> Result<Option<Self>, ClusterError> {
        // Both, so that a stray `RANK` of another tool does not make a plain run a cluster's.
        let place = if var("RANK").is_some() && var("WORLD_SIZE").is_some() {
            Self::torchrun(var)?
        } else if var("SLURM_PROCID").is_some() && var("SLURM_STEP_ID").is_some() {
            Self::slurm(var, port)?
        } else {
            return Ok(None);
        };
        if place.world < 2 {
            return Ok(None);
        }
        place.check()?;
        Ok(Some(place))
    }

    fn torchrun(var: &dyn Fn(&str) -> Option<String>) -> Result<Self, ClusterError> {
        let need = need(var, Launcher::Torchrun, "RANK");
        let world = number("WORLD_SIZE", &need("WORLD_SIZE")?)?;
        let addr = need("MASTER_ADDR")?;
        let port = number("MASTER_PORT", &need("MASTER_PORT")?)?;
        Ok(Self {
            rank: number("RANK", &need("RANK")?)?,
            world,
            local_rank: optional_number(var, "LOCAL_RANK")?.unwrap_or(0),
            local_world: optional_number(var, "LOCAL_WORLD_SIZE")?.unwrap_or(world),
            rendezvous: host_port(&addr, port),
            launcher: Launcher::Torchrun,
        })
    }

    fn slurm(var: &dyn Fn(&str) -> Option<String>, port: u16) -> Result<Self, ClusterError> {
        let need = need(var, Launcher::Slurm, "SLURM_PROCID");
        let world = number("SLURM_NTASKS", &need("SLURM_NTASKS")?)?;
        let nodes = var("SLURM_STEP_NODELIST")
            .map(Ok)
            .unwrap_or_else(|| need("SLURM_JOB_NODELIST"))?;
        let host = first_host(&nodes).ok_or_else(|| ClusterError::Unreadable {
            name: "SLURM_JOB_NODELIST",
            value: nodes.clone(),
            what: "a Slurm host list (e.g. `gpu[01-04],gpu07`)",
        })?;
        let local_world = match var("SLURM_NTASKS_PER_NODE") {
            // `2(x3)` or `2,1`: the first node's count is the common case's count.
            Some(v) => number(
                "SLURM_NTASKS_PER_NODE",
                v.split(['(', ',']).next().unwrap_or(""),
            )?,
            None => world,
        };
        let port = match var("MASTER_PORT") {
            Some(v) => number("MASTER_PORT", &v)?,
            None => usize::from(port),
        };
        Ok(Self {
            rank: number("SLURM_PROCID", &need("SLURM_PROCID")?)?,
            world,
            local_rank: number("SLURM_LOCALID", &need("SLURM_LOCALID")?)?,
            local_world,
            rendezvous: host_port(&host, port),
            launcher: Launcher::Slurm,
        })
    }

    fn check(&self) -> Result<(), ClusterError> {
        if self.rank >= self.world {
            return Err(ClusterError::Inconsistent(format!(
                "{}: rank {} of a run of {} processes (ranks start at 0)",
                self.launcher, self.rank, self.world
            )));
        }
        if self.local_rank >= self.local_world.max(1) {
            return Err(ClusterError::Inconsistent(format!(
                "{}: local rank {} of {} processes on this machine",
                self.launcher, self.local_rank, self.local_world
            )));
        }
        Ok(())
    }

    /// Whether rank 0 is on a machine that can only be this one (a loopback address).
    pub fn loopback(&self) -> bool {
        let host = self.rendezvous.rsplit_once(':').map_or("", |(h, _)| h);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }
}

/// A reader of the variables `launcher` sets, each required, naming `present` when one is
/// missing.
fn need<'a>(
    var: &'a dyn Fn(&str) -> Option<String>,
    launcher: Launcher,
    present: &'static str,
) -> impl Fn(&'static str) -> Result<String, ClusterError> + 'a {
    move |name| {
        var(name).ok_or(ClusterError::Missing {
            launcher,
            present,
            missing: name,
        })
    }
}

fn number(name: &'static str, value: &str) -> Result<usize, ClusterError> {
    value.trim().parse().map_err(|_| ClusterError::Unreadable {
        name,
        value: value.to_string(),
        what: "a whole number",
    })
}

fn optional_number(
    var: &dyn Fn(&str) -> Option<String>,
    name: &'static str,
) -> Result<Option<usize>, ClusterError> {
    var(name).map(|v| number(name, &v)).transpose()
}

/// `host:port`, an IPv6 address in brackets.
fn host_port(host: &str, port: usize) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The first host of a Slurm host list: `gpu[01-04,07],cpu3` -> `gpu01`.
pub fn first_host(list: &str) -> Option<String> {
    let list = list.trim();
    let end = list.find([',', '[']).unwrap_or(list.len());
    let prefix = &list[..end];
    if list[end..].starts_with('[') {
        let inside = &list[end + 1..list[end..].find(']')? + end];
        let first = inside.split(',').next()?.split('-').next()?;
        if prefix.is_empty() || first.is_empty() {
            return None;
        }
        return Some(format!("{prefix}{first}"));
    }
    (!prefix.is_empty()).then(|| prefix.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    #[test]
    fn torchrun_s_variables_give_the_place() {
        let var = env(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_RANK", "3"),
            ("LOCAL_WORLD_SIZE", "4"),
            ("MASTER_ADDR", "node07"),
            ("MASTER_PORT", "29400"),
            // Slurm's, inside the same allocation: torchrun's win.
            ("SLURM_PROCID", "0"),
            ("SLURM_STEP_ID", "0"),
        ]);
        let place = ClusterPlace::from_env(&var, 1).unwrap().unwrap();
        assert_eq!(
            place,
            ClusterPlace {
                rank: 3,
                world: 8,
                local_rank: 3,
                local_world: 4,
                rendezvous: "node07:29400".into(),
                launcher: Launcher::Torchrun,
            }
        );
        assert!(!place.loopback());
    }

    #[test]
    fn slurm_s_variables_give_the_place_and_the_first_host() {
        let var = env(&[
            ("SLURM_PROCID", "5"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NTASKS_PER_NODE", "4(x2)"),
            ("SLURM_JOB_NODELIST", "gpu[12-13]"),
        ]);
        let place = ClusterPlace::from_env(&var, 29500).unwrap().unwrap();
        assert_eq!(
            (place.rank, place.world, place.local_rank, place.local_world),
            (5, 8, 1, 4)
        );
        assert_eq!(place.rendezvous, "gpu12:29500");
        assert_eq!(place.launcher, Launcher::Slurm);
    }

    #[test]
    fn one_process_or_no_launcher_is_a_plain_run() {
        assert_eq!(ClusterPlace::from_env(&env(&[]), 29500), Ok(None));
        assert_eq!(
            ClusterPlace::from_env(&env(&[("RANK", "3")]), 29500),
            Ok(None)
        );
        let single = env(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "1"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29500"),
        ]);
        assert_eq!(ClusterPlace::from_env(&single, 29500), Ok(None));
        // An sbatch script itself (no job step): not a rank of anything.
        let batch = env(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_JOB_NODELIST", "a[1-2]"),
        ]);
        assert_eq!(ClusterPlace::from_env(&batch, 29500), Ok(None));
    }

    #[test]
    fn a_broken_environment_is_named() {
        let no_addr = env(&[("RANK", "1"), ("WORLD_SIZE", "2"), ("MASTER_PORT", "1")]);
        let e = ClusterPlace::from_env(&no_addr, 1).unwrap_err();
        assert_eq!(
            e.to_string(),
            "torchrun started this process (RANK is set) but MASTER_ADDR is not set"
        );
        let bad = env(&[
            ("RANK", "x"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "1"),
        ]);
        assert!(ClusterPlace::from_env(&bad, 1)
            .unwrap_err()
            .to_string()
            .contains("RANK=\"x\" is not a whole number"));
        let beyond = env(&[
            ("RANK", "2"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "1"),
        ]);
        assert!(matches!(
            ClusterPlace::from_env(&beyond, 1),
            Err(ClusterError::Inconsistent(_))
        ));
    }

    #[test]
    fn slurm_host_lists_give_their_first_host() {
        assert_eq!(first_host("gpu[01-04,07],cpu3").as_deref(), Some("gpu01"));
        assert_eq!(first_host("node5,node6").as_deref(), Some("node5"));
        assert_eq!(first_host("single").as_deref(), Some("single"));
        assert_eq!(first_host("rack1-n[3,5]").as_deref(), Some("rack1-n3"));
        assert_eq!(first_host(""), None);
        assert_eq!(first_host("[1-2]"), None);
    }

    #[test]
    fn loopback_addresses_are_known() {
        let mut place = ClusterPlace {
            rank: 0,
            world: 2,
            local_rank: 0,
            local_world: 2,
            rendezvous: "127.0.0.1:1".into(),
            launcher: Launcher::Torchrun,
        };
        assert!(place.loopback());
        place.rendezvous = "[::1]:5".into();
        assert!(place.loopback());
        place.rendezvous = "localhost:5".into();
        assert!(place.loopback());
        place.rendezvous = "10.0.0.1:5".into();
        assert!(!place.loopback());
    }
}
