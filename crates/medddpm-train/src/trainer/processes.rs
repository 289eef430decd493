//! A data-parallel run with one process per device, as PyTorch's DDP runs: the lead process
//! (rank 0, the first device) opens the session, starts a replica process for every other
//! device through the caller's [`ReplicaLauncher`], hands each the session's start (the
//! experiment, the weights, Adam's state, NCCL's communicator id), and then every process
//! trains its replica; they meet each step over loopback connections ([`ProcessLink`]) and,
//! on CUDA, average their gradients with one NCCL all-reduce across the processes.
//!
//! Why processes: two replicas driven from one process wait for each other inside the CUDA
//! driver (docs/distributed.md, "Measured"); two processes do not.

use std::path::Path;
use std::time::{Duration, Instant};

use burn::module::Module;
use burn::optim::Optimizer;
use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Recorder};
use medddpm_kernels::{
    nccl_unique_id, Collective, CollectiveBackend, Compute, NcclId, ProcessGroup,
};
use medddpm_unet::{KernelAutodiffBackend, UNet};
use serde::{Deserialize, Serialize};

pub use super::link::ReplicaSpec;
use super::link::{rendezvous_timeout, ProcessLink, Rendezvous, CONNECTION_LOST, CONNECT_TIMEOUT};

use super::parallel::{first_cause, StartPoint, Worker};
use super::session::Session;
use super::shard::Shard;
use super::team::{Link, Team, STOPPED_BY_ANOTHER};
use super::{end_step, lead, open_session, Job, SessionOptions, TrainObserver, TrainSummary};
use crate::checkpoint::RunDir;
use crate::cluster::ClusterPlace;
use crate::integrity::decode_record;
use crate::{ExperimentConfig, TrainError};

/// A replica process the lead started.
pub trait LaunchedReplica: Send {
    /// `Some(why)` once it has ended (its exit status), `None` while it runs.
    fn ended(&mut self) -> Option<String>;
    /// Waits for it to end: `None` when it succeeded, else why not.
    fn wait(&mut self) -> Option<String>;
    /// Ends it now.
    fn kill(&mut self);
}

impl LaunchedReplica for std::process::Child {
    fn ended(&mut self) -> Option<String> {
        match self.try_wait() {
            Ok(Some(status)) => Some(format!("its process ended ({status})")),
            Ok(None) => None,
            Err(e) => Some(format!("its process cannot be watched: {e}")),
        }
    }

    fn wait(&mut self) -> Option<String> {
        match std::process::Child::wait(self) {
            Ok(status) if status.success() => None,
            Ok(status) => Some(format!("its process ended ({status})")),
            Err(e) => Some(format!("its process cannot be watched: {e}")),
        }
    }

    fn kill(&mut self) {
        let _ = std::process::Child::kill(self);
        let _ = std::process::Child::wait(self);
    }
}

/// Starts the replica process that `spec` describes (the binary decides how: `medddpm`
/// runs itself again with the spec on its command line).
pub trait ReplicaLauncher {
    /// Starts replica `spec.rank` on device `spec.device`.
    fn launch(&self, spec: &ReplicaSpec) -> std::io::Result<Box<dyn LaunchedReplica>>;
}

/// What the lead hands every replica before the first step.
#[derive(Debug, Serialize, Deserialize)]
struct Start {
    config_toml: String,
    collective: Collective,
    /// How the lead computes, for ranks that a cluster launcher started: each resolved its
    /// own settings, which must be the same. (A replica the lead started has the lead's on its
    /// command line, and nothing to compare.)
    compute: Option<Compute>,
    /// The step the session stops at.
    end: usize,
    from: StartPoint,
    nccl_id: Option<NcclId>,
}

/// Trains (or resumes) the experiment in `run` on the CUDA (or other) devices `devices`, one
/// process each: this process is the lead on `device` (`devices[0]`) and keeps the EMA, the
/// log and the checkpoints; `launcher` starts the others. The result equals [`super::train_on`]'s
/// on the same devices (the same examples, noise and order of sums).
pub fn train_processes<B: KernelAutodiffBackend>(
    config: &ExperimentConfig,
    run: &RunDir,
    options: &SessionOptions,
    (devices, device): (&[usize], &B::Device),
    launcher: &dyn ReplicaLauncher,
    observer: &mut dyn TrainObserver,
) -> Result<TrainSummary, TrainError> {
    let names: Vec<String> = devices.iter().map(usize::to_string).collect();
    let start = || start_replicas(devices, options.compute, launcher);
    let job = Job {
        config,
        run,
        options,
    };
    lead_processes::<B>(job, (&names, device, false), start, observer)
}

