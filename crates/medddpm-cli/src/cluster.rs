//! `medddpm train` started by a cluster launcher, one process per GPU (`torchrun --no-python
//! medddpm train ...`, or `srun medddpm train ...` in a Slurm job): rank 0 trains as the lead
//! of a multi-device run, listening for the others at the launcher's rendezvous address; every
//! other rank trains a replica (docs/distributed.md, "Several machines").

use anyhow::{bail, Context};
use medddpm_backend::{BackendTask, ComputeSettings, KernelAutodiffBackend, Launch, RunEnv};
use medddpm_train::{train_cluster_replica, ClusterPlace, ReplicaSpec};

/// The run's secret, the same in every process's environment: a rank presents it to rank 0,
/// which admits no process without it (it listens on the network).
pub const TOKEN_VAR: &str = "MEDDDPM_RDZV_TOKEN";

/// This process's place in a cluster run, if a launcher started one; `port` is rank 0's
/// where the launcher names none (Slurm).
pub fn place(port: u16) -> anyhow::Result<Option<ClusterPlace>> {
    ClusterPlace::from_env(&|name| std::env::var(name).ok(), port)
        .context("reading the cluster launcher's environment")
}

/// The run's token from [`TOKEN_VAR`] (empty counts as not set).
pub fn token(place: &ClusterPlace) -> anyhow::Result<String> {
    match std::env::var(TOKEN_VAR).ok().filter(|t| !t.is_empty()) {
        Some(token) if token.len() >= 16 => Ok(token),
        Some(_) => bail!("{TOKEN_VAR} is shorter than 16 characters: use a random secret, e.g. `export {TOKEN_VAR}=$(openssl rand -hex 16)`"),
        None => bail!(
            "{} started rank {} of {}, but {TOKEN_VAR} is not set: rank 0 listens at {} and \
             admits only processes that know the run's secret; set the same one in every \
             process's environment, e.g. `export {TOKEN_VAR}=$(openssl rand -hex 16)` before \
             the launcher",
            place.launcher,
            place.rank,
            place.world,
            place.rendezvous
        ),
    }
}

/// The settings of this rank: one device (entry `local_rank` of the device list given, the
/// only entry of a list of one, or else the local rank itself), the collective resolved for
/// the whole run.
pub fn settings_for(
    place: &ClusterPlace,
    settings: ComputeSettings,
    listed: bool,
) -> anyhow::Result<ComputeSettings> {
    let device = match settings.devices.as_slice() {
        _ if !listed => place.local_rank,
        [one] => *one,
        many => match many.get(place.local_rank) {
            Some(d) => *d,
            None => bail!(
                "--devices {many:?} names {} devices, but this process is local rank {} of {} \
                 on its machine ({})",
                many.len(),
                place.local_rank,
                place.local_world,
                place.launcher
            ),
        },
    };
    Ok(ComputeSettings {
        devices: vec![device],
        // Lets the CPU backend take an index other than 0, as a replica process does.
        launch: Launch::Processes,
        cluster_world: Some(place.world),
        ..settings
    })
}

/// One line on what this process is in the run.
pub fn describe(place: &ClusterPlace, device: usize) -> String {
    match place.rank {
        0 => format!(
            "rank 0 of {} ({}), device {device}: listening at {} for the other ranks",
            place.world, place.launcher, place.rendezvous
        ),
        r => format!(
            "rank {r} of {} ({}), device {device}: joining rank 0 at {}",
            place.world, place.launcher, place.rendezvous
        ),
    }
}

/// A rank other than 0: a replica of the run, which rank 0 hands the experiment, its weights
/// and Adam's state.
pub struct RankTask {
    /// Its place.
    pub place: ClusterPlace,
    /// The run's token.
    pub token: String,
}

impl BackendTask for RankTask {
    type Output = ();
    type Error = anyhow::Error;
    fn run<B: KernelAutodiffBackend>(self, device: B::Device, env: &RunEnv) -> anyhow::Result<()> {
        let spec = ReplicaSpec {
            rank: self.place.rank,
            world: self.place.world,
            device: env.devices[0],
            lead: self.place.rendezvous.clone(),
            token: self.token,
            compute: env.compute(),
        };
        eprintln!("{}", describe(&self.place, env.devices[0]));
        Ok(train_cluster_replica::<B>(&spec, &device)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use medddpm_train::Launcher;

    fn place(local_rank: usize) -> ClusterPlace {
        ClusterPlace {
            rank: 2 + local_rank,
            world: 4,
            local_rank,
            local_world: 2,
            rendezvous: "node1:29500".into(),
            launcher: Launcher::Torchrun,
        }
    }

    #[test]
    fn each_rank_takes_its_device_and_the_run_s_collective() {
        let with = |devices: Vec<usize>| ComputeSettings {
            devices,
            ..Default::default()
        };
        let s = settings_for(&place(1), with(vec![0]), false).unwrap();
        assert_eq!((s.devices, s.cluster_world), (vec![1], Some(4)));
        assert_eq!(s.launch, Launch::Processes);
        // One GPU visible to each process (Slurm's --gpus-per-task): the list of one.
        let s = settings_for(&place(1), with(vec![0]), true).unwrap();
        assert_eq!(s.devices, vec![0]);
        let s = settings_for(&place(1), with(vec![4, 6]), true).unwrap();
        assert_eq!(s.devices, vec![6]);
        let e = settings_for(&place(1), with(Vec::new()), true);
        assert!(e.is_err());
        let e = settings_for(&place(2), with(vec![4, 6]), true).unwrap_err();
        assert!(e.to_string().contains("local rank 2"), "{e}");
    }
}
