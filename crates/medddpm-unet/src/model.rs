//! The U-Net itself: time embedding, encoder, middle block, decoder and output head.

use burn::module::Module;
use burn::nn::conv::Conv3d;
use burn::nn::{GroupNorm, Linear, LinearConfig};
use burn::tensor::activation::silu;
use burn::tensor::{backend::Backend, DType, Tensor, TensorData};

use crate::blocks::{
    conv3, group_norm, AttentionBlock, BlockInput, Downsample, EmbedBlock, ResBlock, Upsample,
};
use crate::exec::{cast_to, Ctx, Layout, OpClass, OpProfile};
use crate::{UNetConfig, UNetError};
use medddpm_kernels::{Compute, KernelBackend};
use std::cell::RefCell;

/// Period of the slowest sinusoid of the timestep embedding.
///
/// The reference's fixture settles this at 1000, not guided-diffusion's 10,000 (which our spec
/// first stated): with 10,000 the embedding of t = 137 is off by 0.56, with 1000 it matches to
/// 5e-7. See `docs/architecture.md`.
pub const MAX_PERIOD: f64 = 1000.0;

/// Sinusoidal embedding of raw integer timesteps (not rescaled): for i < dim/2,
/// freq_i = exp(-ln(MAX_PERIOD) i / (dim/2)), embedding = [cos(t freq), sin(t freq)], cosine
/// half first. Computed in f64 on the host and rounded once.
pub fn timestep_embedding(timesteps: &[usize], dim: usize) -> Vec<f32> {
    let half = dim / 2;
    let mut out = Vec::with_capacity(timesteps.len() * dim);
    for &t in timesteps {
        let args: Vec<f64> = (0..half)
            .map(|i| t as f64 * (-MAX_PERIOD.ln() * i as f64 / half as f64).exp())
            .collect();
        out.extend(args.iter().map(|a| a.cos() as f32));
        out.extend(args.iter().map(|a| a.sin() as f32));
        out.extend(std::iter::repeat_n(0.0, dim - 2 * half));
    }
    out
}

/// The reference's `time_embed`: Linear(C -> 4C), SiLU, Linear(4C -> 4C).
#[derive(Module, Debug)]
pub struct TimeEmbed<B: Backend> {
    /// Slot 0.
    pub linear_1: Linear<B>,
    /// Slot 2.
    pub linear_2: Linear<B>,
}

/// The middle block: ResBlock, AttentionBlock, ResBlock.
#[derive(Module, Debug)]
pub struct MiddleBlock<B: Backend> {
    /// Slot 0.
    pub res_1: ResBlock<B>,
    /// Slot 1.
    pub attn: AttentionBlock<B>,
    /// Slot 2.
    pub res_2: ResBlock<B>,
}

/// The output head: GroupNorm, SiLU, zero-initialised 3x3x3 conv to `out_channels`.
#[derive(Module, Debug)]
pub struct OutHead<B: Backend> {
    /// Slot 0.
    pub norm: GroupNorm<B>,
    /// Slot 2.
    pub conv: Conv3d<B>,
}

/// The Med-DDPM 3-D U-Net (a guided-diffusion U-Net with `dims=3`), predicting the noise.
#[derive(Module, Debug)]
pub struct UNet<B: Backend> {
    /// Timestep MLP.
    pub time_embed: TimeEmbed<B>,
    /// Encoder blocks; every output is kept for a skip connection.
    pub input_blocks: Vec<EmbedBlock<B>>,
    /// Bottleneck.
    pub middle_block: MiddleBlock<B>,
    /// Decoder blocks; each first concatenates [current, skip] along channels.
    pub output_blocks: Vec<EmbedBlock<B>>,
    /// Output head.
    pub out: OutHead<B>,
    model_channels: usize,
    size_divisor: usize,
    /// How the forward pass computes (layout, convolution engine, precision); a run-time
    /// setting, not a weight.
    #[module(skip)]
    compute: Compute,
}