/// Rank 0 of a run whose processes a cluster launcher started (`torchrun`, `srun`): listens
/// at `place.rendezvous` for the other ranks, which present `token`, then trains as the lead
/// of [`train_processes`] does. The other ranks run [`train_cluster_replica`].
pub fn train_cluster_lead<B: KernelAutodiffBackend>(
    config: &ExperimentConfig,
    run: &RunDir,
    options: &SessionOptions,
    (place, token): (&ClusterPlace, &str),
    device: &B::Device,
    observer: &mut dyn TrainObserver,
) -> Result<TrainSummary, TrainError> {
    let mut names = vec![format!("{device:?}")];
    names.extend((1..place.world).map(|r| format!("of rank {r}")));
    let start = || {
        let rendezvous = Rendezvous::bind_at(place, token)
            .map_err(|e| Started::Lead(format!("cannot listen at {}: {e}", place.rendezvous)))?;
        let link = rendezvous
            .accept(rendezvous_timeout(), &mut || None)
            .map_err(|e| Started::Lead(format!("at {}: {e}", place.rendezvous)))?;
        Ok((Replicas(Vec::new()), link))
    };
    let job = Job {
        config,
        run,
        options,
    };
    lead_processes::<B>(job, (&names, device, true), start, observer)
}

/// The lead's part of a run of one process per device, once `start` has its replicas
/// connected; `names[r]` is rank `r`'s device, for errors; `cluster`: the replicas resolved
/// their own compute settings (a cluster launcher started them), which they check against
/// the lead's.
fn lead_processes<B: KernelAutodiffBackend>(
    job: Job<'_>,
    (names, device, cluster): (&[String], &B::Device, bool),
    start: impl FnOnce() -> Result<(Replicas, ProcessLink), Started>,
    observer: &mut dyn TrainObserver,
) -> Result<TrainSummary, TrainError> {
    let world = names.len();
    let (config, options) = (job.config, job.options);
    let shard = Shard::new(&config.train, 0, world)?;
    let s = open_session::<B>(job, device, observer)?;
    let collective = match options.collective {
        Collective::Auto => Collective::Host,
        c => c,
    };
    let lead_error = |message: String| TrainError::Replica {
        rank: 0,
        device: format!("{device:?}"),
        message,
    };
    let (replicas, link) = start().map_err(|e| match e {
        Started::Lead(message) => lead_error(message),
        Started::Replica(e) => e,
    })?;
    observer.message(&format!(
        "{}, one process per device",
        super::parallel::describe(config, &shard, collective)
    ));
    let nccl_id = match collective {
        Collective::Nccl => Some(nccl_unique_id().map_err(|e| lead_error(e.to_string()))?),
        _ => None,
    };
    let start = Start {
        config_toml: config.to_toml(),
        collective,
        compute: cluster.then_some(options.compute),
        end: end_step(config, options, s.state.step),
        from: StartPoint::of(&s.state),
        nccl_id: nccl_id.clone(),
    };
    if let Err(e) = send_start(&link, &start, &s) {
        link.abort("");
        return Err(lead_error(e));
    }
    // Every replica has its weights, Adam state and data before any process enters NCCL's
    // initialisation, which would wait for ever for one that failed.
    if link.all_gather(vec![1]).is_err() {
        return Err(match link.failure() {
            Some((rank, message)) => TrainError::Replica {
                rank,
                device: names[rank].clone(),
                message,
            },
            None => lead_error("a replica process went away before the first step".into()),
        });
    }
    let group = match &nccl_id {
        Some(id) => Some(join::<B>(device, id, 0, world).map_err(|e| {
            link.abort("");
            lead_error(e)
        })?),
        None => None,
    };
    let team = Team::member(
        shard,
        Link::Processes(&link, group.as_ref()),
        collective,
        format!("{device:?}"),
    );
    let out = lead(s, job, device, team, observer);
    if out.is_err() {
        link.abort("");
    }
    let ended = replicas.wait(out.is_err());
    first_cause(out, replica_outcomes(&link, ended, names))
}

/// Why the replicas did not start: the lead's own trouble, or a replica's.
enum Started {
    Lead(String),
    Replica(TrainError),
}

