//! 3-D convolution as a backend extension: forward, data gradient and weight gradient.
//!
//! [`KernelBackend`]'s provided methods are the plain-burn-op versions (burn's own
//! `conv3d`, `conv3d_x_backward`, `conv3d_weight_backward`): every backend gets them, and they
//! are the reference twins the tests compare the engines against. burn's CUDA backend overrides
//! them with cuDNN (module `cudnn`); the autodiff backend gets a hand-written backward that
//! calls the inner backend's two gradient methods, so training uses the same engine as the
//! forward pass.
//!
//! Here, above the trait: `ops` (the calls on tensors, [`conv3d`] and its gradients),
//! `rewrites` ([`data_grad_via_forward`], [`weight_grad_padded`]), `check`
//! ([`engine_vs_reference`]); [`channels_last`] from `medddpm-ops`. Below it, re-exported:
//! [`Conv3dSpec`] and the twins ([`reference`](mod@reference), `crate::reference`), the trait
//! ([`KernelBackend`], `crate::extension`, with the autodiff backward passes and
//! [`backward_profile`]); the engines are `crate::backends`.

mod check;
mod ops;
mod rewrites;

pub use crate::agreement::rel_l2;
pub use crate::extension::backward_profile;
pub use crate::extension::{KernelAutodiffBackend, KernelBackend, MemoryStats};
pub use crate::reference::conv as reference;
pub use crate::reference::conv_spec::Conv3dSpec;
pub use check::{batch_chunks_vs_reference, engine_vs_reference, ConvCase};
pub use medddpm_ops::layout::{channels_last, in_layout};
pub use ops::{conv3d, conv3d_data_grad, conv3d_weight_grad, upsample_x2};
pub(crate) use rewrites::is_same_padded;
pub use rewrites::{
    batch_chunks, data_grad_in_batch_chunks, data_grad_via_forward, forward_in_batch_chunks,
    forward_in_padded, is_strided_same, weight_grad_in_batch_chunks, weight_grad_padded,
    CUDNN_MAX_VALUES,
};
