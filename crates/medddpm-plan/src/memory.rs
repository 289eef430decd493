//! The bytes a run needs on its device, part by part, from the [`Census`](crate::Census).

use medddpm_unet::{ActivationCheckpointing, UNetConfig};
use serde::Serialize;

use crate::census::{census, Census};

/// What decides a run's memory.
#[derive(Debug, Clone, PartialEq)]
pub struct RunShape {
    /// The network.
    pub model: UNetConfig,
    /// Network grid, [depth, height, width] (NIfTI's k, j, i).
    pub grid: [usize; 3],
    /// Examples per micro-batch (sampling: volumes at once).
    pub batch: usize,
    /// Activations in 16-bit floats (bf16, f16) rather than 32-bit ones (fp32, TF32): also a
    /// 16-bit working copy of the f32 weights.
    pub half: bool,
    /// Activation checkpointing: `blocks` keeps only the blocks' outputs; `norms` recomputes
    /// the ResBlocks' normalisation outputs in the backward pass.
    pub checkpointing: ActivationCheckpointing,
    /// Strict FP32 (no tensor cores): on CUDA its cuDNN algorithms take larger workspaces.
    pub strict_fp32: bool,
}

impl RunShape {
    /// Bytes of one activation value.
    pub fn value_bytes(&self) -> u64 {
        if self.half {
            2
        } else {
            4
        }
    }
}

/// Who hands out the device's memory, which decides the overhead on top of the tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Allocator {
    /// burn's CUDA backend: the CUDA context and libraries, and cubecl's memory pools.
    Cuda,
    /// burn's wgpu backend: its memory pools; the driver's own share is not known.
    Wgpu,
    /// The CPU: the system allocator in this process.
    Host,
}

/// The CUDA context, cuDNN's and cuBLAS's handles and loaded kernels of one process on a
/// Hopper GPU: in every configuration of the memory plan's first H200 call, nvidia-smi's peak
/// was 537 MiB above the bench's peak net of what its process held before its run
/// (docs/benchmarks, "memory plan"), rounded up.
const CUDA_CONTEXT: u64 = 600 << 20;

/// The memory pools' reserve on top of their live tensors at the peak: cubecl's pools round
/// each buffer up into size buckets and keep what a step freed for the next one
/// (docs/benchmarks, "memory plan": chosen from one whole-head bf16 measurement, 10,268 MiB
/// net with 7,082 MiB live after the forward pass).
const POOL_SLACK: f64 = 0.10;

/// The workspace strict FP32's cuDNN algorithms take on top of the pools' usual reserve: up to
/// the engine's cap per convolution (`medddpm-cudnn`'s `MAX_WORKSPACE`, 3 GiB). Whole-head
/// 128^3 in strict FP32 peaked 4.7 GiB above TF32 with the same tensors (24,341 against
/// 19,509 MiB on an H200: docs/benchmarks, "memory plan"; one configuration measured).
const STRICT_FP32_WORKSPACE: u64 = 3 << 30;

/// What a forward pass without a graph holds beyond the census's live set, as a fraction of the
/// sampling plan's tensors: burn's fused operations keep their inputs until they run, and the
/// sampler's update works beside the network's output. Fitted on the GPU pools (five `medddpm
/// sample` runs on an H200 held 1.56-1.66 times the census's tensors: docs/benchmarks, "memory
/// plan"); not measured on the CPU, where it is not added.
const INFERENCE_UNSEEN: f64 = 0.55;

/// The process itself on the CPU (binary, threads' stacks, burn's state): an allowance, not a
/// measurement of `medddpm` (the smaller `checkpoint_memory` example held 48 MiB before its
/// pass).
const HOST_BASE: u64 = 64 << 20;

/// One part of a plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Part {
    /// What it is, as the plan's table names it.
    pub name: &'static str,
    /// Bytes.
    pub bytes: u64,
}

/// What a run needs, part by part.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryPlan {
    /// Parameters of the network.
    pub parameters: u64,
    /// The parts, in the order the table lists them.
    pub parts: Vec<Part>,
}

impl MemoryPlan {
    /// The whole: the peak the run is expected to reach.
    pub fn total(&self) -> u64 {
        self.parts
            .iter()
            .fold(0u64, |sum, p| sum.saturating_add(p.bytes))
    }

