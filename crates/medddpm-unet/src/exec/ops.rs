//! How each operation of a forward pass runs: [`Ctx`] (layout, compute settings, optional
//! timer) and the convolution, GroupNorm and pointwise kernels it dispatches to.

use std::cell::RefCell;
use std::time::Instant;

use burn::nn::conv::Conv3d;
use burn::nn::{GroupNorm, PaddingConfig3d};
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{ElementConversion, Tensor};
use medddpm_kernels::norm::NormInput;
use medddpm_kernels::primitive::float;
use medddpm_kernels::{Compute, Conv3dSpec, GroupNormSpec, KernelBackend, Layout, NormEngine};

use super::profile::{OpClass, OpProfile, OpStats};

/// Per-call settings threaded through the blocks.
pub(crate) struct Ctx<'a, B: Backend> {
    pub layout: Layout,
    pub compute: Compute,
    pub profile: Option<&'a RefCell<OpProfile>>,
    pub device: B::Device,
    /// A GroupNorm + SiLU and the convolution after it run as one operation that recomputes
    /// the normalisation in the backward pass (activation checkpointing `norms`).
    pub recompute_norms: bool,
    /// Decoder ResBlocks take [current, skip] as two parts where they can
    /// ([`Ctx::splits`]): when the pass records a graph for training (or is checkpointing's
    /// forward through the autodiff backend), whose backward pass would keep their join. A
    /// pass without one joins them: the join is transient there, and the parts cost launches.
    pub decoder_parts: bool,
}

impl<B: KernelBackend> Ctx<'_, B> {
    /// Runs `f`; when profiling, synchronises before and after and charges the time to `class`.
    pub fn op<const D: usize>(
        &self,
        class: OpClass,
        f: impl FnOnce() -> Tensor<B, D>,
    ) -> Tensor<B, D> {
        let Some(profile) = self.profile else {
            return f();
        };
        let mut failed = B::sync(&self.device).is_err();
        let start = Instant::now();
        let out = f();
        failed |= B::sync(&self.device).is_err();
        let ms = start.elapsed().as_secs_f64() * 1e3;
        let mut p = profile.borrow_mut();
        *p.ms.entry(class.name().to_string()).or_default() += ms;
        let calls = p.calls.entry(class.name().to_string()).or_default();
        *calls += 1;
        let index = *calls;
        p.sync_failed |= failed;
        if p.check_finite && p.first_non_finite.is_none() {
            let flag =
                |b: Tensor<B, 1, burn::tensor::Bool>| b.int().into_scalar().elem::<i64>() != 0;
            let bad = flag(out.clone().is_nan().any()) || flag(out.clone().is_inf().any());
            if bad {
                p.first_non_finite = Some(format!(
                    "{} #{index}, output shape {:?}",
                    class.name(),
                    out.dims()
                ));
            }
        }
        if p.record_stats {
            let op = format!("{} #{index}", class.name());
            p.stats.push(OpStats::of(op, &out, self.layout));
        }
        out
    }

    /// A 3-D convolution of an activation in this layout, on the backend's convolution engine
    /// ([`KernelBackend`]).
    pub fn conv(&self, conv: &Conv3d<B>, x: Tensor<B, 5>) -> Tensor<B, 5> {
        self.op(OpClass::Convolution, || match self.layout {
            Layout::Ndhwc if is_pointwise(conv) => {
                let y = pointwise_channels_last(conv, x, self.compute);
                match conv.bias.as_ref() {
                    Some(bias) => {
                        let c = bias.dims()[0];
                        add_per_channel(y, bias.val().reshape([1, c]))
                    }
                    None => y,
                }
            }
            layout => conv3d(x, conv, bias_of(conv), self.compute, layout),
        })
    }

    /// [`Ctx::conv`] without its bias, for a caller that adds it in the pass that follows (a
    /// ResBlock's residual sum: one pass over the volume fewer).
    pub fn conv_unbiased(&self, conv: &Conv3d<B>, x: Tensor<B, 5>) -> Tensor<B, 5> {
        self.op(OpClass::Convolution, || match self.layout {
            Layout::Ndhwc if is_pointwise(conv) => pointwise_channels_last(conv, x, self.compute),
            layout => conv3d(x, conv, None, self.compute, layout),
        })
    }

    /// GroupNorm of an activation in this layout, with statistics in f32 (or f64) whatever the
    /// compute dtype (as mixed-precision training does: the statistics need f32's mantissa).
    pub fn norm(&self, norm: &GroupNorm<B>, x: Tensor<B, 5>) -> Tensor<B, 5> {
        self.op(OpClass::Normalisation, || {
            group_norm(norm, x, None, self.layout, self.compute.norm_engine, false)
        })
    }

    /// SiLU(GroupNorm(x)) as one operation of the backend extension (the U-Net applies SiLU
    /// after every GroupNorm but the attention block's).
    pub fn norm_silu(&self, norm: &GroupNorm<B>, x: Tensor<B, 5>) -> Tensor<B, 5> {
        self.op(OpClass::Normalisation, || {
            group_norm(norm, x, None, self.layout, self.compute.norm_engine, true)
        })
    }

    /// conv(SiLU(GroupNorm(x [+ shift]))) without the convolution's bias (a 3x3x3 one): with
    /// [`Ctx::recompute_norms`] one operation of the backend extension whose backward pass
    /// recomputes the normalisation instead of keeping its output; else the two operations.
    pub fn norm_silu_conv_unbiased(
        &self,
        norm: &GroupNorm<B>,
        x: Tensor<B, 5>,
        shift: Option<Tensor<B, 2>>,
        conv: &Conv3d<B>,
    ) -> Tensor<B, 5> {
        if !self.recompute_norms || is_pointwise(conv) {
            let h = match shift {
                Some(shift) => self.norm_silu_shifted(norm, x, shift),
                None => self.norm_silu(norm, x),
            };
            return self.conv_unbiased(conv, h);
        }
        let input = NormInput::Shifted(float(x), shift.map(float));
        self.recomputed_norm_conv(norm, input, conv)
    }

    /// conv(SiLU(GroupNorm(input))) as one operation of the backend extension whose backward
    /// pass recomputes the normalisation ([`Ctx::recompute_norms`]).
    pub(super) fn recomputed_norm_conv(
        &self,
        norm: &GroupNorm<B>,
        input: NormInput<FloatTensor<B>>,
        conv: &Conv3d<B>,
    ) -> Tensor<B, 5> {
        self.op(OpClass::Convolution, || {
            let (gamma, beta) = norm_params(norm, &conv.weight.device());
            let spec = norm_spec(norm, self.layout, self.compute.norm_engine, true);
            let conv_spec = conv_spec(conv, self.compute, self.layout);
            let weight = conv.weight.val();
            medddpm_kernels::norm::norm_conv3d(input, gamma, beta, spec, weight, conv_spec)
        })
    }

    /// SiLU(GroupNorm(x + shift)), `shift` `[b, c]` added per batch item and channel inside the
    /// normalisation's passes (a ResBlock's first convolution bias and time embedding: no pass
    /// over the volume of their own, and their gradients from the normalisation's sums).
    pub fn norm_silu_shifted(
        &self,
        norm: &GroupNorm<B>,
        x: Tensor<B, 5>,
        shift: Tensor<B, 2>,
    ) -> Tensor<B, 5> {
        self.op(OpClass::Normalisation, || {
            group_norm(
                norm,
                x,
                Some(shift),
                self.layout,
                self.compute.norm_engine,
                true,
            )
        })
    }
}

