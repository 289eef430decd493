//! The same convolutions and gradients computed another way where that is much faster: the
//! data gradient of a "same"-padded convolution as a forward convolution, the weight gradient
//! with zero output channels added, a forward convolution of few input channels with zero
//! input channels added, and a batch too large for one cuDNN call as several calls.

use burn::tensor::Tensor;

use super::ops::{conv3d, conv3d_data_grad, conv3d_weight_grad};
use crate::compute::Layout;
use crate::extension::KernelBackend;
use crate::primitive::{float, tensor};
use crate::reference::conv_spec::Conv3dSpec;

/// Padding of half an odd kernel on every axis, at any stride (what [`data_grad_via_forward`]
/// needs).
pub(crate) fn is_same_padded(kernel: [usize; 3], spec: &Conv3dSpec) -> bool {
    (0..3).all(|i| kernel[i] % 2 == 1 && spec.padding[i] == kernel[i] / 2)
}

/// The weight gradient with `dL/dy` padded by zero channels up to `padded` output channels
/// (the extra rows of the result are zero and dropped). The padding is written in `dL/dy`'s
/// memory order, so channels-last stays channels-last.
pub fn weight_grad_padded<B: KernelBackend>(
    x: Tensor<B, 5>,
    weight: Tensor<B, 5>,
    grad_out: Tensor<B, 5>,
    spec: Conv3dSpec,
    padded: usize,
) -> Tensor<B, 5> {
    let [c_out, c_in, kd, kh, kw] = weight.dims();
    let device = grad_out.device();
    let grad_out = pad_channels(grad_out, padded, spec.compute.layout);
    let weight = Tensor::<B, 5>::zeros([padded, c_in, kd, kh, kw], (&device, weight.dtype()));
    conv3d_weight_grad(x, weight, grad_out, spec).narrow(0, 0, c_out)
}

/// `x` `[b, c, d, h, w]` with zero channels added up to `padded`, written in `layout`'s memory
/// order (channels-last stays channels-last).
fn pad_channels<B: KernelBackend>(x: Tensor<B, 5>, padded: usize, layout: Layout) -> Tensor<B, 5> {
    let [b, c, d, h, w] = x.dims();
    let options = (&x.device(), x.dtype());
    match layout {
        Layout::Ncdhw => {
            let zeros = Tensor::<B, 5>::zeros([b, padded - c, d, h, w], options);
            Tensor::cat(vec![x, zeros], 1)
        }
        Layout::Ndhwc => {
            crate::channels::pad_last(x.permute([0, 2, 3, 4, 1]), padded).permute([0, 4, 1, 2, 3])
        }
    }
}

/// The convolution with `x` and the kernel padded by zero input channels up to `padded` (the
/// products with the zeros add nothing).
pub fn forward_in_padded<B: KernelBackend>(
    x: Tensor<B, 5>,
    weight: Tensor<B, 5>,
    spec: Conv3dSpec,
    padded: usize,
) -> Tensor<B, 5> {
    let x = pad_channels(x, padded, spec.compute.layout);
    let weight = pad_channels(weight, padded, Layout::Ncdhw);
    conv3d(x, weight, None, spec)
}

/// Whether [`data_grad_via_forward`] applies: a strided convolution whose padding is half its
/// odd kernel on every axis (the U-Net's stride-2 downsampling).
pub fn is_strided_same(kernel: [usize; 3], spec: &Conv3dSpec) -> bool {
    spec.stride.iter().any(|&s| s > 1) && is_same_padded(kernel, spec)
}