/// The encoder half as [`UNetConfig::init`] builds it, with what the decoder continues from.
struct Encoder<B: Backend> {
    /// `input_blocks`.
    blocks: Vec<EmbedBlock<B>>,
    /// Output channels of every encoder block, in order (the decoder's skips, taken from the
    /// end).
    skip_channels: Vec<usize>,
    /// Channels at the bottom.
    channels: usize,
    /// Downsampling factor at the bottom.
    ds: usize,
}

impl UNetConfig {
    /// Builds the network with the reference's initialisation (PyTorch defaults, with the second
    /// conv of every ResBlock, every attention `proj_out` and the output conv zeroed).
    pub fn init<B: Backend>(&self, device: &B::Device) -> Result<UNet<B>, UNetError> {
        self.validate()?;
        let c = self.model_channels;
        let emb_dim = 4 * c;
        let groups = self.num_groups;
        // The parts are built in this order (encoder, middle, decoder, time MLP, head), which
        // is the order the generator draws their initial weights in.
        let Encoder {
            blocks: input_blocks,
            skip_channels,
            channels: ch,
            ds,
        } = self.encoder(device);
        let middle_block = MiddleBlock {
            res_1: ResBlock::new(ch, ch, emb_dim, groups, device),
            attn: AttentionBlock::new(ch, groups, device),
            res_2: ResBlock::new(ch, ch, emb_dim, groups, device),
        };
        let (output_blocks, ch) = self.decoder(ch, skip_channels, ds, device);
        Ok(UNet {
            time_embed: TimeEmbed {
                linear_1: LinearConfig::new(c, emb_dim).init(device),
                linear_2: LinearConfig::new(emb_dim, emb_dim).init(device),
            },
            input_blocks,
            middle_block,
            output_blocks,
            out: OutHead {
                norm: group_norm(groups, ch, device),
                conv: conv3(ch, self.out_channels, 1, true, device),
            },
            model_channels: c,
            size_divisor: self.size_divisor(),
            compute: Compute::default(),
        })
    }

    /// The stem conv, then per level `num_res_blocks` ResBlocks (with attention at the
    /// configured factors) and, except at the last level, a Downsample.
    fn encoder<B: Backend>(&self, device: &B::Device) -> Encoder<B> {
        let c = self.model_channels;
        let (emb_dim, groups) = (4 * c, self.num_groups);
        let attn_at = self.attention_downsample_factors();
        let mut ch = c * self.channel_mult[0];
        let mut blocks = vec![EmbedBlock {
            conv: Some(conv3(self.in_channels, ch, 1, false, device)),
            ..EmbedBlock::empty()
        }];
        let mut skip_channels = vec![ch];
        let mut ds = 1;
        for (level, &mult) in self.channel_mult.iter().enumerate() {
            for _ in 0..self.num_res_blocks {
                let out = c * mult;
                blocks.push(EmbedBlock {
                    res: Some(ResBlock::new(ch, out, emb_dim, groups, device)),
                    attn: attn_at
                        .contains(&ds)
                        .then(|| AttentionBlock::new(out, groups, device)),
                    ..EmbedBlock::empty()
                });
                ch = out;
                skip_channels.push(ch);
            }
            if level + 1 != self.channel_mult.len() {
                blocks.push(EmbedBlock {
                    down: Some(Downsample {
                        op: conv3(ch, ch, 2, false, device),
                    }),
                    ..EmbedBlock::empty()
                });
                skip_channels.push(ch);
                ds *= 2;
            }
        }
        Encoder {
            blocks,
            skip_channels,
            channels: ch,
            ds,
        }
    }

