//! The memory a Med-DDPM run needs, worked out from the U-Net's shapes before anything is
//! allocated: what `medddpm plan` prints, and what `train`, `sample` and `bench` check before
//! they start so that a run that cannot fit is refused with the estimate instead of failing
//! part-way (or taking the machine down) with an out-of-memory error.
//!
//! ```
//! use medddpm_plan::{training, Allocator, RunShape};
//! use medddpm_unet::{ActivationCheckpointing, UNetConfig};
//!
//! let shape = RunShape {
//!     model: UNetConfig::whole_head(),
//!     grid: [128, 128, 128],
//!     batch: 1,
//!     half: true,
//!     checkpointing: ActivationCheckpointing::None,
//!     strict_fp32: false,
//! };
//! let plan = training(&shape, true, Allocator::Cuda);
//! assert_eq!(plan.parameters, 40_226_433);
//! assert!(plan.total() > 8 << 30 && plan.total() < 13 << 30);
//! ```
#![warn(missing_docs)]

mod census;
mod measured;
mod memory;

pub use census::{census, Census};
pub use measured::{measured_steps, MeasuredSteps};
pub use medddpm_unet::ActivationCheckpointing;
pub use memory::{parts, sampling, training, Allocator, MemoryPlan, Part, RunShape};

/// How much more than the plan the first steps of shapes a GPU has not tuned yet took: cuDNN's
/// algorithm search and cubecl's autotune run candidates with their own buffers (measured on an
/// H200: 1.22-1.33 times the same run with its tuning cached; docs/benchmarks, "memory plan").
pub const FIRST_RUN_FACTOR: f64 = 1.33;

/// Training or sampling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// A training run (with an EMA of the weights or without, as the bench measures).
    Training {
        /// Whether an EMA copy of the weights is kept.
        ema: bool,
    },
    /// Sampling.
    Sampling,
}

/// `work`'s plan for `shape` on `allocator`.
pub fn plan(shape: &RunShape, work: Work, allocator: Allocator) -> MemoryPlan {
    match work {
        Work::Training { ema } => training(shape, ema, allocator),
        Work::Sampling => sampling(shape, allocator),
    }
}

/// A change of settings that makes a run fit, with the plan it gets.
#[derive(Debug, Clone, PartialEq)]
pub struct Suggestion {
    /// The settings to change, as an experiment file or the command line writes them.
    pub change: String,
    /// The run with the change.
    pub shape: RunShape,
    /// Its plan.
    pub plan: MemoryPlan,
}

/// The cheapest change that brings `shape` within `capacity` bytes, trying in order: bf16
/// (where `half_allowed`), activation checkpointing `norms` then `blocks` (training), bf16
/// with `blocks`, then smaller micro-batches (the examples moved to gradient accumulation in
/// training). `None` when nothing of that fits (the grid or the model must shrink).
pub fn cheapest_fit(
    shape: &RunShape,
    work: Work,
    allocator: Allocator,
    capacity: u64,
    half_allowed: bool,
) -> Option<Suggestion> {
    let training = matches!(work, Work::Training { .. });
    let mut tries: Vec<(String, RunShape)> = Vec::new();
    let half = !shape.half && half_allowed;
    if half {
        tries.push((
            "precision bf16 (--precision bf16)".into(),
            RunShape {
                half: true,
                strict_fp32: false,
                ..shape.clone()
            },
        ));
    }
    // From the change that saves least memory (and costs least time) to the one that saves most.
    let order = [
        ActivationCheckpointing::None,
        ActivationCheckpointing::Norms,
        ActivationCheckpointing::Blocks,
    ];
    let now = order.iter().position(|m| *m == shape.checkpointing);
    let lighter = order.iter().skip(now.map_or(order.len(), |i| i + 1));
    for &mode in lighter.filter(|_| training) {
        tries.push((
            format!("[train] activation_checkpointing = \"{mode}\""),
            RunShape {
                checkpointing: mode,
                ..shape.clone()
            },
        ));
    }
    if training && half && shape.checkpointing != ActivationCheckpointing::Blocks {
        tries.push((
            "precision bf16 and [train] activation_checkpointing = \"blocks\"".into(),
            RunShape {
                half: true,
                checkpointing: ActivationCheckpointing::Blocks,
                strict_fp32: false,
                ..shape.clone()
            },
        ));
    }
    tries.extend(smaller_batches(shape, training, half));
    tries.into_iter().find_map(|(change, shape)| {
        let plan = plan(&shape, work, allocator);
        (plan.total() <= capacity).then_some(Suggestion {
            change,
            shape,
            plan,
        })
    })
}