/// The data gradient of a "same"-padded convolution (any stride; [`is_strided_same`] is where
/// the GPU engines use it) as a stride-1 forward convolution on `B`'s engine: the incoming gradient with `stride - 1` zeros
/// after each voxel (per axis, cut to the input's size), correlated with the kernel flipped in
/// space and with its two channel axes swapped, at the same padding. The arithmetic is the
/// strided data gradient's plus products with zeros.
///
/// Why: on the H100 cuDNN's strided data gradient in channels-last took 195 ms in FP32 for the
/// 64-channel 128^3 downsampling, where the stride-1 forward convolution of the same size took
/// 12 ms (`docs/benchmarks/README.md`); burn's own strided data gradient falls back
/// to a direct kernel without tensor cores.
///
/// `x_spatial` is the input's `[d, h, w]`; `weight` and `grad_out` are as for
/// [`KernelBackend::conv3d_data_grad`] (activations in `spec.compute.layout`'s memory order).
pub fn data_grad_via_forward<B: KernelBackend>(
    x_spatial: [usize; 3],
    weight: Tensor<B, 5>,
    grad_out: Tensor<B, 5>,
    spec: Conv3dSpec,
) -> Tensor<B, 5> {
    let [n, c, od, oh, ow] = grad_out.dims();
    let [sd, sh, sw] = spec.stride;
    let [d, h, w] = x_spatial;
    let options = (&grad_out.device(), grad_out.dtype());
    let spread = match spec.compute.layout {
        Layout::Ndhwc => {
            let g = grad_out
                .permute([0, 2, 3, 4, 1])
                .reshape([n, od, 1, oh, 1, ow, 1, c]);
            Tensor::<B, 8>::zeros([n, od, sd, oh, sh, ow, sw, c], options)
                .slice_assign([0..n, 0..od, 0..1, 0..oh, 0..1, 0..ow, 0..1, 0..c], g)
                .reshape([n, od * sd, oh * sh, ow * sw, c])
                .slice([0..n, 0..d, 0..h, 0..w, 0..c])
                .permute([0, 4, 1, 2, 3])
        }
        Layout::Ncdhw => {
            let g = grad_out.reshape([n, c, od, 1, oh, 1, ow, 1]);
            Tensor::<B, 8>::zeros([n, c, od, sd, oh, sh, ow, sw], options)
                .slice_assign([0..n, 0..c, 0..od, 0..1, 0..oh, 0..1, 0..ow, 0..1], g)
                .reshape([n, c, od * sd, oh * sh, ow * sw])
                .slice([0..n, 0..c, 0..d, 0..h, 0..w])
        }
    };
    let kernel = weight.flip([2, 3, 4]).swap_dims(0, 1);
    let spec = Conv3dSpec {
        stride: [1, 1, 1],
        ..spec
    };
    tensor(B::conv3d_forward(float(spread), float(kernel), spec))
}

/// The most values one tensor operand of a cuDNN call may hold: its descriptors index with
/// 32-bit integers, and it refuses larger tensors (`CUDNN_STATUS_NOT_SUPPORTED`; burn's fallback
/// convolution then took 187 ms a call for BraTS's full-resolution decoder input at batch 4).
pub const CUDNN_MAX_VALUES: usize = i32::MAX as usize;

/// Ranges of examples, in order, such that each range's largest operand holds at most
/// `max_values` values, where `per_example` is the largest operand's values for one example;
/// `None` where one call suffices (or where even one example is too large: splitting the batch
/// cannot help, and the caller runs as it would have).
pub fn batch_chunks(
    batch: usize,
    per_example: usize,
    max_values: usize,
) -> Option<Vec<std::ops::Range<usize>>> {
    let per_call = max_values / per_example.max(1);
    if per_call == 0 || per_call >= batch {
        return None;
    }
    // As even as the count allows: the same shapes for every call where the batch divides.
    let calls = batch.div_ceil(per_call);
    let base = batch / calls;
    let extra = batch % calls;
    let mut start = 0;
    Some(
        (0..calls)
            .map(|i| {
                let len = base + usize::from(i < extra);
                start += len;
                start - len..start
            })
            .collect(),
    )
}

/// The examples `range` of `t` (a view: the batch is the outermost axis in both layouts).
fn examples<B: KernelBackend>(t: &Tensor<B, 5>, range: std::ops::Range<usize>) -> Tensor<B, 5> {
    t.clone().narrow(0, range.start, range.len())
}

/// The parts joined along the batch in `layout`'s memory order, so channels-last stays
/// channels-last without a second copy.
fn join_batch<B: KernelBackend>(parts: Vec<Tensor<B, 5>>, layout: Layout) -> Tensor<B, 5> {
    match layout {
        Layout::Ncdhw => Tensor::cat(parts, 0),
        Layout::Ndhwc => {
            let parts = parts.into_iter().map(|t| t.permute([0, 2, 3, 4, 1]));
            Tensor::cat(parts.collect(), 0).permute([0, 4, 1, 2, 3])
        }
    }
}

