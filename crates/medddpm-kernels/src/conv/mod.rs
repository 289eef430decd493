//! 3-D convolution as a backend extension: forward, data gradient and weight gradient.
//!
//! [`KernelBackend`]'s provided methods are the plain-burn-op versions (burn's own
//! `conv3d`, `conv3d_x_backward`, `conv3d_weight_backward`): every backend gets them, and they
//! are the reference twins the tests compare the engines against. burn's CUDA backend overrides
//! them with cuDNN (module `cudnn`); the autodiff backend gets a hand-written backward that
//! calls the inner backend's two gradient methods, so training uses the same engine as the
//! forward pass.
//!
//! Its parts: `spec` ([`Conv3dSpec`]), `backend` (the trait, [`KernelBackend`]), `ops` (the
//! calls on tensors, [`conv3d`] and its gradients), `backends` (the Flex and wgpu engines),
//! `autodiff` (the hand-written backward passes), `rewrites` ([`data_grad_via_forward`],
//! [`weight_grad_padded`]), [`reference`](mod@reference) (the twins), `check`
//! ([`engine_vs_reference`]), [`backward_profile`] and `layout` ([`channels_last`]).

mod autodiff;
mod backend;
mod backends;
pub mod backward_profile;
mod check;
mod layout;
mod ops;
pub mod reference;
mod rewrites;
mod spec;

pub use crate::agreement::rel_l2;
#[cfg(feature = "cuda")]
pub(crate) use backend::cube_memory_usage;
pub use backend::{KernelAutodiffBackend, KernelBackend, MemoryStats};
pub use check::{engine_vs_reference, ConvCase};
pub use layout::{channels_last, in_layout};
pub use ops::{conv3d, conv3d_data_grad, conv3d_weight_grad, upsample_x2};
pub use rewrites::{data_grad_via_forward, forward_in_padded, is_strided_same, weight_grad_padded};
pub use spec::Conv3dSpec;