    /// Bytes of the part named `name` (0 when there is none).
    pub fn part(&self, name: &str) -> u64 {
        self.parts
            .iter()
            .filter(|p| p.name == name)
            .fold(0u64, |sum, p| sum.saturating_add(p.bytes))
    }

    fn with_overhead(mut self, shape: &RunShape, allocator: Allocator) -> Self {
        if shape.strict_fp32 && allocator == Allocator::Cuda {
            self.push(
                "cuDNN workspace of strict-FP32 algorithms",
                STRICT_FP32_WORKSPACE as f64,
            );
        }
        let tensors = self.total();
        match allocator {
            Allocator::Cuda => {
                self.push("memory pools' reserve", tensors as f64 * POOL_SLACK);
                self.push("CUDA context, cuDNN, cuBLAS", CUDA_CONTEXT as f64);
            }
            Allocator::Wgpu => {
                self.push("memory pools' reserve", tensors as f64 * POOL_SLACK);
            }
            Allocator::Host => self.push("the process itself", HOST_BASE as f64),
        }
        self
    }

    /// Adds a part of `bytes` (f64 so that products of absurd settings saturate instead of
    /// wrapping: `as` rounds them to u64::MAX).
    fn push(&mut self, name: &'static str, bytes: f64) {
        self.parts.push(Part {
            name,
            bytes: bytes as u64,
        });
    }
}

/// Part names other crates look for.
pub mod parts {
    /// Activations the forward pass keeps for the backward pass.
    pub const KEPT: &str = "activations kept for the backward pass";
}

/// The census of `shape` and a plan holding the weights: every run's first part.
fn start(shape: &RunShape) -> (Census, MemoryPlan) {
    let c = census(&shape.model, shape.grid);
    let weight_copy = if shape.half { 2.0 } else { 0.0 };
    let mut plan = MemoryPlan {
        parameters: c.parameters,
        parts: Vec::new(),
    };
    plan.push(
        "weights (f32; a 16-bit copy in bf16/f16)",
        c.parameters as f64 * (4.0 + weight_copy),
    );
    (c, plan)
}

/// A training run's peak: the weights and their optimizer state, one micro-batch's
/// activations and the backward pass's gradients in flight, on `allocator`.
pub fn training(shape: &RunShape, ema: bool, allocator: Allocator) -> MemoryPlan {
    let (c, mut plan) = start(shape);
    let (p, vb, b) = (
        c.parameters as f64,
        shape.value_bytes() as f64,
        shape.batch as f64,
    );
    plan.push("gradients (and their f32 sum)", p * (vb + 4.0));
    plan.push("Adam moments (f32)", 8.0 * p);
    if ema {
        plan.push("EMA weights (f32)", 4.0 * p);
    }
    plan.push(
        "micro-batch, noise and loss (f32)",
        b * inputs(&shape.model, &c) * 4.0,
    );
    let (kept, weights) = if shape.checkpointing == ActivationCheckpointing::Blocks {
        // The blocks' outputs, and the block being recomputed: its kept values and the
        // temporaries of its forward pass.
        (
            c.block_outputs as f64 + c.largest_block.0 as f64 + c.recompute_working as f64,
            c.largest_block.1 as f64,
        )
    } else if shape.checkpointing == ActivationCheckpointing::Norms {
        // The largest recomputed output exists again for its convolution's gradients.
        let norms = c.norm_outputs.0 as f64 - c.norm_outputs.1 as f64;
        (c.saved as f64 - norms, c.saved_attention as f64)
    } else {
        (c.saved as f64, c.saved_attention as f64)
    };
    plan.push(parts::KEPT, b * (kept * vb + weights * (vb + 4.0)));
    plan.push(
        "gradients in flight in the backward pass",
        b * c.backward_transient as f64 * vb,
    );
    if allocator == Allocator::Host {
        // The trainer's loader reads three micro-batches ahead of the one running.
        plan.push(
            "micro-batches read ahead (f32)",
            3.0 * b * inputs(&shape.model, &c) * 4.0,
        );
    }
    plan.with_overhead(shape, allocator)
}