/// `conv` applied to an activation `x` in `layout`'s order through the backend extension.
/// burn's `Conv3d` module supplies the weights and geometry; the U-Net only builds dilation-1,
/// single-group convolutions with symmetric padding.
///
/// Channels-last: the engine receives the `[b, d, h, w, c]` buffer as a permuted view and
/// returns its channels-last result the same way, viewed back without a copy; the bias is added
/// to that contiguous view, so the sum is channels-last for the operations that follow. (With
/// the bias added to the channels-first view, an H100 run spent 278 / 112 ms in normalisation /
/// elementwise per forward against 182 / 60 ms before; a sum written channels-first and read
/// strided is the likely cause, not yet confirmed on the GPU.)
fn conv3d<B: KernelBackend>(
    x: Tensor<B, 5>,
    conv: &Conv3d<B>,
    bias: Option<Tensor<B, 1>>,
    compute: Compute,
    layout: Layout,
) -> Tensor<B, 5> {
    let spec = conv_spec(conv, compute, layout);
    let weight = conv.weight.val();
    match layout {
        Layout::Ncdhw => medddpm_kernels::conv3d(x, weight, bias, spec),
        Layout::Ndhwc => {
            let y = medddpm_kernels::conv3d(x.permute([0, 4, 1, 2, 3]), weight, None, spec)
                .permute([0, 2, 3, 4, 1]);
            match bias {
                Some(bias) => {
                    let c = bias.dims()[0];
                    add_per_channel(y, bias.reshape([1, c]))
                }
                None => y,
            }
        }
    }
}

