//! Building blocks of the reference U-Net. Field names mirror the reference checkpoint keys
//! (`in_layers`, `emb_layers`, `out_layers`, `skip_connection`, `norm`, `qkv`, `proj_out`, `op`,
//! `conv`), with the `nn.Sequential` slots named (`in_layers.0` -> `in_layers.norm`).

use burn::module::Module;
use burn::nn::conv::{Conv1d, Conv1dConfig, Conv3d, Conv3dConfig};
use burn::nn::{GroupNorm, GroupNormConfig, Initializer, Linear, LinearConfig, PaddingConfig3d};
use burn::tensor::activation::softmax;
use burn::tensor::{backend::Backend, Tensor};

use crate::exec::{cast_to, residual_sum, to_stats, Ctx, Layout, OpClass};
use medddpm_kernels::{product, Compute, KernelBackend, ProductSpec};

/// GroupNorm epsilon of PyTorch's `nn.GroupNorm`, which the reference uses.
pub const GROUP_NORM_EPS: f64 = 1e-5;

pub(crate) fn group_norm<B: Backend>(
    groups: usize,
    channels: usize,
    device: &B::Device,
) -> GroupNorm<B> {
    GroupNormConfig::new(groups, channels)
        .with_epsilon(GROUP_NORM_EPS)
        .init(device)
}

/// 3x3x3 convolution with padding 1 (and the given stride), optionally zero-initialised.
pub(crate) fn conv3<B: Backend>(
    c_in: usize,
    c_out: usize,
    stride: usize,
    zero: bool,
    device: &B::Device,
) -> Conv3d<B> {
    let mut config = Conv3dConfig::new([c_in, c_out], [3, 3, 3])
        .with_stride([stride; 3])
        .with_padding(PaddingConfig3d::Explicit(1, 1, 1));
    if zero {
        config = config.with_initializer(Initializer::Zeros);
    }
    config.init(device)
}

/// GroupNorm followed (in the forward passes) by SiLU and a 3x3x3 convolution: the reference's
/// `in_layers` (GN, SiLU, conv) and `out_layers` (GN, SiLU, Dropout(0), conv).
#[derive(Module, Debug)]
pub struct NormActConv<B: Backend> {
    /// GroupNorm(32, c_in).
    pub norm: GroupNorm<B>,
    /// 3x3x3 convolution.
    pub conv: Conv3d<B>,
}

impl<B: Backend> NormActConv<B> {
    /// conv(SiLU(GN(x))) without the convolution's bias, which the caller adds.
    pub(crate) fn forward_unbiased(&self, x: Tensor<B, 5>, ctx: &Ctx<B>) -> Tensor<B, 5>
    where
        B: KernelBackend,
    {
        ctx.norm_silu_conv_unbiased(&self.norm, x, None, &self.conv)
    }

    /// conv(SiLU(GN(x + shift))) without the convolution's bias, `shift` `[batch, c_in]` added
    /// inside the normalisation.
    pub(crate) fn forward_shifted_unbiased(
        &self,
        x: Tensor<B, 5>,
        shift: Tensor<B, 2>,
        ctx: &Ctx<B>,
    ) -> Tensor<B, 5>
    where
        B: KernelBackend,
    {
        ctx.norm_silu_conv_unbiased(&self.norm, x, Some(shift), &self.conv)
    }
}

/// The reference's `emb_layers`: SiLU then Linear(4C -> c_out). The SiLU is applied once per
/// network call by the caller (it is the same for every block), so this holds only the Linear.
#[derive(Module, Debug)]
pub struct EmbLayers<B: Backend> {
    /// Linear(4C -> c_out).
    pub linear: Linear<B>,
}

/// ResBlock with additive time embedding (`use_scale_shift_norm=False`, dropout 0).
#[derive(Module, Debug)]
pub struct ResBlock<B: Backend> {
    /// GN, SiLU, conv c_in -> c_out.
    pub in_layers: NormActConv<B>,
    /// Time-embedding projection added after the first conv.
    pub emb_layers: EmbLayers<B>,
    /// GN, SiLU, zero-initialised conv c_out -> c_out.
    pub out_layers: NormActConv<B>,
    /// 1x1x1 conv when the channel count changes, identity otherwise.
    pub skip_connection: Option<Conv3d<B>>,
}