/// Smaller micro-batches of `shape` (halved down to 1, with bf16 where `half` and
/// checkpointing in training), each with the sentence that names it.
fn smaller_batches(shape: &RunShape, training: bool, half: bool) -> Vec<(String, RunShape)> {
    let mut tries = Vec::new();
    let lightest = RunShape {
        half: shape.half || half,
        checkpointing: match training {
            true => ActivationCheckpointing::Blocks,
            false => shape.checkpointing,
        },
        strict_fp32: shape.strict_fp32 && !half,
        ..shape.clone()
    };
    let mut batch = shape.batch;
    while batch > 1 {
        batch = batch.div_ceil(2);
        let change = if training {
            format!(
                "batch_size = {batch} with grad_accum x {} (the same examples per optimizer step)",
                shape.batch.div_ceil(batch)
            )
        } else {
            format!("{batch} volumes at once")
        };
        tries.push((
            change,
            RunShape {
                batch,
                ..lightest.clone()
            },
        ));
    }
    tries
}

/// Bytes in GiB with two decimals (TiB, PiB, EiB beyond 1024 of the unit before), the unit
/// the plan's messages use.
pub fn gib(bytes: u64) -> String {
    let mut value = bytes as f64 / (1u64 << 30) as f64;
    for unit in ["GiB", "TiB", "PiB"] {
        if value < 1024.0 {
            return format!("{value:.2} {unit}");
        }
        value /= 1024.0;
    }
    format!("{value:.2} EiB")
}

#[cfg(test)]
mod tests {
    use super::*;
    use medddpm_unet::UNetConfig;

    fn whole_head(batch: usize, half: bool) -> RunShape {
        RunShape {
            model: UNetConfig::whole_head(),
            grid: [128; 3],
            batch,
            half,
            checkpointing: ActivationCheckpointing::None,
            strict_fp32: !half,
        }
    }

    #[test]
    fn sizes_are_written_in_a_readable_unit() {
        assert_eq!(gib(10 << 30), "10.00 GiB");
        assert_eq!(gib(3 << 40), "3.00 TiB");
        assert_eq!(gib(u64::MAX), "16.00 EiB");
    }

    /// The suggestion is the first change in the documented order that fits, and says so.
    #[test]
    fn the_cheapest_fit_comes_in_order() {
        let work = Work::Training { ema: true };
        let fp32 = whole_head(1, false);
        let full = plan(&fp32, work, Allocator::Cuda).total();
        // Roomy: nothing to change is not this function's question, but bf16 fits first.
        let s = cheapest_fit(&fp32, work, Allocator::Cuda, full, true).unwrap();
        assert!(s.change.starts_with("precision bf16"), "{}", s.change);
        // Without bf16 (the CPU), checkpointing.
        let s = cheapest_fit(&fp32, work, Allocator::Host, full, false).unwrap();
        assert!(
            s.change.contains("activation_checkpointing"),
            "{}",
            s.change
        );
        assert!(!s.shape.half);
        // A batch of 8 in 10 GiB: smaller micro-batches, bf16 and checkpointing kept.
        let big = whole_head(8, true);
        let s = cheapest_fit(&big, work, Allocator::Cuda, 10 << 30, true).unwrap();
        assert!(s.change.starts_with("batch_size = "), "{}", s.change);
        assert!(
            s.shape.checkpointing == ActivationCheckpointing::Blocks
                && s.shape.batch < 8
                && s.plan.total() <= 10 << 30
        );
        // Nothing fits in 100 MiB.
        assert!(cheapest_fit(&big, work, Allocator::Cuda, 100 << 20, true).is_none());
        // Sampling never suggests checkpointing.
        let s = cheapest_fit(&big, Work::Sampling, Allocator::Cuda, 6 << 30, true).unwrap();
        assert!(s.change.ends_with("volumes at once"), "{}", s.change);
    }
}
