//! How a forward pass runs, apart from the weights: the memory layout of the activations, the
//! compute dtype, and an optional per-operation timer.
//!
//! - `profile`: what the timer records ([`OpProfile`], [`OpStats`]) per [`OpClass`];
//! - `ops`: the per-call context that runs each operation (convolution, GroupNorm) in the
//!   chosen layout and times it;
//! - `joined`: the decoder's [current, skip] taken as two parts without their join;
//! - `params`: passes over a module's parameters (compute-dtype casts, mixed-precision working
//!   copies, random weights, values moved between backends).

mod joined;
mod ops;
mod params;
mod profile;

pub use medddpm_kernels::{cast_to, to_stats, Layout};
pub use ops::group_norm;
pub(crate) use ops::{pointwise_tokens, residual_sum, Ctx};
pub use params::{
    cast_compute_params, load_weight_values, randomize_weights, weight_values, working_params,
};
pub use profile::{OpClass, OpProfile, OpStats};
