//! Building blocks of the reference U-Net. Field names mirror the reference checkpoint keys
//! (`in_layers`, `emb_layers`, `out_layers`, `skip_connection`, `norm`, `qkv`, `proj_out`, `op`,
//! `conv`), with the `nn.Sequential` slots named (`in_layers.0` -> `in_layers.norm`).

use burn::module::Module;
use burn::nn::conv::{Conv1d, Conv1dConfig, Conv3d, Conv3dConfig};
use burn::nn::{GroupNorm, GroupNormConfig, Initializer, Linear, LinearConfig, PaddingConfig3d};
use burn::tensor::activation::{silu, softmax};
use burn::tensor::{backend::Backend, Tensor};

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

/// GroupNorm followed (in `forward`) by SiLU and a 3x3x3 convolution: the reference's
/// `in_layers` (GN, SiLU, conv) and `out_layers` (GN, SiLU, Dropout(0), conv).
#[derive(Module, Debug)]
pub struct NormActConv<B: Backend> {
    /// GroupNorm(32, c_in).
    pub norm: GroupNorm<B>,
    /// 3x3x3 convolution.
    pub conv: Conv3d<B>,
}

impl<B: Backend> NormActConv<B> {
    /// conv(SiLU(GN(x))).
    pub fn forward(&self, x: Tensor<B, 5>) -> Tensor<B, 5> {
        self.conv.forward(silu(self.norm.forward(x)))
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
    /// `emb_act` is SiLU of the time embedding, shape [batch, 4C].
    pub fn forward(&self, x: Tensor<B, 5>, emb_act: Tensor<B, 2>) -> Tensor<B, 5> {
        let h = self.in_layers.forward(x.clone());
        let [b, c] = [h.dims()[0], h.dims()[1]];
        let h = h + self
            .emb_layers
            .linear
            .forward(emb_act)
            .reshape([b, c, 1, 1, 1]);
        let h = self.out_layers.forward(h);
        match &self.skip_connection {
            Some(skip) => skip.forward(x) + h,
            None => x + h,
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
    pub fn forward(&self, x: Tensor<B, 5>) -> Tensor<B, 5> {
        let dims = x.dims();
        let [b, c] = [dims[0], dims[1]];
        let n = dims[2] * dims[3] * dims[4];
        let x = x.reshape([b, c, n]);
        let qkv = self.qkv.forward(self.norm.forward(x.clone()));
        let scale = (c as f64).powf(-0.25);
        let q = qkv.clone().narrow(1, 0, c).mul_scalar(scale);
        let k = qkv.clone().narrow(1, c, c).mul_scalar(scale);
        let v = qkv.narrow(1, 2 * c, c);
        // weights[b, t, s] = q_t . k_s
        let weights = softmax(q.swap_dims(1, 2).matmul(k), 2);
        // a[b, c, t] = sum_s weights[b, t, s] v[b, c, s]
        let a = v.matmul(weights.swap_dims(1, 2));
        (x + self.proj_out.forward(a)).reshape(dims)
    }
}

/// Stride-2 3x3x3 convolution (`conv_resample=True`).
#[derive(Module, Debug)]
pub struct Downsample<B: Backend> {
    /// The strided convolution.
    pub op: Conv3d<B>,
}

impl<B: Backend> Downsample<B> {
    /// Halves each spatial size (rounding up).
    pub fn forward(&self, x: Tensor<B, 5>) -> Tensor<B, 5> {
        self.op.forward(x)
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
    pub fn forward(&self, x: Tensor<B, 5>) -> Tensor<B, 5> {
        self.conv.forward(medddpm_kernels::upsample_trilinear_x2(x))
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
    pub fn forward(&self, mut x: Tensor<B, 5>, emb_act: Tensor<B, 2>) -> Tensor<B, 5> {
        if let Some(conv) = &self.conv {
            x = conv.forward(x);
        }
        if let Some(res) = &self.res {
            x = res.forward(x, emb_act);
        }
        if let Some(attn) = &self.attn {
            x = attn.forward(x);
        }
        if let Some(down) = &self.down {
            x = down.forward(x);
        }
        if let Some(up) = &self.up {
            x = up.forward(x);
        }
        x
    }
}
