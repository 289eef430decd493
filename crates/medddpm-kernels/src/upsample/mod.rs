//! Trilinear x2 upsampling of 5-D volumes (burn 0.21's `interpolate` is 2-D only).
//!
//! Its parts: [`reference`](mod@reference) (the plain-op upsampling and its adjoint, below the
//! trait), `check` ([`engine_vs_reference`], a backend's [`KernelBackend`] methods against
//! them) and `tests`.
//!
//! [`KernelBackend`]: crate::KernelBackend

mod check;
pub use crate::reference::upsample as reference;
#[cfg(test)]
mod tests;

pub use check::engine_vs_reference;
pub use reference::{
    upsample_linear_x2_adjoint_along, upsample_linear_x2_along, upsample_trilinear_x2,
    upsample_trilinear_x2_backward, upsample_trilinear_x2_backward_in,
    upsample_trilinear_x2_channels_last, upsample_trilinear_x2_channels_last_backward,
    upsample_trilinear_x2_in,
};
