//! GroupNorm (with the SiLU that follows it in the U-Net fused in) as a backend extension:
//! forward and a hand-written backward that keeps only the input and the per-group statistics.
//!
//! The plain-burn-op bodies here are the reference twins and the fallback. Statistics are in
//! f32 whatever the activation dtype (f64 stays f64), with two-level blocked sums: a group holds
//! millions of values at 128^3, and one running f32 sum over them (as some backends reduce)
//! loses about 1e-3 of the mean, where sqrt(n)-sized partial sums keep it at f32 rounding (on the
//! H100 the error of the whole network's output at 128^3 went from 2.4e-3 to 1.7e-6).
//!
//! Why a hand-written backward: autodiff of the plain-op chain keeps every intermediate (the
//! centred input, its square, the normalised values, the affine result and the SiLU input) for
//! about 40 normalisations per pass; this keeps the input and two numbers per group.
//!
//! Its parts: [`reference`](mod@reference) (the spec, the pass outputs and the plain-op twins,
//! below the trait), `ops` ([`group_norm`] on tensors, through [`KernelBackend`]) and `check`
//! ([`engine_vs_reference`], [`NormCase`]).
//!
//! [`KernelBackend`]: crate::KernelBackend

mod check;
mod ops;
pub use crate::reference::norm as reference;

pub use crate::extension::NormInput;
pub use check::{engine_vs_reference, NormCase};
pub use ops::{group_norm, group_norm_parts, group_norm_shifted, norm_conv3d};
pub use reference::{
    backward, backward_primitive, block_len, forward, forward_primitive, GroupNormGrads,
    GroupNormOutput, GroupNormSpec,
};
// The dtype casts lived here first.
pub use crate::dtype::{cast_to, to_stats};