    /// Per level from the bottom, `num_res_blocks + 1` ResBlocks each taking a skip (with
    /// attention at the configured factors), the last of a level above the first followed by an
    /// Upsample; returns the blocks and their output channels.
    fn decoder<B: Backend>(
        &self,
        mut ch: usize,
        mut skip_channels: Vec<usize>,
        mut ds: usize,
        device: &B::Device,
    ) -> (Vec<EmbedBlock<B>>, usize) {
        let c = self.model_channels;
        let (emb_dim, groups) = (4 * c, self.num_groups);
        let attn_at = self.attention_downsample_factors();
        let mut blocks = Vec::new();
        for (level, &mult) in self.channel_mult.iter().enumerate().rev() {
            for i in 0..=self.num_res_blocks {
                let skip = skip_channels.pop().expect("one skip per encoder block");
                let out = c * mult;
                let leaves_level = level > 0 && i == self.num_res_blocks;
                blocks.push(EmbedBlock {
                    res: Some(ResBlock::new(ch + skip, out, emb_dim, groups, device)),
                    attn: attn_at
                        .contains(&ds)
                        .then(|| AttentionBlock::new(out, groups, device)),
                    up: leaves_level.then(|| Upsample {
                        conv: conv3(out, out, 1, false, device),
                    }),
                    ..EmbedBlock::empty()
                });
                ch = out;
                if leaves_level {
                    ds /= 2;
                }
            }
        }
        (blocks, ch)
    }
}

impl<B: Backend> UNet<B> {
    /// Output of the time-embedding MLP for the given timesteps, shape [batch, 4C].
    pub fn time_embedding(&self, timesteps: &[usize], device: &B::Device) -> Tensor<B, 2> {
        self.time_embedding_of(self.sinusoid(timesteps, device))
    }

    /// The sinusoidal embedding of `timesteps` on `device`, `[batch, C]` f32: how the timestep
    /// enters the network ([`UNet::forward_sinusoid`]).
    pub fn sinusoid(&self, timesteps: &[usize], device: &B::Device) -> Tensor<B, 2> {
        let c = self.model_channels;
        let sinusoid = timestep_embedding(timesteps, c);
        Tensor::<B, 2>::from_data(TensorData::new(sinusoid, [timesteps.len(), c]), device)
    }

    /// The time-embedding MLP on a [`UNet::sinusoid`], `[batch, 4C]`.
    fn time_embedding_of(&self, sinusoid: Tensor<B, 2>) -> Tensor<B, 2> {
        let x = cast_to(sinusoid, self.time_embed.linear_1.weight.val().dtype());
        self.time_embed
            .linear_2
            .forward(silu(self.time_embed.linear_1.forward(x)))
    }

    /// Checks an input shape against the network before running it, so that a wrong volume
    /// size is an error rather than a shape panic deep inside a convolution.
    pub fn check_input(&self, dims: [usize; 5], num_timesteps: usize) -> Result<(), UNetError> {
        let expected = self.in_channels();
        if dims[1] != expected {
            return Err(UNetError::InputChannels {
                expected,
                got: dims[1],
                dims,
            });
        }
        if dims[0] != num_timesteps {
            return Err(UNetError::BatchTimesteps {
                batch: dims[0],
                timesteps: num_timesteps,
            });
        }
        let d = self.size_divisor;
        let sizes = [dims[2], dims[3], dims[4]];
        if sizes.iter().any(|&s| s == 0 || s % d != 0) {
            return Err(UNetError::SpatialSize { divisor: d, sizes });
        }
        Ok(())
    }

    /// Number of input channels (noisy image plus condition).
    pub fn in_channels(&self) -> usize {
        self.input_blocks[0]
            .conv
            .as_ref()
            .map(|c| c.weight.dims()[1])
            .unwrap_or(0)
    }

    /// Number of output (noise) channels.
    pub fn out_channels(&self) -> usize {
        self.out.conv.weight.dims()[0]
    }

    /// The memory order the activations use inside the network.
    pub fn layout(&self) -> Layout {
        self.compute.layout
    }

    /// Runs with activations in `layout` from now on (weights and results are unaffected).
    pub fn with_layout(mut self, layout: Layout) -> Self {
        self.compute.layout = layout;
        self
    }

    /// How the forward pass computes.
    pub fn compute(&self) -> Compute {
        self.compute
    }