/// Starts a replica process for every device after the first and waits until each has
/// connected.
fn start_replicas(
    devices: &[usize],
    compute: Compute,
    launcher: &dyn ReplicaLauncher,
) -> Result<(Replicas, ProcessLink), Started> {
    let rendezvous = Rendezvous::bind(devices.len())
        .map_err(|e| Started::Lead(format!("cannot listen for replicas: {e}")))?;
    let mut replicas = Replicas(Vec::new());
    for (rank, &index) in devices.iter().enumerate().skip(1) {
        let spec = rendezvous
            .spec(rank, index, compute)
            .map_err(|e| Started::Lead(e.to_string()))?;
        let child = launcher.launch(&spec).map_err(|e| {
            Started::Replica(TrainError::Replica {
                rank,
                device: index.to_string(),
                message: format!("cannot start its process: {e}"),
            })
        })?;
        replicas.0.push(child);
    }
    let link = rendezvous
        .accept(CONNECT_TIMEOUT, &mut || replicas.first_ended())
        .map_err(|e| Started::Lead(format!("starting the replica processes: {e}")))?;
    Ok((replicas, link))
}

/// Each replica's outcome from how its process ended (`ended[i]` is rank `i + 1`'s), the
/// first failing replica's own message first: its exit status says less.
fn replica_outcomes(
    link: &ProcessLink,
    ended: Vec<Option<String>>,
    names: &[String],
) -> Vec<Result<(), TrainError>> {
    let replica_error = |rank: usize, message: String| TrainError::Replica {
        rank,
        device: names[rank].clone(),
        message,
    };
    let mut outs: Vec<Result<(), TrainError>> = ended
        .into_iter()
        .enumerate()
        .map(|(i, why)| match why {
            None => Ok(()),
            Some(why) => Err(replica_error(i + 1, why)),
        })
        .collect();
    if let Some((rank, message)) = link.failure() {
        // A lost connection of a replica whose exit status is known: the status says it.
        let status_known =
            message.starts_with(CONNECTION_LOST) && matches!(outs.get(rank - 1), Some(Err(_)));
        if !message.starts_with(STOPPED_BY_ANOTHER) && !status_known {
            outs.insert(0, Err(replica_error(rank, message)));
        }
    }
    outs
}

/// Sends the start, then the weights and Adam's state, to every replica.
fn send_start<B: KernelAutodiffBackend>(
    link: &ProcessLink,
    start: &Start,
    s: &Session<B>,
) -> Result<(), String> {
    let recorder = NamedMpkBytesRecorder::<FullPrecisionSettings>::new();
    let json = serde_json::to_vec(start).map_err(|e| e.to_string())?;
    let model = Recorder::<B>::record(&recorder, s.model.clone().into_record(), ())
        .map_err(|e| format!("encoding the weights: {e}"))?;
    let optim = Recorder::<B>::record(&recorder, s.optim.to_record(), ())
        .map_err(|e| format!("encoding Adam's state: {e}"))?;
    for bytes in [json, model, optim] {
        link.broadcast(bytes)
            .map_err(|_| "a replica process went away before the first step".to_string())?;
    }
    Ok(())
}

/// Joins NCCL's communicator across the processes.
fn join<B: KernelAutodiffBackend>(
    device: &B::Device,
    id: &NcclId,
    rank: usize,
    world: usize,
) -> Result<ProcessGroup, String> {
    let timeout = super::link::meeting_timeout();
    <B::InnerBackend as CollectiveBackend>::join_process_group(device, id, (rank, world), timeout)
        .map_err(|e| format!("joining NCCL's communicator: {e}"))
}

/// Replica `spec.rank` of a run whose lead is at `spec.lead`, on `device`: its optimizer steps
/// to the lead's end. An error is also sent to the lead, whose run then stops with it.
pub fn train_replica<B: KernelAutodiffBackend>(
    spec: &ReplicaSpec,
    device: &B::Device,
) -> Result<(), TrainError> {
    replica_of::<B>(spec, device, Duration::ZERO)
}

/// [`train_replica`] for a rank that a cluster launcher started beside rank 0: it waits up
/// to `MEDDDPM_RDZV_TIMEOUT` (default ten minutes) for rank 0 to listen at `spec.lead`.
pub fn train_cluster_replica<B: KernelAutodiffBackend>(
    spec: &ReplicaSpec,
    device: &B::Device,
) -> Result<(), TrainError> {
    replica_of::<B>(spec, device, rendezvous_timeout())
}

