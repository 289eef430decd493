//! What the U-Net's heavy operations are, on burn alone: the settings that decide how they
//! compute ([`compute`]), each operation's spec and plain-burn-op twin ([`reference`](mod@reference)), and the
//! helpers the engines and their agreement checks share (with feature `fusion`, also `fusion`:
//! registering our operations in burn-fusion's streams; with feature `cuda`, also `cuda`:
//! burn's CUDA backend by name and NVIDIA's libraries loaded, for the CUDA-only crates). `medddpm-kernels` builds the backend
//! extension (the trait whose provided methods are these twins, and the engines) on top and
//! re-exports all of this.
//!
//! # Example
//! ```
//! use burn::{backend::Flex, tensor::Tensor};
//! let x = Tensor::<Flex, 5>::ones([1, 2, 4, 4, 4], &Default::default());
//! let y = medddpm_ops::reference::upsample::upsample_trilinear_x2(x);
//! assert_eq!(y.dims(), [1, 2, 8, 8, 8]);
//! ```
#![warn(missing_docs)]

pub mod agreement;
pub mod capture;
pub mod compute;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod device_error;
pub mod dtype;
#[cfg(feature = "fusion")]
pub mod fusion;
pub mod layout;
pub mod marks;
pub mod panics;
pub mod primitive;
pub mod reference;
pub mod seeded;
