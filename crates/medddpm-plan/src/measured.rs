//! Step times this project measured, for the plan to quote where the GPU and the run match one
//! (never an extrapolation: another GPU, grid, batch or setting gets no figure).

use medddpm_unet::UNetConfig;

use crate::RunShape;

/// Step times measured on one GPU for one run shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeasuredSteps {
    /// Part of the GPU's name as the driver reports it (`NVIDIA H200`).
    pub gpu: &'static str,
    /// Training micro-step (forward, backward and Adam), milliseconds, as it comes.
    pub micro_step_ms: f64,
    /// Sampling step (one network call and the sampler's update), milliseconds.
    pub sampling_step_ms: f64,
    /// `medddpm train`'s optimizer step with the released settings (two micro-batches),
    /// milliseconds, where measured.
    pub optimizer_step_ms: Option<f64>,
    /// Where the figures are recorded.
    pub source: &'static str,
}

/// The released whole-head model at 128^3, batch 1, no checkpointing, on the cuDNN engine,
/// channels-last: (precision, figures).
const WHOLE_HEAD_128: [(&str, MeasuredSteps); 2] = [
    (
        "bf16",
        MeasuredSteps {
            gpu: "NVIDIA H200",
            micro_step_ms: 62.3,
            sampling_step_ms: 22.7,
            optimizer_step_ms: Some(122.8),
            source: "docs/benchmarks/README.md, 2026-11-30 (thirtieth session), calls 1-2",
        },
    ),
    (
        "tf32",
        MeasuredSteps {
            gpu: "NVIDIA H200",
            micro_step_ms: 145.6,
            sampling_step_ms: 38.1,
            optimizer_step_ms: None,
            source: "docs/benchmarks/README.md, 2026-11-30 (twenty-ninth session), call 1 (TF32)",
        },
    ),
];

/// The measured step times for `shape` in `precision` (its name: `bf16`, `tf32`) on the GPU
/// named `gpu`, if this project measured that combination (the released whole-head model at
/// 128^3, batch 1, on an H200, in bf16 or TF32).
pub fn measured_steps(shape: &RunShape, precision: &str, gpu: &str) -> Option<MeasuredSteps> {
    if shape.model != UNetConfig::whole_head()
        || shape.grid != [128; 3]
        || shape.batch != 1
        || shape.checkpointing != medddpm_unet::ActivationCheckpointing::None
    {
        return None;
    }
    WHOLE_HEAD_128
        .iter()
        .find(|(p, m)| *p == precision && gpu.contains(m.gpu))
        .map(|(_, m)| *m)
}