/// The forward convolution as one call per range of examples (see [`batch_chunks`]), joined.
pub fn forward_in_batch_chunks<B: KernelBackend>(
    x: Tensor<B, 5>,
    weight: Tensor<B, 5>,
    spec: Conv3dSpec,
    chunks: &[std::ops::Range<usize>],
) -> Tensor<B, 5> {
    let parts = chunks
        .iter()
        .map(|r| conv3d(examples(&x, r.clone()), weight.clone(), None, spec))
        .collect();
    join_batch(parts, spec.compute.layout)
}

/// `gradient` of each range of examples' `(x, dL/dy)` views, in order.
fn per_range<B: KernelBackend>(
    (x, grad_out): (&Tensor<B, 5>, &Tensor<B, 5>),
    chunks: &[std::ops::Range<usize>],
    gradient: impl Fn(Tensor<B, 5>, Tensor<B, 5>) -> Tensor<B, 5>,
) -> Vec<Tensor<B, 5>> {
    let part = |r: &std::ops::Range<usize>| {
        gradient(examples(x, r.clone()), examples(grad_out, r.clone()))
    };
    chunks.iter().map(part).collect()
}

/// The data gradient as one call per range of examples, joined.
pub fn data_grad_in_batch_chunks<B: KernelBackend>(
    x: Tensor<B, 5>,
    weight: Tensor<B, 5>,
    grad_out: Tensor<B, 5>,
    spec: Conv3dSpec,
    chunks: &[std::ops::Range<usize>],
) -> Tensor<B, 5> {
    let parts = per_range((&x, &grad_out), chunks, |x, dy| {
        conv3d_data_grad(x, weight.clone(), dy, spec)
    });
    join_batch(parts, spec.compute.layout)
}

/// The weight gradient as the sum of one call's per range of examples, added in f32 (each
/// call accumulates in f32 inside, and the sum of a few 16-bit partials in f32 rounds once).
pub fn weight_grad_in_batch_chunks<B: KernelBackend>(
    x: Tensor<B, 5>,
    weight: Tensor<B, 5>,
    grad_out: Tensor<B, 5>,
    spec: Conv3dSpec,
    chunks: &[std::ops::Range<usize>],
) -> Tensor<B, 5> {
    let dtype = weight.dtype();
    let parts = per_range((&x, &grad_out), chunks, |x, dy| {
        conv3d_weight_grad(x, weight.clone(), dy, spec).cast(burn::tensor::DType::F32)
    });
    let sum = parts.into_iter().reduce(|a, b| a + b);
    sum.expect("at least one range of examples").cast(dtype)
}

#[cfg(test)]
mod tests {
    use super::batch_chunks;

    #[test]
    fn batch_chunks_keep_each_call_within_the_limit_and_cover_the_batch_evenly() {
        // BraTS's full-resolution decoder input: 128 x 192 x 192 x 144 values an example.
        let brats = 128 * 192 * 192 * 144;
        assert_eq!(batch_chunks(3, brats, i32::MAX as usize), None);
        assert_eq!(
            batch_chunks(4, brats, i32::MAX as usize),
            Some(vec![0..2, 2..4])
        );
        assert_eq!(batch_chunks(7, 10, 30), Some(vec![0..3, 3..5, 5..7]));
        assert_eq!(
            batch_chunks(5, 10, 10),
            Some((0..5).map(|i| i..i + 1).collect())
        );
        // Nothing to split, or nothing splitting can do.
        assert_eq!(batch_chunks(1, 100, 10), None);
        assert_eq!(batch_chunks(4, 100, 10), None);
        for batch in 1..40 {
            for per_call in 1..12 {
                if let Some(chunks) = batch_chunks(batch, 3, 3 * per_call) {
                    assert_eq!(chunks.first().map(|r| r.start), Some(0));
                    assert_eq!(chunks.last().map(|r| r.end), Some(batch));
                    assert!(chunks.windows(2).all(|w| w[0].end == w[1].start));
                    assert!(chunks.iter().all(|r| !r.is_empty() && r.len() <= per_call));
                    let (min, max) = chunks.iter().fold((usize::MAX, 0), |(a, b), r| {
                        (a.min(r.len()), b.max(r.len()))
                    });
                    assert!(max - min <= 1, "{batch} by {per_call}: {chunks:?}");
                }
            }
        }
    }
}