impl<B: Backend> ResBlock<B> {
    /// A ResBlock from `c_in` to `c_out` channels with a `emb_dim`-wide time embedding.
    pub fn new(
        c_in: usize,
        c_out: usize,
        emb_dim: usize,
        groups: usize,
        device: &B::Device,
    ) -> Self {
        Self {
            in_layers: NormActConv {
                norm: group_norm(groups, c_in, device),
                conv: conv3(c_in, c_out, 1, false, device),
            },
            emb_layers: EmbLayers {
                linear: LinearConfig::new(emb_dim, c_out).init(device),
            },
            out_layers: NormActConv {
                norm: group_norm(groups, c_out, device),
                conv: conv3(c_out, c_out, 1, true, device),
            },
            skip_connection: (c_in != c_out)
                .then(|| Conv3dConfig::new([c_in, c_out], [1, 1, 1]).init(device)),
        }
    }

    /// skip(x) + out_layers(in_layers(x) + emb_layers(emb_act)).
    ///
    /// `emb_act` is SiLU of the time embedding, shape [batch, 4C]. A decoder's
    /// [`BlockInput::Parts`] are joined first only where a group of the first GroupNorm
    /// straddles them; else the block takes them as the parts of `x` ([`Ctx::splits`]).
    pub(crate) fn forward(
        &self,
        x: BlockInput<B>,
        emb_act: Tensor<B, 2>,
        ctx: &Ctx<B>,
    ) -> Tensor<B, 5>
    where
        B: KernelBackend,
    {
        let x = match x {
            BlockInput::Parts(a, b) if !ctx.splits(&self.in_layers.norm, &a) => {
                BlockInput::One(ctx.join(a, b))
            }
            x => x,
        };
        let emb = self.emb_layers.linear.forward(emb_act);
        // The first convolution's bias and the time embedding are one per-channel shift that
        // the next GroupNorm adds in its own passes (no pass over the volume for them).
        let h = match &x {
            BlockInput::One(x) => self.in_layers.forward_unbiased(x.clone(), ctx),
            BlockInput::Parts(a, b) => {
                let NormActConv { norm, conv } = &self.in_layers;
                ctx.norm_silu_conv_joined(norm, a.clone(), b.clone(), conv)
            }
        };
        let shift = match &self.in_layers.conv.bias {
            Some(bias) => emb + bias.val().unsqueeze_dim(0),
            None => emb,
        };
        // The biases of the last convolution and of the skip join the residual sum: one pass
        // over the volume where adding each after its convolution took one more.
        let h = self.out_layers.forward_shifted_unbiased(h, shift, ctx);
        let mut biases: Vec<_> = self.out_layers.conv.bias.iter().map(|b| b.val()).collect();
        let mut terms = match (&self.skip_connection, x) {
            (Some(skip), x) => {
                biases.extend(skip.bias.iter().map(|b| b.val()));
                match x {
                    BlockInput::One(x) => vec![ctx.conv_unbiased(skip, x)],
                    // The 1x1x1 convolution as the sum of its products over the parts.
                    BlockInput::Parts(a, b) => ctx.pointwise_parts(skip, a, b).into(),
                }
            }
            (None, x) => vec![x.joined(ctx)],
        };
        terms.push(h);
        ctx.op(OpClass::Elementwise, || {
            residual_sum(terms, biases, ctx.layout)
        })
    }
}

/// A block's input: one activation, or the decoder's current activation and the encoder's
/// skip, which are the parts of one joined along channels (in this order).
pub(crate) enum BlockInput<B: Backend> {
    /// One activation.
    One(Tensor<B, 5>),
    /// [current, skip], not joined.
    Parts(Tensor<B, 5>, Tensor<B, 5>),
}