/// A sampling run's peak: the weights and one network call on `shape.batch` volumes.
pub fn sampling(shape: &RunShape, allocator: Allocator) -> MemoryPlan {
    let (c, mut plan) = start(shape);
    let (vb, b) = (shape.value_bytes() as f64, shape.batch as f64);
    plan.push("sampler state (f32)", b * inputs(&shape.model, &c) * 4.0);
    let (live, weights) = (c.inference_live.0 as f64, c.inference_live.1 as f64);
    plan.push(
        "activations of one network call",
        b * (live * vb + weights * (vb + 4.0)),
    );
    if allocator != Allocator::Host {
        let tensors = plan.total() as f64;
        plan.push(
            "temporaries of the fused forward pass",
            tensors * INFERENCE_UNSEEN,
        );
    }
    plan.with_overhead(shape, allocator)
}

/// f32 values per example around the network: the condition and the noisy image, the noise,
/// the clean image and the prediction (training), or the sample, its x0 estimate and the
/// solver's history (sampling).
fn inputs(model: &UNetConfig, c: &Census) -> f64 {
    (model.in_channels as f64 + 3.0 * model.out_channels as f64) * c.voxels as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(model: UNetConfig, side: usize) -> RunShape {
        RunShape {
            model,
            grid: [side; 3],
            batch: 1,
            half: true,
            checkpointing: ActivationCheckpointing::None,
            strict_fp32: false,
        }
    }

    /// What each setting is expected to change, in the direction and the rough size it changes.
    #[test]
    fn settings_move_the_plan_the_way_they_should() {
        // The whole-head training plan at 128^3 with one setting changed.
        let with = |change: fn(&mut RunShape)| {
            let mut s = shape(UNetConfig::whole_head(), 128);
            change(&mut s);
            training(&s, true, Allocator::Cuda)
        };
        let bf16 = with(|_| ());
        let fp32 = with(|s| s.half = false);
        assert_eq!(bf16.parameters, 40_226_433);
        // Twice the bytes a value, but the attention weights' f32 softmax output in both.
        let c = census(&UNetConfig::whole_head(), [128; 3]);
        assert_eq!(
            2 * bf16.part(parts::KEPT) - fp32.part(parts::KEPT),
            c.saved_attention * (2 * 6 - 8)
        );
        let batch2 = with(|s| s.batch = 2);
        assert_eq!(batch2.part(parts::KEPT), 2 * bf16.part(parts::KEPT));
        let blocks = with(|s| s.checkpointing = ActivationCheckpointing::Blocks);
        // Either mode of activation checkpointing saves a sixth or more (the decoder's joined
        // inputs, which plain training no longer keeps, were much of what they dropped).
        let norms = with(|s| s.checkpointing = ActivationCheckpointing::Norms);
        for mode in [&blocks, &norms] {
            assert!(mode.total() < bf16.total() * 5 / 6);
        }
        let sample = sampling(&shape(UNetConfig::whole_head(), 128), Allocator::Cuda);
        assert!(sample.total() < blocks.total().min(norms.total()));
        // No EMA, no EMA part.
        let bench = training(
            &shape(UNetConfig::whole_head(), 128),
            false,
            Allocator::Cuda,
        );
        let ema = (bf16.total() - bench.total()) as f64;
        assert!((ema / (4.0 * 40_226_433.0 * (1.0 + POOL_SLACK)) - 1.0).abs() < 1e-6);
    }

    /// Settings no machine could hold give a plan that says so, not an overflow.
    #[test]
    fn absurd_settings_saturate() {
        let absurd = RunShape {
            model: UNetConfig {
                model_channels: 100_000,
                num_res_blocks: 100_000,
                ..UNetConfig::whole_head()
            },
            grid: [1 << 40; 3],
            batch: usize::MAX,
            half: false,
            checkpointing: ActivationCheckpointing::None,
            strict_fp32: false,
        };
        assert_eq!(training(&absurd, true, Allocator::Cuda).total(), u64::MAX);
        assert_eq!(sampling(&absurd, Allocator::Host).total(), u64::MAX);
        let batch = RunShape {
            batch: 1_000_000,
            ..shape(UNetConfig::whole_head(), 128)
        };
        assert!(training(&batch, true, Allocator::Cuda).total() > 1 << 50);
    }
}
