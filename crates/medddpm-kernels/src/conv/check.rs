//! Agreement checks: an engine against the f32 CPU convolution on the same operands (what
//! `medddpm check-kernels` and the tests run), and the error measure every check uses.

use super::ops::{conv3d, conv3d_data_grad, conv3d_weight_grad};
use super::rewrites::{
    batch_chunks, data_grad_in_batch_chunks, forward_in_batch_chunks, weight_grad_in_batch_chunks,
};
use crate::agreement::{draw_rounded, on_cpu, on_device, rel_l2, seeded_cpu, worse};
use crate::compute::{Compute, Layout};
use crate::extension::KernelBackend;
use crate::reference::conv as reference;
use crate::reference::conv_spec::Conv3dSpec;
use medddpm_ops::layout::in_layout;

/// One convolution geometry for agreement checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ConvCase {
    /// Batch size.
    pub batch: usize,
    /// Input channels.
    pub c_in: usize,
    /// Output channels.
    pub c_out: usize,
    /// Input spatial size (d, h, w).
    pub size: [usize; 3],
    /// Cubic kernel size (1 or 3).
    pub kernel: usize,
    /// Stride on every axis.
    pub stride: usize,
}

impl ConvCase {
    /// The U-Net's geometries (3x3x3 stride 1 and 2, 1x1x1) at small sizes, and odd ones: 1 to
    /// 512 channels, odd and non-cubic volumes. `scale` multiplies the spatial sizes.
    pub fn standard(scale: usize) -> Vec<ConvCase> {
        let c = |batch, c_in, c_out, size: [usize; 3], kernel, stride| ConvCase {
            batch,
            c_in,
            c_out,
            size: size.map(|s| s * scale),
            kernel,
            stride,
        };
        vec![
            c(1, 5, 16, [8, 8, 8], 3, 1), // the input convolution (image + mask channels)
            c(1, 16, 16, [8, 8, 8], 3, 2), // downsampling
            c(2, 24, 8, [5, 6, 7], 3, 1), // odd, non-cubic, batch 2
            c(1, 7, 3, [7, 5, 3], 3, 2),  // odd sizes with stride 2
            c(1, 32, 16, [4, 4, 4], 1, 1), // 1x1x1 skip projection
            c(1, 1, 1, [6, 6, 6], 3, 1),  // one channel
            c(1, 512, 8, [2, 2, 2], 3, 1), // 512 input channels
            c(1, 8, 512, [2, 2, 2], 1, 1), // 512 output channels
            c(1, 64, 64, [8, 8, 8], 3, 1), // the U-Net's widest level: full 64-channel blocks
            c(2, 48, 40, [6, 5, 7], 3, 2), // channels past a block, odd sizes, stride 2
        ]
    }

    /// The spec of this case.
    pub fn spec(&self, compute: Compute) -> Conv3dSpec {
        Conv3dSpec {
            stride: [self.stride; 3],
            padding: [self.kernel / 2; 3],
            compute,
        }
    }
}

/// Relative L2 differences of backend `B`'s engine against the plain-op twin computed in f32 on
/// the CPU (burn's Flex convolution) for one case: `[forward, data gradient, weight gradient]`,
/// each the worse of `calls` calls of each.
///
/// The inputs are drawn on the CPU and rounded to the compute dtype first, so the reference
/// sees exactly the operands the engine sees: what remains is the engine's own arithmetic
/// (f32 summation order; TF32 operand rounding; bf16 output rounding).
pub fn engine_vs_reference<B: KernelBackend>(
    device: &B::Device,
    case: ConvCase,
    compute: Compute,
    seed: u64,
    calls: usize,
) -> [f64; 3] {
    vs_reference::<B>(device, case, compute, (seed, calls), None)
}

/// [`engine_vs_reference`] with the batch given to the engine `per_call` examples at a time
/// through the batch-chunk rewrites (what the cuDNN engine does with a batch past
/// [`super::CUDNN_MAX_VALUES`]): views of the operands at an offset, the parts joined and the
/// weight gradients summed.
pub fn batch_chunks_vs_reference<B: KernelBackend>(
    device: &B::Device,
    case: ConvCase,
    compute: Compute,
    seed: u64,
    per_call: usize,
) -> [f64; 3] {
    vs_reference::<B>(device, case, compute, (seed, 2), Some(per_call))
}

fn vs_reference<B: KernelBackend>(
    device: &B::Device,
    case: ConvCase,
    compute: Compute,
    (seed, calls): (u64, usize),
    per_call: Option<usize>,
) -> [f64; 3] {
    use burn::tensor::Distribution::Normal;
    let cpu = seeded_cpu(seed);
    let dtype = compute.precision.compute_dtype();
    let [d, h, w] = case.size;
    let k = case.kernel;
    let x = draw_rounded(
        [case.batch, case.c_in, d, h, w],
        Normal(0.0, 1.0),
        dtype,
        &cpu,
    );
    let fan_in = (case.c_in * k * k * k) as f64;
    let weight_dist = Normal(0.0, 1.0 / fan_in.sqrt());
    let weight = draw_rounded([case.c_out, case.c_in, k, k, k], weight_dist, dtype, &cpu);
    let spec = case.spec(compute);
    let out = spec.output_size(case.size, [k; 3]);
    let grad_dims = [case.batch, case.c_out, out[0], out[1], out[2]];
    let grad = draw_rounded(grad_dims, Normal(0.0, 1.0), dtype, &cpu);
    let reference_spec = Conv3dSpec {
        compute: Compute {
            layout: Layout::Ncdhw,
            ..compute
        },
        ..spec
    };
    let want = [
        reference::forward(x.clone(), weight.clone(), reference_spec),
        reference::data_grad(x.clone(), weight.clone(), grad.clone(), reference_spec),
        reference::weight_grad(x.clone(), weight.clone(), grad.clone(), reference_spec),
    ];
    let on_b = |t| on_device::<B, 5>(t, device, dtype);
    let layout = compute.layout;
    let (xb, wb, gb) = (
        in_layout(on_b(&x), layout),
        on_b(&weight),
        in_layout(on_b(&grad), layout),
    );
    // More than once: an engine may compute a shape's first calls differently from later ones
    // (cuDNN searches its algorithm in the first, hands the second to the device thread, which
    // times the graph API's plans for 16-bit shapes and still runs the legacy call, and runs the
    // third with the chosen plan: check-kernels asks for three).
    let mut errs = [0.0f64; 3];
    for _ in 0..calls.max(1) {
        let got = match per_call.and_then(|p| batch_chunks(case.batch, 1, p)) {
            None => [
                conv3d(xb.clone(), wb.clone(), None, spec),
                conv3d_data_grad(xb.clone(), wb.clone(), gb.clone(), spec),
                conv3d_weight_grad(xb.clone(), wb.clone(), gb.clone(), spec),
            ],
            Some(chunks) => [
                forward_in_batch_chunks(xb.clone(), wb.clone(), spec, &chunks),
                data_grad_in_batch_chunks(xb.clone(), wb.clone(), gb.clone(), spec, &chunks),
                weight_grad_in_batch_chunks(xb.clone(), wb.clone(), gb.clone(), spec, &chunks),
            ],
        };
        for (i, (g, w)) in got.into_iter().zip(want.iter()).enumerate() {
            errs[i] = worse(errs[i], rel_l2(on_cpu(g), w.clone()));
        }
    }
    errs
}