/// What the engine needs of burn's `conv` module in `layout`.
pub(super) fn conv_spec<B: Backend>(
    conv: &Conv3d<B>,
    compute: Compute,
    layout: Layout,
) -> Conv3dSpec {
    let padding = match &conv.padding {
        PaddingConfig3d::Explicit(a, b, c) => [*a, *b, *c],
        PaddingConfig3d::Valid => [0, 0, 0],
        // `Same` with stride 1 and odd kernels pads by half the kernel.
        PaddingConfig3d::Same => conv.kernel_size.map(|k| k / 2),
    };
    debug_assert!(conv.groups == 1 && conv.dilation == [1, 1, 1]);
    Conv3dSpec {
        stride: conv.stride,
        padding,
        compute: Compute { layout, ..compute },
    }
}

/// The convolution's bias, if it has one.
fn bias_of<B: Backend>(conv: &Conv3d<B>) -> Option<Tensor<B, 1>> {
    conv.bias.as_ref().map(|b| b.val())
}

/// The sum of `terms` (activations in `layout`'s logical shape, at least one) and per-channel
/// `biases` `[c]`, as one expression that burn's fusion compiles into one kernel (a bias added
/// alone between two custom operations is a pass of its own). Channels-last is viewed as
/// `[b, d, h * w, c]` as in [`add_per_channel`].
pub(crate) fn residual_sum<B: Backend>(
    terms: Vec<Tensor<B, 5>>,
    biases: Vec<Tensor<B, 1>>,
    layout: Layout,
) -> Tensor<B, 5> {
    let dims = terms[0].dims();
    let c = dims[layout.channel_dim()];
    let total = "a residual sum of at least one term";
    match layout {
        Layout::Ncdhw => {
            let sum = terms.into_iter().reduce(|sum, t| sum + t).expect(total);
            add_biases(sum, biases, [1, c, 1, 1, 1])
        }
        Layout::Ndhwc => {
            let [n, d, h, w, _] = dims;
            let view = [n, d, h * w, c];
            let sum = terms.into_iter().map(|t| t.reshape(view));
            let sum = sum.reduce(|sum, t| sum + t).expect(total);
            add_biases(sum, biases, [1, 1, 1, c]).reshape(dims)
        }
    }
}

/// `sum` plus each bias broadcast from `per_channel`.
fn add_biases<B: Backend, const D: usize>(
    sum: Tensor<B, D>,
    biases: Vec<Tensor<B, 1>>,
    per_channel: [usize; D],
) -> Tensor<B, D> {
    biases
        .into_iter()
        .fold(sum, |sum, bias| sum + bias.reshape(per_channel))
}

/// `y + add` for a channels-last `y` `[b, d, h, w, c]` and `add` `[b or 1, c]`, with `y` viewed
/// as `[b, d, h * w, c]`: autodiff then sums the gradient for `add` in two reductions (over
/// `d`, then over `h * w`) instead of one per spatial axis. (One reduction over all the voxels
/// would leave only `c` outputs to spread over the GPU.)
fn add_per_channel<B: Backend>(y: Tensor<B, 5>, add: Tensor<B, 2>) -> Tensor<B, 5> {
    let dims = y.dims();
    let [b, d, h, w, c] = dims;
    let rows = add.dims()[0];
    (y.reshape([b, d, h * w, c]) + add.reshape([rows, 1, 1, c])).reshape(dims)
}

/// Whether `conv` is a plain 1x1x1 convolution (stride 1, no padding, one group).
fn is_pointwise<B: Backend>(conv: &Conv3d<B>) -> bool {
    conv.kernel_size == [1, 1, 1]
        && conv.stride == [1, 1, 1]
        && conv.groups == 1
        && !matches!(conv.padding, PaddingConfig3d::Explicit(a, b, c) if a + b + c > 0)
}

/// A 1x1x1 convolution (without its bias) of channels-last activations `[b, d, h, w, c_in]`:
/// channels-last is exactly the layout that makes it a product of the voxels-by-channels
/// matrix with the transposed kernel ([`medddpm_kernels::pointwise`]: cuBLAS on CUDA with
/// cuDNN, burn's `matmul` elsewhere): a product trained faster than burn's 1x1x1 convolution in
/// this layout and than cuDNN's, whose bf16 weight gradient for these shapes is far slower
/// (the optimisation log has the figures).
fn pointwise_channels_last<B: KernelBackend>(
    conv: &Conv3d<B>,
    x: Tensor<B, 5>,
    compute: Compute,
) -> Tensor<B, 5> {
    let [b, d, h, w, c_in] = x.dims();
    let c_out = conv.weight.dims()[0];
    let weight = conv.weight.val().reshape([c_out, c_in]);
    medddpm_kernels::pointwise(x.reshape([b, d * h * w, c_in]), weight, compute)
        .reshape([b, d, h, w, c_out])
}

