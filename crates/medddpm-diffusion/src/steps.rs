//! The timesteps a shortened sampler visits, and why a sampler cannot be built: shared by DDIM,
//! DPM-Solver++ and the sampler choice.

/// Why a sampler cannot be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SamplerError {
    /// Zero steps, or more than the schedule has.
    #[error(
        "DDIM and DPM-Solver++ need between 1 and {max} steps (the training timesteps), got {got}"
    )]
    Steps {
        /// Steps asked for.
        got: usize,
        /// The schedule's timesteps.
        max: usize,
    },
    /// `eta` outside [0, 1] or not finite.
    #[error("DDIM eta must be in [0, 1] (0: deterministic, 1: DDPM's variance), got {0}")]
    Eta(f64),
    /// A step count for the DDPM sampler other than the schedule's.
    #[error("the DDPM sampler walks all {timesteps} timesteps (asked for {got}); use the DDIM or DPM-Solver++ sampler for fewer")]
    DdpmSteps {
        /// Steps asked for.
        got: usize,
        /// The schedule's timesteps.
        timesteps: usize,
    },
}

/// `steps` of the `t` training timesteps, evenly spaced from t - 1 down ("trailing" spacing).
pub(crate) fn trailing_timesteps(t: usize, steps: usize) -> Result<Vec<usize>, SamplerError> {
    if steps == 0 || steps > t {
        return Err(SamplerError::Steps { got: steps, max: t });
    }
    let ratio = t as f64 / steps as f64;
    Ok((0..steps)
        .map(|i| ((t as f64 - i as f64 * ratio).round() as usize).saturating_sub(1))
        .collect())
}
