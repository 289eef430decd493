//! Data-parallel training with one process per replica, on the CPU backend: the lead and its
//! replica meet over loopback connections exactly as separate processes do (the replica runs
//! in a thread of this test process, started by the test's launcher in place of a process),
//! and train to the same weights as threads and as one device accumulating the same batch.

use crate::common;
use crate::common::{serial_tempdir, Losses};

use std::path::Path;
use std::thread::JoinHandle;

use burn::backend::{Autodiff, Flex};
use medddpm_kernels::Collective;
use medddpm_train::{
    train_processes, train_replica, ExperimentConfig, LaunchedReplica, ReplicaLauncher,
    ReplicaSpec, RunDir, SessionOptions, TrainError,
};

type A = Autodiff<Flex>;

/// A replica "process": a thread running [`train_replica`].
struct ReplicaThread(Option<JoinHandle<Result<(), TrainError>>>, Option<String>);

impl LaunchedReplica for ReplicaThread {
    fn ended(&mut self) -> Option<String> {
        if self.1.is_none() && self.0.as_ref().is_some_and(|h| h.is_finished()) {
            return self.wait().or(Some("ended".into()));
        }
        self.1.clone()
    }

    fn wait(&mut self) -> Option<String> {
        if let Some(h) = self.0.take() {
            self.1 = h.join().unwrap().err().map(|e| e.to_string());
        }
        self.1.clone()
    }

    fn kill(&mut self) {}
}

/// Starts replicas as threads; `spoil` changes the spec first (to test a failed start).
struct Threads(fn(&mut ReplicaSpec));

impl ReplicaLauncher for Threads {
    fn launch(&self, spec: &ReplicaSpec) -> std::io::Result<Box<dyn LaunchedReplica>> {
        let mut spec = spec.clone();
        (self.0)(&mut spec);
        let handle = std::thread::spawn(move || train_replica::<A>(&spec, &Default::default()));
        Ok(Box::new(ReplicaThread(Some(handle), None)))
    }
}

fn config(dir: &Path) -> ExperimentConfig {
    let mut config = common::tiny_experiment(&dir.join("phantoms"), 4);
    config.train.steps = 3;
    config.train.save_every = 2;
    config.train.samples_per_checkpoint = 1;
    config.train.batch_size = 1;
    config.train.grad_accum = 2;
    config
}

fn options() -> SessionOptions {
    SessionOptions {
        collective: Collective::Host,
        ..Default::default()
    }
}

/// Final weights and EMA of a run's last checkpoint.
fn saved(config: &ExperimentConfig, checkpoint: &Path) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    (
        common::saved_weights(config, &checkpoint.join("model.mpk")),
        common::saved_weights(config, &checkpoint.join("ema.mpk")),
    )
}

#[test]
fn replicas_in_processes_train_like_one_device_bit_for_bit() {
    let (_serial, tmp) = serial_tempdir();
    two_and_four(config(tmp.path()), tmp.path(), &[0, 1]);
}

/// The four-device path (issue 17's, without four GPUs): four processes' worth of replicas.
#[test]
fn four_replicas_in_processes_train_like_one_device() {
    let (_serial, tmp) = serial_tempdir();
    let mut config = config(tmp.path());
    config.train.grad_accum = 4;
    two_and_four(config, tmp.path(), &[0, 1, 2, 3]);
}

/// One device accumulating the step's micro-batches against a process per device.
fn two_and_four(config: ExperimentConfig, tmp: &Path, devices: &[usize]) {
    let mut one = Losses(Vec::new());
    let alone = medddpm_train::train_on::<A>(
        &config,
        &RunDir::new(tmp.join("one")),
        &options(),
        &[Default::default()],
        &mut one,
    )
    .unwrap();
    let mut two = Losses(Vec::new());
    let split = train_processes::<A>(
        &config,
        &RunDir::new(tmp.join("split")),
        &options(),
        (devices, &Default::default()),
        &Threads(|_| {}),
        &mut two,
    )
    .unwrap();
    assert_eq!(two.0, one.0);
    // Halving is exact, so (g0 + g1) / 2 is the accumulated g0 / 2 + g1 / 2 bit for bit.
    assert_eq!(
        saved(&config, &split.checkpoint),
        saved(&config, &alone.checkpoint)
    );
    assert_eq!(split.samples.len(), alone.samples.len());
}

#[test]
fn a_replica_that_never_joins_stops_the_run_and_says_why() {
    let (_serial, tmp) = serial_tempdir();
    let config = config(tmp.path());
    let err = train_processes::<A>(
        &config,
        &RunDir::new(tmp.path().join("run")),
        &options(),
        (&[0, 1], &Default::default()),
        &Threads(|spec| spec.token = "not this run's".into()),
        &mut Losses(Vec::new()),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("replica 1") && err.contains("starting the replica processes"),
        "{err}"
    );
}

/// Damages one image file once the lead has opened the run, then starts replicas as threads.
struct DamageThenThreads(std::path::PathBuf);

impl ReplicaLauncher for DamageThenThreads {
    fn launch(&self, spec: &ReplicaSpec) -> std::io::Result<Box<dyn LaunchedReplica>> {
        std::fs::write(&self.0, b"\x1f\x8b cut short")?;
        Threads(|_| {}).launch(spec)
    }
}

#[test]
fn a_corrupt_file_met_during_training_stops_every_process_with_its_name() {
    let (_serial, tmp) = serial_tempdir();
    let config = config(tmp.path());
    let damaged = tmp.path().join("phantoms/image/phantom_002.nii.gz");
    let err = train_processes::<A>(
        &config,
        &RunDir::new(tmp.path().join("run")),
        &options(),
        (&[0, 1], &Default::default()),
        &DamageThenThreads(damaged),
        &mut Losses(Vec::new()),
    )
    .unwrap_err()
    .to_string();
    // Whichever process drew it (the data order decides), the run ends with the file's name.
    assert!(err.contains("phantom_002.nii.gz"), "{err}");
}