fn replica_of<B: KernelAutodiffBackend>(
    spec: &ReplicaSpec,
    device: &B::Device,
    patience: Duration,
) -> Result<(), TrainError> {
    let link = ProcessLink::connect(spec, patience).map_err(|e| {
        replica_error(spec, device)(format!("cannot reach the lead at {}: {e}", spec.lead))
    })?;
    let out = replica_session::<B>(&link, spec, device);
    match &out {
        // The lead names the replica and its device itself.
        Err(TrainError::Replica { message, .. }) => link.abort(message),
        Err(e) => link.abort(&e.to_string()),
        Ok(()) => {}
    }
    out
}

/// The error of replica `spec.rank` on `device`, from its message.
fn replica_error<D: std::fmt::Debug>(
    spec: &ReplicaSpec,
    device: &D,
) -> impl Fn(String) -> TrainError {
    let (rank, device) = (spec.rank, format!("{device:?}"));
    move |message| TrainError::Replica {
        rank,
        device: device.clone(),
        message,
    }
}

fn replica_session<B: KernelAutodiffBackend>(
    link: &ProcessLink,
    spec: &ReplicaSpec,
    device: &B::Device,
) -> Result<(), TrainError> {
    let error = replica_error(spec, device);
    let lost = |_| {
        error(format!(
            "{STOPPED_BY_ANOTHER} stopped before the first step"
        ))
    };
    let start: Start = serde_json::from_slice(&link.broadcast(Vec::new()).map_err(lost)?)
        .map_err(|e| error(format!("the lead's start does not read: {e}")))?;
    let model_bytes = link.broadcast(Vec::new()).map_err(lost)?;
    let optim_bytes = link.broadcast(Vec::new()).map_err(lost)?;
    let config = ExperimentConfig::from_toml(&start.config_toml)
        .map_err(|e| error(format!("the lead's experiment does not read: {e}")))?;
    if let Some(lead) = start.compute.filter(|c| *c != spec.compute) {
        return Err(error(format!(
            "this process computes as {:?} but rank 0 as {lead:?}: give every process the same \
             --precision, --layout, --conv-engine and --norm-engine (and the same GPU model \
             where they are `auto`)",
            spec.compute
        )));
    }
    // The lead's weights in memory, checked when they were read: no check again, whose
    // reductions over every parameter would make this process tune kernels the lead never
    // runs (on the H100, longer than a minute in TF32).
    let from_lead = Path::new("<the lead's weights>");
    let configured: UNet<B> = config.model.init(device)?.with_compute(spec.compute);
    let model = configured.load_record(decode_record(model_bytes, from_lead, device)?);
    let optim = decode_record(optim_bytes, Path::new("<the lead's Adam state>"), device)?;
    let worker = Worker::new((spec.rank, device), &config, model, optim, start.from)?;
    // Ready: see `train_processes`.
    link.all_gather(vec![1]).map_err(lost)?;
    let group = match &start.nccl_id {
        Some(id) => Some(join::<B>(device, id, spec.rank, spec.world).map_err(error)?),
        None => None,
    };
    let options = SessionOptions {
        compute: spec.compute,
        collective: start.collective,
        ..Default::default()
    };
    let team = Team::member(
        Shard::new(&config.train, spec.rank, spec.world)?,
        Link::Processes(link, group.as_ref()),
        start.collective,
        format!("{device:?}"),
    );
    worker.run(&config, &options, team, start.end)
}

/// The replica processes of a run (rank `i + 1` at `i`).
struct Replicas(Vec<Box<dyn LaunchedReplica>>);

impl Replicas {
    /// The first replica that already ended, with its rank.
    fn first_ended(&mut self) -> Option<String> {
        self.0
            .iter_mut()
            .enumerate()
            .find_map(|(i, r)| r.ended().map(|why| format!("replica {}: {why}", i + 1)))
    }

    /// Waits for every replica: `None` for one that succeeded, else why not. After a failure
    /// each has a minute to stop (it learns at its next meeting) before it is killed.
    fn wait(mut self, failed: bool) -> Vec<Option<String>> {
        let deadline = Instant::now() + Duration::from_secs(60);
        let out = self
            .0
            .iter_mut()
            .map(|r| {
                if failed {
                    while r.ended().is_none() && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    if r.ended().is_none() {
                        r.kill();
                        return Some("killed: it did not stop within a minute of the lead".into());
                    }
                }
                r.wait()
            })
            .collect();
        self.0.clear();
        out
    }
}

impl Drop for Replicas {
    /// A lead that returns early (an error before the first step) takes its replicas along.
    fn drop(&mut self) {
        for r in &mut self.0 {
            r.kill();
        }
    }
}