    /// Runs with `compute`'s layout and convolution engine from now on (the precision is the
    /// weights' dtype: see [`crate::cast_compute_params`]).
    pub fn with_compute(mut self, compute: Compute) -> Self {
        self.compute = compute;
        self
    }

    /// The dtype convolutions and matrix products run in: the dtype of the weights.
    pub fn compute_dtype(&self) -> burn::tensor::DType {
        self.out.conv.weight.val().dtype()
    }
}

impl<B: KernelBackend> UNet<B> {
    /// Predicts the noise in `x` (noisy image and condition channels concatenated) at
    /// `timesteps` (one raw step index per batch element), after checking the shapes with
    /// [`UNet::check_input`]: the entry point for inputs built from user data.
    ///
    /// # Shapes
    /// - x: `[batch, in_channels, d, h, w]`, every spatial size a multiple of 2^(levels-1)
    /// - output: `[batch, out_channels, d, h, w]`
    pub fn try_forward(
        &self,
        x: Tensor<B, 5>,
        timesteps: &[usize],
    ) -> Result<Tensor<B, 5>, UNetError> {
        self.forward_checked(x, timesteps, None, false)
    }

    /// [`UNet::forward`] with the timesteps given as their [`UNet::sinusoid`] on the device:
    /// a step that reads no host numbers, as a CUDA graph needs (`graphed`).
    pub fn forward_sinusoid(&self, x: Tensor<B, 5>, sinusoid: Tensor<B, 2>) -> Tensor<B, 5> {
        self.check_input(x.dims(), sinusoid.dims()[0])
            .unwrap_or_else(|e| panic!("{e}"));
        self.forward_ctx(x, sinusoid, None, false)
    }