impl<B: KernelBackend> BlockInput<B> {
    /// The one activation, the parts joined where there are two.
    fn joined(self, ctx: &Ctx<B>) -> Tensor<B, 5> {
        match self {
            Self::One(x) => x,
            Self::Parts(a, b) => ctx.join(a, b),
        }
    }
}

/// Single-head self-attention over all voxels (`QKVAttentionLegacy` with one head).
#[derive(Module, Debug)]
pub struct AttentionBlock<B: Backend> {
    /// GroupNorm before the qkv projection.
    pub norm: GroupNorm<B>,
    /// Conv1d(c -> 3c, k=1): q, k, v are consecutive c-channel thirds.
    pub qkv: Conv1d<B>,
    /// Conv1d(c -> c, k=1), zero-initialised.
    pub proj_out: Conv1d<B>,
}

impl<B: Backend> AttentionBlock<B> {
    /// An attention block over `channels` channels.
    pub fn new(channels: usize, groups: usize, device: &B::Device) -> Self {
        Self {
            norm: group_norm(groups, channels, device),
            qkv: Conv1dConfig::new(channels, 3 * channels, 1).init(device),
            proj_out: Conv1dConfig::new(channels, channels, 1)
                .with_initializer(Initializer::Zeros)
                .init(device),
        }
    }

    /// x + proj_out(attention(qkv(GN(x)))), q and k each scaled by c^(-1/4) before the product
    /// (as the reference does, for f16 headroom), softmax over the keys.
    pub(crate) fn forward(&self, x: Tensor<B, 5>, ctx: &Ctx<B>) -> Tensor<B, 5>
    where
        B: KernelBackend,
    {
        let dims = x.dims();
        match ctx.layout {
            Layout::Ncdhw => {
                let [b, c] = [dims[0], dims[1]];
                let n = dims[2] * dims[3] * dims[4];
                let normed = ctx.norm(&self.norm, x.clone()).reshape([b, c, n]);
                let x = x.reshape([b, c, n]);
                ctx.op(OpClass::Attention, || {
                    let qkv = self.qkv.forward(normed);
                    let scale = (c as f64).powf(-0.25);
                    let q = qkv.clone().narrow(1, 0, c).mul_scalar(scale);
                    let k = qkv.clone().narrow(1, c, c).mul_scalar(scale);
                    let v = qkv.narrow(1, 2 * c, c);
                    // weights[b, t, s] = q_t . k_s; softmax in f32 (or f64).
                    let logits = q.swap_dims(1, 2).matmul(k);
                    let dtype = logits.dtype();
                    let weights = cast_to(softmax(to_stats(logits), 2), dtype);
                    // a[b, c, t] = sum_s weights[b, t, s] v[b, c, s]
                    let a = v.matmul(weights.swap_dims(1, 2));
                    (x + self.proj_out.forward(a)).reshape(dims)
                })
            }
            Layout::Ndhwc => {
                let [b, c] = [dims[0], dims[4]];
                let n = dims[1] * dims[2] * dims[3];
                let normed = ctx.norm(&self.norm, x.clone()).reshape([b, n, c]);
                let x = x.reshape([b, n, c]);
                ctx.op(OpClass::Attention, || {
                    // The k=1 Conv1d projections as products with the transposed kernels, so
                    // the tokens stay channels-last.
                    let qkv = pointwise(&self.qkv, normed, ctx.compute);
                    let scale = (c as f64).powf(-0.25);
                    let q = qkv.clone().narrow(2, 0, c).mul_scalar(scale);
                    let k = qkv.clone().narrow(2, c, c).mul_scalar(scale);
                    let v = qkv.narrow(2, 2 * c, c);
                    let products = ProductSpec::plain(ctx.compute);
                    let logits = product(q, k, products.with(false, true));
                    let dtype = logits.dtype();
                    let weights = cast_to(softmax(to_stats(logits), 2), dtype);
                    let a = product(weights, v, products);
                    (x + pointwise(&self.proj_out, a, ctx.compute)).reshape(dims)
                })
            }
        }
    }
}

