//! The reference Med-DDPM 3-D U-Net on burn, and import of the reference's PyTorch checkpoints.
//!
//! A guided-diffusion U-Net with `dims=3`: ResBlocks with additive time embedding, single-head
//! attention, stride-2 conv downsampling and trilinear x2 upsampling, exactly as the reference
//! builds it (spec section 1). Module field names mirror the reference checkpoint keys.
//!
//! # Example
//! ```
//! use burn::backend::Flex;
//! use burn::module::Module;
//! use medddpm_unet::UNetConfig;
//!
//! let config = UNetConfig { model_channels: 32, ..UNetConfig::whole_head() };
//! let unet = config.init::<Flex>(&Default::default())?;
//! assert_eq!(unet.num_params(), 10_065_729);
//! # Ok::<(), medddpm_unet::UNetError>(())
//! ```
#![warn(missing_docs)]

pub mod blocks;
mod checkpoint;
mod config;
mod error;
pub mod exec;
mod graphed;
pub mod import;
mod model;

pub use checkpoint::{ActivationCheckpointing, CheckpointedForward};
pub use config::UNetConfig;
pub use error::UNetError;
pub use exec::{
    cast_compute_params, load_weight_values, randomize_weights, weight_values, working_params,
    Layout, OpClass, OpProfile, OpStats,
};
pub use graphed::{ForwardGraphs, GraphStatus, GraphedUNet};
pub use import::{load_reference_checkpoint, ImportReport, WeightsEntry};
pub use medddpm_kernels::{
    Compute, ComputeConfig, ConvEngine, KernelAutodiffBackend, KernelBackend, Precision,
};
pub use model::{timestep_embedding, UNet};
