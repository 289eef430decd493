//! The U-Net's heavy operations as a burn backend extension, and the settings that decide how
//! they compute.
//!
//! - [`Compute`]: precision, activation layout and convolution engine, built once by the
//!   command line and passed down to every layer.
//! - [`KernelBackend`]: 3-D convolution with its data and weight gradients, GroupNorm (SiLU
//!   fused in) with a hand-written backward, trilinear x2 upsampling and Adam updates. Every
//!   backend gets the plain-burn-op versions (the reference twins in [`conv::reference`],
//!   [`norm::reference`], [`upsample::reference`] and [`adam::reference`]); burn's CUDA backend
//!   computes them with cuDNN when [`ConvEngine::Cudnn`] is chosen (feature `cuda`), and the
//!   autodiff backend has a hand-written backward that calls the same engine.
//! - Trilinear x2 upsampling: burn 0.21's `interpolate` is 2-D only. The reference U-Net
//!   upsamples with PyTorch's `F.interpolate(scale_factor=2, mode="trilinear",
//!   align_corners=False)`, and imported weights only reproduce the reference if we do exactly
//!   the same.
//!
//! The modules stand in layers, each using only those below it (`scripts/check-imports.py`
//! checks that no two modules use each other, in CI):
//! 1. settings and helpers on burn alone: `compute`, `dtype`, `primitive`, `panics`,
//!    `agreement` (how far an engine is from its twin), `device_error`, `capture` (what a
//!    recorded graph is), `seeded`; and 2. [`reference`]: what each operation is (its spec) and
//!    its plain-burn-op twin; both in the crate `medddpm-ops`, re-exported here;
//! 3. the engines' code, each a crate of its own: `cube` (`medddpm-cube`: portable CubeCL
//!    kernels), `cudnn` (`medddpm-cudnn`: cuDNN, cuBLAS, CUDA graphs and page-locked uploads on
//!    CUDA), [`collective`] (`medddpm-collective`: the all-reduce and its NCCL engine);
//! 4. `extension`: the trait [`KernelBackend`], its provided methods the twins, and the
//!    autodiff backend's hand-written backward passes;
//! 5. the operations as callers use them, through the trait, with their agreement checks:
//!    [`conv`], [`norm`], [`product`], [`upsample`], [`channels`], [`adam`], [`graph`];
//! 6. `backends`: the trait for each backend, one file per implementation (Flex and the CubeCL
//!    backends in `backends/mod.rs`, burn's fused CUDA backend with cuDNN and cuBLAS in
//!    `backends/fused.rs`).
//!
//! # Example
//! ```
//! use burn::{backend::Flex, tensor::{Tensor, TensorData}};
//! let x = Tensor::<Flex, 5>::from_data(TensorData::new(vec![0.0f32, 4.0], [1, 1, 1, 1, 2]), &Default::default());
//! let y = medddpm_kernels::upsample_trilinear_x2(x);
//! assert_eq!(y.dims(), [1, 1, 2, 2, 4]);
//! assert_eq!(y.narrow(2, 0, 1).narrow(3, 0, 1).into_data().to_vec::<f32>().unwrap(), vec![0.0, 1.0, 3.0, 4.0]);
//! ```
#![warn(missing_docs)]

// The layers below the engines, from `medddpm-ops`, under the paths they always had here.
pub use medddpm_collective as collective;
pub(crate) use medddpm_ops::{agreement, capture, compute, device_error, dtype};
pub use medddpm_ops::{marks, panics, primitive, reference, seeded};

pub mod adam;
mod backends;
pub mod channels;
pub mod conv;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use medddpm_cube as cube;
#[cfg(feature = "cuda")]
pub use medddpm_cudnn as cudnn;
#[cfg(feature = "cuda")]
pub(crate) use medddpm_ops::cuda;
mod extension;
pub mod graph;
pub mod norm;
pub mod product;
pub mod upsample;

pub use adam::{adam_step, AdamOutput, AdamStep, AdamTensors};
pub use capture::{Captured, GraphError, StepFn};
pub use channels::{cat_last, split_last};
pub use collective::{
    nccl_unique_id, Collective, CollectiveBackend, CollectiveUnavailable, Launch, NcclId,
    ProcessGroup,
};
pub use compute::{
    Compute, ComputeConfig, ConvEngine, Layout, NormEngine, Precision, UnknownChoice,
};
pub use conv::{
    conv3d, upsample_x2, Conv3dSpec, KernelAutodiffBackend, KernelBackend, MemoryStats,
};
pub use device_error::device_error;
pub use dtype::{cast_to, to_stats};
pub use graph::{GraphStatus, StepGraph, StepGraphs};
pub use norm::{group_norm, GroupNormSpec};
pub use product::{pointwise, product, ProductSpec};
pub use seeded::{backward_seeded, SeededBackward};
pub use upsample::{
    upsample_linear_x2_along, upsample_trilinear_x2, upsample_trilinear_x2_channels_last,
};
