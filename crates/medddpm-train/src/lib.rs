//! Med-DDPM training and sampling: datasets over NIfTI folders (and built-in phantoms), the
//! training loop with the reference's defaults (Adam, gradient accumulation, EMA), atomic
//! checkpoints with exact resume, and sampling from masks to NIfTI files.
#![warn(missing_docs)]

pub mod checkpoint;
pub mod cluster;
mod config;
pub mod data;
pub mod ema;
mod error;
pub mod gradient_sum;
mod host;
pub mod integrity;
pub mod layout;
pub mod lock;
pub mod optim;
mod optimizer_record;
pub mod phantom;
pub mod pictures;
pub mod sample;
pub mod trainer;

pub use checkpoint::RunDir;
pub use cluster::{ClusterError, ClusterPlace, Launcher};
pub use config::{
    ConfigTextError, DiffusionConfig, ExperimentConfig, LrSchedule, NonFiniteLoss, TrainSettings,
};
pub use error::{DataError, TrainError};
pub use gradient_sum::GradientSum;
pub use optim::{FusedAdam, FusedAdamOptimizer};
pub use sample::{
    load_sampling_model, sample_masks, sample_stem, SampleOptions, Sampled, SamplingModel,
    WeightsSource,
};
pub use trainer::processes::{
    train_cluster_lead, train_cluster_replica, train_processes, train_replica, LaunchedReplica,
    ReplicaLauncher, ReplicaSpec,
};
pub use trainer::{
    micro_step, micro_step_forward, micro_step_loss, train, train_on, MicroBatch, MicroStepForward,
    MicroStepGraphs, Quiet, SessionOptions, StepMetrics, TrainObserver, TrainSummary,
};