/// `x · weightᵀ + bias` for channels-last tokens `x` `[batch, n, c_in]` and a kernel-size-1
/// weight `[c_out, c_in]`: a pointwise convolution in channels-last memory.
pub(crate) fn pointwise_tokens<B: KernelBackend>(
    x: Tensor<B, 3>,
    weight: Tensor<B, 2>,
    bias: Option<Tensor<B, 1>>,
    compute: Compute,
) -> Tensor<B, 3> {
    let c_out = weight.dims()[0];
    let y = medddpm_kernels::pointwise(x, weight, compute);
    match bias {
        Some(bias) => y + bias.reshape([1, 1, c_out]),
        None => y,
    }
}

/// GroupNorm (then SiLU when `silu`) of `x` in `layout`'s logical shape through the backend
/// extension ([`medddpm_kernels::group_norm`]: a hand-written backward that keeps the input and
/// the per-group statistics). burn's `GroupNorm` module supplies the parameters; without affine
/// parameters the identity ones are used.
pub fn group_norm<B: KernelBackend>(
    norm: &GroupNorm<B>,
    x: Tensor<B, 5>,
    shift: Option<Tensor<B, 2>>,
    layout: Layout,
    engine: NormEngine,
    silu: bool,
) -> Tensor<B, 5> {
    let (gamma, beta, spec) = norm_parts(norm, &x, layout, engine, silu);
    medddpm_kernels::norm::group_norm_shifted(x, shift, gamma, beta, spec)
}

/// burn's `GroupNorm` module as the extension takes it, for activations like `x`: gamma and
/// beta (the identity ones where it has no affine parameters) and the spec.
fn norm_parts<B: KernelBackend>(
    norm: &GroupNorm<B>,
    x: &Tensor<B, 5>,
    layout: Layout,
    engine: NormEngine,
    silu: bool,
) -> (Tensor<B, 1>, Tensor<B, 1>, GroupNormSpec) {
    let (gamma, beta) = norm_params(norm, &x.device());
    (gamma, beta, norm_spec(norm, layout, engine, silu))
}

/// The extension's spec of burn's `GroupNorm` module.
pub(super) fn norm_spec<B: Backend>(
    norm: &GroupNorm<B>,
    layout: Layout,
    engine: NormEngine,
    silu: bool,
) -> GroupNormSpec {
    GroupNormSpec {
        num_groups: norm.num_groups,
        epsilon: norm.epsilon,
        silu,
        layout,
        engine,
    }
}

