//! The crate's error type.

use std::path::PathBuf;

/// Everything that can go wrong building the U-Net or importing weights into it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UNetError {
    /// The configuration describes a network that cannot be built.
    #[error("invalid U-Net configuration: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
    /// The input has another number of channels than the network takes (noisy image plus
    /// condition).
    #[error("input does not fit the U-Net: expected {expected} input channels, got {got} (shape {dims:?})")]
    InputChannels {
        /// Channels the network takes.
        expected: usize,
        /// Channels of the input.
        got: usize,
        /// The input's shape `[batch, channels, d, h, w]`.
        dims: [usize; 5],
    },
    /// The batch and the timesteps differ in length (one timestep per volume).
    #[error("input does not fit the U-Net: batch of {batch} volumes but {timesteps} timesteps")]
    BatchTimesteps {
        /// Volumes in the batch.
        batch: usize,
        /// Timesteps given.
        timesteps: usize,
    },
    /// A spatial size is zero or not a multiple of the network's total downsampling.
    #[error("input does not fit the U-Net: every spatial size must be a positive multiple of {divisor}, got {sizes:?}")]
    SpatialSize {
        /// 2^(levels - 1): every spatial size must be a multiple of it.
        divisor: usize,
        /// The input's `[d, h, w]`.
        sizes: [usize; 3],
    },
    /// A checkpoint could not be read.
    #[error("cannot read checkpoint {}: {message}", path.display())]
    CheckpointRead {
        /// The checkpoint.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The checkpoint lacks tensors the network needs.
    #[error("checkpoint {} lacks {} tensor(s) the U-Net needs (is it for another configuration?): {}", path.display(), keys.len(), keys.join(", "))]
    MissingKeys {
        /// The checkpoint.
        path: PathBuf,
        /// Our module paths that found no tensor.
        keys: Vec<String>,
    },
    /// The checkpoint has tensors the network does not.
    #[error("checkpoint {} has {} tensor(s) this U-Net does not use (is it for another configuration?): {}", path.display(), keys.len(), keys.join(", "))]
    UnexpectedKeys {
        /// The checkpoint.
        path: PathBuf,
        /// The checkpoint's keys.
        keys: Vec<String>,
    },
    /// A tensor has another shape than the network's parameter.
    #[error("checkpoint {}: tensor '{key}' has shape {found:?}, the U-Net expects {expected:?} (is it for another configuration?)", path.display())]
    ShapeMismatch {
        /// The checkpoint.
        path: PathBuf,
        /// The checkpoint's key.
        key: String,
        /// Shape of our parameter.
        expected: Vec<usize>,
        /// Shape in the checkpoint.
        found: Vec<usize>,
    },
}