/// A kernel-size-1 Conv1d applied to channels-last tokens `[batch, n, c_in]`.
fn pointwise<B: KernelBackend>(
    conv: &Conv1d<B>,
    x: Tensor<B, 3>,
    compute: Compute,
) -> Tensor<B, 3> {
    let [c_out, c_in, _] = conv.weight.dims();
    crate::exec::pointwise_tokens(
        x,
        conv.weight.val().reshape([c_out, c_in]),
        conv.bias.as_ref().map(|bias| bias.val()),
        compute,
    )
}

/// Stride-2 3x3x3 convolution (`conv_resample=True`).
#[derive(Module, Debug)]
pub struct Downsample<B: Backend> {
    /// The strided convolution.
    pub op: Conv3d<B>,
}

impl<B: Backend> Downsample<B> {
    /// Halves each spatial size (rounding up).
    pub(crate) fn forward(&self, x: Tensor<B, 5>, ctx: &Ctx<B>) -> Tensor<B, 5>
    where
        B: KernelBackend,
    {
        ctx.conv(&self.op, x)
    }
}

/// Trilinear x2 upsampling followed by a 3x3x3 convolution.
#[derive(Module, Debug)]
pub struct Upsample<B: Backend> {
    /// The convolution after interpolation.
    pub conv: Conv3d<B>,
}

impl<B: Backend> Upsample<B> {
    /// Doubles each spatial size.
    pub(crate) fn forward(&self, x: Tensor<B, 5>, ctx: &Ctx<B>) -> Tensor<B, 5>
    where
        B: KernelBackend,
    {
        let up = ctx.op(OpClass::Upsample, || {
            medddpm_kernels::upsample_x2(x, ctx.layout)
        });
        ctx.conv(&self.conv, up)
    }
}

/// One entry of `input_blocks` / `output_blocks` (the reference's `TimestepEmbedSequential`):
/// the stem conv, or a ResBlock with optional attention and resampling, or a lone Downsample.
/// Present parts run in the order of the fields.
#[derive(Module, Debug)]
pub struct EmbedBlock<B: Backend> {
    /// The stem convolution (`input_blocks.0.0`).
    pub conv: Option<Conv3d<B>>,
    /// ResBlock (slot 0).
    pub res: Option<ResBlock<B>>,
    /// Attention (slot 1).
    pub attn: Option<AttentionBlock<B>>,
    /// Downsample (an encoder block of its own).
    pub down: Option<Downsample<B>>,
    /// Upsample (last slot of a decoder block leaving a level).
    pub up: Option<Upsample<B>>,
}

impl<B: Backend> EmbedBlock<B> {
    pub(crate) fn empty() -> Self {
        Self {
            conv: None,
            res: None,
            attn: None,
            down: None,
            up: None,
        }
    }

    /// Runs the present parts in order.
    pub(crate) fn forward(
        &self,
        x: Tensor<B, 5>,
        emb_act: Tensor<B, 2>,
        ctx: &Ctx<B>,
    ) -> Tensor<B, 5>
    where
        B: KernelBackend,
    {
        self.forward_input(BlockInput::One(x), emb_act, ctx)
    }

    /// [`EmbedBlock::forward`] of a decoder block's [current, skip]: the ResBlock takes the
    /// two parts as they are where it can ([`ResBlock::forward`]).
    pub(crate) fn forward_input(
        &self,
        mut x: BlockInput<B>,
        emb_act: Tensor<B, 2>,
        ctx: &Ctx<B>,
    ) -> Tensor<B, 5>
    where
        B: KernelBackend,
    {
        if let Some(conv) = &self.conv {
            x = BlockInput::One(ctx.conv(conv, x.joined(ctx)));
        }
        let mut x = match &self.res {
            Some(res) => res.forward(x, emb_act, ctx),
            None => x.joined(ctx),
        };
        if let Some(attn) = &self.attn {
            x = attn.forward(x, ctx);
        }
        if let Some(down) = &self.down {
            x = down.forward(x, ctx);
        }
        if let Some(up) = &self.up {
            x = up.forward(x, ctx);
        }
        x
    }
}