/// gamma and beta of burn's `GroupNorm` module (the identity ones where it has no affine
/// parameters).
pub(super) fn norm_params<B: Backend>(
    norm: &GroupNorm<B>,
    device: &B::Device,
) -> (Tensor<B, 1>, Tensor<B, 1>) {
    let c = norm.num_channels;
    let gamma = norm.gamma.as_ref().map(|p| p.val());
    let beta = norm.beta.as_ref().map(|p| p.val());
    let gamma = gamma.unwrap_or_else(|| Tensor::ones([c], device));
    let beta = beta.unwrap_or_else(|| Tensor::zeros([c], device));
    (gamma, beta)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::nn::conv::Conv3dConfig;
    use burn::tensor::Distribution;

    /// A channels-last context on the default device, without profiling.
    fn channels_last<B: Backend>() -> Ctx<'static, B> {
        Ctx {
            layout: Layout::Ndhwc,
            compute: Compute {
                layout: Layout::Ndhwc,
                ..Default::default()
            },
            profile: None,
            device: Default::default(),
            recompute_norms: false,
            decoder_parts: false,
        }
    }

    #[test]
    fn channels_last_pointwise_convolution_is_the_1x1x1_convolution() {
        let device = Default::default();
        let ctx = channels_last::<Flex>();
        // 24 input channels: a depth burn's wgpu matmul got wrong before the double-buffering
        // patch in vendor/cubek-matmul.
        for c_in in [8, 24] {
            let conv = Conv3dConfig::new([c_in, 16], [1, 1, 1]).init::<Flex>(&device);
            assert!(is_pointwise(&conv));
            let x = Tensor::<Flex, 5>::random(
                [2, c_in, 3, 4, 5],
                Distribution::Normal(0.0, 1.0),
                &device,
            );
            let expected = conv.forward(x.clone()).permute([0, 2, 3, 4, 1]);
            let got = ctx.conv(&conv, x.permute([0, 2, 3, 4, 1]));
            assert_eq!(got.dims(), [2, 3, 4, 5, 16]);
            let diff = (got - expected).abs().max().into_scalar().elem::<f32>();
            assert!(diff < 1e-5, "{c_in} channels: max abs difference {diff}");
        }
        let strided = Conv3dConfig::new([8, 8], [1, 1, 1])
            .with_stride([2, 2, 2])
            .init::<Flex>(&device);
        let padded = Conv3dConfig::new([8, 8], [1, 1, 1])
            .with_padding(PaddingConfig3d::Explicit(1, 1, 1))
            .init::<Flex>(&device);
        let wide = Conv3dConfig::new([8, 8], [3, 3, 3]).init::<Flex>(&device);
        assert!(!is_pointwise(&strided) && !is_pointwise(&padded) && !is_pointwise(&wide));
    }

    #[test]
    fn pointwise_convolution_has_the_convolutions_gradients() {
        use burn::backend::Autodiff;
        type A = Autodiff<Flex>;
        let device = Default::default();
        let ctx = channels_last::<A>();
        let conv = Conv3dConfig::new([6, 5], [1, 1, 1]).init::<A>(&device);
        let x =
            Tensor::<A, 5>::random([2, 6, 4, 8, 8], Distribution::Default, &device).require_grad();
        let probe = Tensor::<A, 5>::random([2, 5, 4, 8, 8], Distribution::Default, &device);
        let want = conv.forward(x.clone());
        let grads_want = want.clone().mul(probe.clone()).sum().backward();
        let got = ctx
            .conv(&conv, x.clone().permute([0, 2, 3, 4, 1]))
            .permute([0, 4, 1, 2, 3]);
        let grads_got = got.clone().mul(probe).sum().backward();
        let rel = |a: Tensor<Flex, 5>, b: Tensor<Flex, 5>| {
            (a - b.clone()).abs().max().into_scalar().elem::<f32>()
                / b.abs().max().into_scalar().elem::<f32>()
        };
        let rel2 = |a: Tensor<Flex, 2>, b: Tensor<Flex, 2>| rel(a.unsqueeze(), b.unsqueeze());
        assert!(rel(got.inner(), want.inner()) < 1e-5);
        assert!(rel(x.grad(&grads_got).unwrap(), x.grad(&grads_want).unwrap()) < 1e-5);
        let dw = |g| conv.weight.grad(g).unwrap();
        assert!(
            rel(dw(&grads_got), dw(&grads_want)) < 1e-5,
            "weight gradient"
        );
        let db = |g| conv.bias.as_ref().unwrap().grad(g).unwrap();
        assert!(
            rel2(db(&grads_got).unsqueeze(), db(&grads_want).unsqueeze()) < 1e-5,
            "bias gradient"
        );
    }

    /// Activation checkpointing `norms` takes the fused path: every ResBlock's two
    /// GroupNorm + SiLU leave the normalisation class (they run inside the convolution's
    /// operation), the attention blocks' and the head's stay.
    #[test]
    fn recomputing_norms_fuses_each_resblocks_normalisations_into_their_convolutions() {
        use burn::backend::Autodiff;
        type A = Autodiff<Flex>;
        let _turn = medddpm_diffusion::autodiff_turn();
        let device = Default::default();
        let unet = crate::UNetConfig::tiny().init::<A>(&device).unwrap();
        let calls = |recompute: bool| {
            let profile = RefCell::new(OpProfile::default());
            let x = Tensor::<A, 5>::random([1, 3, 8, 8, 8], Distribution::Default, &device);
            let sinusoid = unet.sinusoid(&[5], &device);
            let _ = unet.forward_ctx(x, sinusoid, Some(&profile), recompute);
            let p = profile.into_inner();
            let count = |class: &str| p.calls.get(class).copied().unwrap_or(0);
            (count("normalisation"), count("convolution"))
        };
        let (norms_plain, convs_plain) = calls(false);
        let (norms_fused, convs_fused) = calls(true);
        let resblocks = unet
            .input_blocks
            .iter()
            .chain(&unet.output_blocks)
            .filter(|b| b.res.is_some())
            .count()
            + 2;
        assert_eq!(norms_plain - norms_fused, 2 * resblocks);
        assert_eq!(
            convs_plain, convs_fused,
            "each fused pair is one convolution call"
        );
    }
}