    /// [`UNet::try_forward`] for inputs known to fit, returning the tensor as burn's `Module`
    /// convention has it.
    ///
    /// # Panics
    /// On a shape [`UNet::check_input`] rejects, with that error's message; callers with user
    /// data use [`UNet::try_forward`] (or check first).
    pub fn forward(&self, x: Tensor<B, 5>, timesteps: &[usize]) -> Tensor<B, 5> {
        self.try_forward(x, timesteps)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`UNet::forward`] with every operation synchronised and timed by class into `profile`
    /// (see [`OpProfile`] for what the numbers mean).
    ///
    /// # Panics
    /// As [`UNet::forward`], on a shape [`UNet::check_input`] rejects.
    pub fn forward_profiled(
        &self,
        x: Tensor<B, 5>,
        timesteps: &[usize],
        profile: &RefCell<OpProfile>,
    ) -> Tensor<B, 5> {
        self.forward_checked(x, timesteps, Some(profile), false)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    pub(crate) fn forward_checked(
        &self,
        x: Tensor<B, 5>,
        timesteps: &[usize],
        profile: Option<&RefCell<OpProfile>>,
        recompute_norms: bool,
    ) -> Result<Tensor<B, 5>, UNetError> {
        self.check_input(x.dims(), timesteps.len())?;
        let sinusoid = self.sinusoid(timesteps, &x.device());
        Ok(self.forward_ctx(x, sinusoid, profile, recompute_norms))
    }

    /// The forward pass of an input [`UNet::check_input`] accepts, block by block through the
    /// same pieces activation checkpointing recomputes (`checkpoint.rs`).
    pub(crate) fn forward_ctx(
        &self,
        x: Tensor<B, 5>,
        sinusoid: Tensor<B, 2>,
        profile: Option<&RefCell<OpProfile>>,
        recompute_norms: bool,
    ) -> Tensor<B, 5> {
        let ctx = Ctx {
            recompute_norms,
            ..self.ctx(&x.device(), profile)
        };
        let out_dtype = x.dtype();
        let emb_act = self.emb_act_of(sinusoid, &ctx);
        let mut h = self.enter(x, &ctx);
        let mut skips = Vec::with_capacity(self.input_blocks.len());
        for block in &self.input_blocks {
            h = block.forward(h, emb_act.clone(), &ctx);
            skips.push(h.clone());
        }
        h = self.middle(h, emb_act.clone(), &ctx);
        for block in &self.output_blocks {
            let skip = skips.pop().expect("one skip per decoder block");
            h = decode(block, h, skip, emb_act.clone(), &ctx);
        }
        self.head(h, out_dtype, &ctx)
    }

    /// The per-call context of a forward pass on `device`.
    pub(crate) fn ctx<'a>(
        &self,
        device: &B::Device,
        profile: Option<&'a RefCell<OpProfile>>,
    ) -> Ctx<'a, B> {
        Ctx::<B> {
            layout: self.layout(),
            compute: self.compute,
            profile,
            device: device.clone(),
            recompute_norms: false,
            decoder_parts: B::ad_enabled(device),
        }
    }

    /// SiLU of the time embedding in the compute dtype, `[batch, 4C]`: every ResBlock's
    /// `emb_layers` input.
    pub(crate) fn emb_act(&self, timesteps: &[usize], ctx: &Ctx<B>) -> Tensor<B, 2> {
        self.emb_act_of(self.sinusoid(timesteps, &ctx.device), ctx)
    }

    /// [`UNet::emb_act`] of a [`UNet::sinusoid`].
    fn emb_act_of(&self, sinusoid: Tensor<B, 2>, ctx: &Ctx<B>) -> Tensor<B, 2> {
        let compute = self.compute_dtype();
        ctx.op(OpClass::Elementwise, || {
            silu(cast_to(self.time_embedding_of(sinusoid), compute))
        })
    }

    /// The network input in the compute dtype and the activation layout.
    pub(crate) fn enter(&self, x: Tensor<B, 5>, ctx: &Ctx<B>) -> Tensor<B, 5> {
        let compute = self.compute_dtype();
        ctx.op(OpClass::Elementwise, || {
            let x = cast_to(x, compute);
            match ctx.layout {
                Layout::Ncdhw => x,
                Layout::Ndhwc => medddpm_kernels::conv::channels_last(x),
            }
        })
    }

    /// The middle block.
    pub(crate) fn middle(
        &self,
        h: Tensor<B, 5>,
        emb_act: Tensor<B, 2>,
        ctx: &Ctx<B>,
    ) -> Tensor<B, 5> {
        let m = &self.middle_block;
        let h = m.res_1.forward(BlockInput::One(h), emb_act.clone(), ctx);
        let h = m.attn.forward(h, ctx);
        m.res_2.forward(BlockInput::One(h), emb_act, ctx)
    }

    /// The output head, back in the input's layout and dtype `out_dtype`.
    pub(crate) fn head(&self, h: Tensor<B, 5>, out_dtype: DType, ctx: &Ctx<B>) -> Tensor<B, 5> {
        let h = ctx.norm_silu(&self.out.norm, h);
        let out = ctx.conv(&self.out.conv, h);
        ctx.op(OpClass::Elementwise, || {
            let out = match ctx.layout {
                Layout::Ncdhw => out,
                Layout::Ndhwc => out.permute([0, 4, 1, 2, 3]),
            };
            cast_to(out, out_dtype)
        })
    }
}

/// A decoder block of [current, skip] (joined along channels, or taken as the two parts of the
/// joined input where its ResBlock can: [`crate::blocks::ResBlock::forward`]).
pub(crate) fn decode<B: KernelBackend>(
    block: &EmbedBlock<B>,
    h: Tensor<B, 5>,
    skip: Tensor<B, 5>,
    emb_act: Tensor<B, 2>,
    ctx: &Ctx<B>,
) -> Tensor<B, 5> {
    block.forward_input(BlockInput::Parts(h, skip), emb_act, ctx)
}

impl<B: KernelBackend> medddpm_diffusion::Denoiser<B> for UNet<B> {
    fn predict_noise(&self, input: Tensor<B, 5>, timesteps: &[usize]) -> Tensor<B, 5> {
        self.forward(input, timesteps)
    }
}
