//! Activation checkpointing: a training forward pass that keeps only each block's output, and
//! a backward pass that recomputes one block at a time from its kept input.
//!
//! A plain training step keeps every activation a backward step needs (in a ResBlock: the
//! input, both GroupNorm outputs, the first convolution's output and the sum), which for the
//! released models at full size is most of the GPU memory. With
//! [`ActivationCheckpointing::Blocks`] the forward pass runs with untracked parameters, so
//! that it records no graph, keeping the output of every U-Net block (encoder blocks, the middle block, decoder
//! blocks) and the time embedding. The backward pass then walks the blocks from the output
//! head back to the stem: each block is run again on the autodiff backend from its kept input
//! (a fresh leaf), and backpropagated on its own from the gradient of its output
//! ([`medddpm_kernels::backward_seeded`]), which yields its parameters' gradients and the
//! gradient of its input for the block before it. At any moment only one block's graph
//! exists. The cost is a second forward pass of every block.
//!
//! Each block is a separate graph, not a node of one big graph: burn 0.21 holds a graph's lock
//! for the whole of its backward pass, so a backward step cannot run a nested backward pass;
//! and burn's own checkpointing (`BalancedCheckpointing`) only recomputes memory-bound
//! elementwise operations, while our convolutions and GroupNorm keep their inputs.
//!
//! The results equal the plain backward pass's up to the order in which a tensor's gradient
//! contributions are summed: the time embedding's (one per ResBlock) and an encoder output's
//! (its next block and its skip connection).

use std::fmt;
use std::str::FromStr;

use burn::module::{AutodiffModule, Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{DType, Tensor};
use medddpm_kernels::{backward_seeded, KernelAutodiffBackend, UnknownChoice};
use serde::{Deserialize, Serialize};

use crate::exec::Ctx;
use crate::model::decode;
use crate::{UNet, UNetError};

/// Which activations a training step recomputes in its backward pass instead of keeping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ActivationCheckpointing {
    /// Keep every activation the backward pass needs: the fastest step, the most memory.
    #[default]
    None,
    /// Keep only the output of every U-Net block and recompute the inside of each block in
    /// the backward pass: about one more forward pass of time for most of the activation
    /// memory.
    Blocks,
    /// Keep everything but the GroupNorm + SiLU outputs that feed a ResBlock's convolutions,
    /// recomputed in the backward pass: one more normalisation pass each, for about a third of
    /// the activation memory (two of a ResBlock's five kept tensors).
    Norms,
}

impl ActivationCheckpointing {
    /// Every choice, as the command line lists them.
    pub const ALL: [ActivationCheckpointing; 3] = [Self::None, Self::Norms, Self::Blocks];

    /// The name in configuration files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Blocks => "blocks",
            Self::Norms => "norms",
        }
    }
}

impl fmt::Display for ActivationCheckpointing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ActivationCheckpointing {
    type Err = UnknownChoice;
    fn from_str(s: &str) -> Result<Self, UnknownChoice> {
        Self::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| {
                UnknownChoice::new("activation checkpointing", s, "none, norms or blocks")
            })
    }
}

/// What [`UNet::forward_checkpointed`] kept for [`CheckpointedForward::backward`]: the inputs
/// of every block, on the inner backend.
pub struct CheckpointedForward<B: AutodiffBackend> {
    timesteps: Vec<usize>,
    device: B::Device,
    out_dtype: DType,
    /// SiLU of the time embedding.
    emb_act: Tensor<B::InnerBackend, 2>,
    /// The stem's input (the network input in the compute dtype and layout).
    input: Tensor<B::InnerBackend, 5>,
    /// The output of every encoder block.
    encoder: Vec<Tensor<B::InnerBackend, 5>>,
    /// The middle block's output.
    middle: Tensor<B::InnerBackend, 5>,
    /// The output of every decoder block (the last one is the head's input).
    decoder: Vec<Tensor<B::InnerBackend, 5>>,
}

impl<B: KernelAutodiffBackend> UNet<B> {
    /// [`UNet::try_forward`] for training with activation checkpointing `norms`: each
    /// ResBlock's GroupNorm + SiLU and the convolution after it as one operation that recomputes
    /// the normalisation in the backward pass instead of keeping its output. The same values.
    pub fn forward_recomputing_norms(
        &self,
        x: Tensor<B, 5>,
        timesteps: &[usize],
    ) -> Result<Tensor<B, 5>, UNetError> {
        self.forward_checked(x, timesteps, None, true)
    }

    /// [`UNet::try_forward`] for training with activation checkpointing: the forward pass
    /// without a graph, keeping the blocks' outputs. Returns the output as a leaf that
    /// requires gradients (compute the loss from it and backpropagate, then hand its gradient
    /// to [`CheckpointedForward::backward`]) and what the backward pass recomputes from.
    pub fn forward_checkpointed(
        &self,
        x: Tensor<B, 5>,
        timesteps: &[usize],
    ) -> Result<(Tensor<B, 5>, CheckpointedForward<B>), UNetError> {
        self.check_input(x.dims(), timesteps.len())?;
        let device = x.device();
        // The same module with untracked parameters: the forward pass runs through the autodiff
        // backend's own operations (which may differ from the inner backend's fused ones, e.g.
        // softmax), so the kept activations equal the recomputed ones bit for bit, but records
        // no graph.
        let detached = self.clone().no_grad();
        let ctx = detached.ctx(&device, None);
        let out_dtype = x.dtype();
        let emb_act = detached.emb_act(timesteps, &ctx);
        let input = detached.enter(Tensor::from_inner(x.inner()), &ctx);
        let mut h = input.clone();
        let mut encoder = Vec::with_capacity(detached.input_blocks.len());
        for block in &detached.input_blocks {
            h = block.forward(h, emb_act.clone(), &ctx);
            encoder.push(h.clone().inner());
        }
        let middle = detached.middle(h, emb_act.clone(), &ctx);
        h = middle.clone();
        let mut decoder = Vec::with_capacity(detached.output_blocks.len());
        for (j, block) in detached.output_blocks.iter().enumerate() {
            let skip = Tensor::from_inner(encoder[encoder.len() - 1 - j].clone());
            h = decode(block, h, skip, emb_act.clone(), &ctx);
            decoder.push(h.clone().inner());
        }
        let out = detached.head(h, out_dtype, &ctx).inner();
        let (emb_act, input, middle) = (emb_act.inner(), input.inner(), middle.inner());
        let kept = CheckpointedForward {
            timesteps: timesteps.to_vec(),
            device,
            out_dtype,
            emb_act,
            input,
            encoder,
            middle,
            decoder,
        };
        Ok((Tensor::from_inner(out).require_grad(), kept))
    }
}

/// Gradients flowing back through the blocks: the parameters' so far, and the time
/// embedding's summed over the blocks done.
struct Backprop<B: AutodiffBackend> {
    params: GradientsParams,
    emb_act: Option<Tensor<B::InnerBackend, 2>>,
    /// The gradient each encoder output received through its skip connection.
    skip_grads: Vec<Option<Tensor<B::InnerBackend, 5>>>,
}

impl<B: KernelAutodiffBackend> CheckpointedForward<B> {
    /// The backward pass of `unet` (the module [`UNet::forward_checkpointed`] ran, its
    /// parameters leaves of the graph) from `grad`, the gradient of the loss with respect to
    /// the output: every parameter's gradient, as `GradientsParams::from_grads` gives them
    /// after a plain backward pass.
    pub fn backward(mut self, unet: &UNet<B>, grad: Tensor<B::InnerBackend, 5>) -> GradientsParams {
        let ctx = unet.ctx(&self.device, None);
        let mut acc = Backprop::<B> {
            params: GradientsParams::new(),
            emb_act: None,
            skip_grads: Vec::new(),
        };
        let head_input = self.decoder.pop().expect("a U-Net has decoder blocks");
        let h = leaf::<B, 5>(head_input);
        let y = unet.head(h.clone(), self.out_dtype, &ctx);
        let mut grads = backward_seeded(y, grad);
        acc.take_params(&unet.out, &mut grads);
        let mut g = take_grad(&h, &mut grads);

        acc.skip_grads = vec![None; self.encoder.len()];
        for (j, block) in unet.output_blocks.iter().enumerate().rev() {
            let below = if j == 0 {
                self.middle.clone()
            } else {
                self.decoder.pop().expect("one output per decoder block")
            };
            let skip_index = self.encoder.len() - 1 - j;
            let (h, skip) = (
                leaf::<B, 5>(below),
                leaf::<B, 5>(self.encoder[skip_index].clone()),
            );
            let emb = leaf::<B, 2>(self.emb_act.clone());
            let y = decode(block, h.clone(), skip.clone(), emb.clone(), &ctx);
            let mut grads = backward_seeded(y, g);
            acc.take_params(block, &mut grads);
            acc.add_emb(&emb, &mut grads);
            acc.skip_grads[skip_index] = Some(take_grad(&skip, &mut grads));
            g = take_grad(&h, &mut grads);
        }
        drop(self.middle);

        let deepest = self.encoder.last().expect("a U-Net has encoder blocks");
        let h = leaf::<B, 5>(deepest.clone());
        let emb = leaf::<B, 2>(self.emb_act.clone());
        let y = unet.middle(h.clone(), emb.clone(), &ctx);
        let mut grads = backward_seeded(y, g);
        acc.take_params(&unet.middle_block, &mut grads);
        acc.add_emb(&emb, &mut grads);
        g = take_grad(&h, &mut grads);

        encoder_backward(
            unet,
            &ctx,
            &mut acc,
            self.encoder,
            self.input,
            &self.emb_act,
            g,
        );

        if let Some(g_emb) = acc.emb_act.take() {
            let emb = unet.emb_act(&self.timesteps, &ctx);
            let mut grads = backward_seeded(emb, g_emb);
            acc.take_params(&unet.time_embed, &mut grads);
        }
        acc.params
    }
}

/// The encoder's backward pass, from its last block to the stem: `g` is the gradient of the
/// last block's output from the middle block, `encoder` every encoder output, `input` the
/// stem's input.
fn encoder_backward<B: KernelAutodiffBackend>(
    unet: &UNet<B>,
    ctx: &Ctx<B>,
    acc: &mut Backprop<B>,
    mut encoder: Vec<Tensor<B::InnerBackend, 5>>,
    input: Tensor<B::InnerBackend, 5>,
    emb_act: &Tensor<B::InnerBackend, 2>,
    g: Tensor<B::InnerBackend, 5>,
) {
    let mut g = Some(g);
    for (i, block) in unet.input_blocks.iter().enumerate().rev() {
        // This block's output, no longer needed: its gradient is complete.
        encoder.pop();
        let g_out = g.take().expect("the gradient of every encoder output");
        let g_out = match acc.skip_grads[i].take() {
            Some(skip) => g_out + skip,
            None => g_out,
        };
        // The stem's input is the data: no gradient wanted.
        let below = match i {
            0 => Tensor::from_inner(input.clone()),
            _ => leaf::<B, 5>(encoder[i - 1].clone()),
        };
        let emb = leaf::<B, 2>(emb_act.clone());
        let y = block.forward(below.clone(), emb.clone(), ctx);
        let mut grads = backward_seeded(y, g_out);
        acc.take_params(block, &mut grads);
        acc.add_emb(&emb, &mut grads);
        if i > 0 {
            g = Some(take_grad(&below, &mut grads));
        }
    }
}

impl<B: AutodiffBackend> Backprop<B> {
    /// Moves the gradients of `module`'s parameters from `grads` into the result.
    fn take_params<M: AutodiffModule<B>>(&mut self, module: &M, grads: &mut B::Gradients) {
        struct Mover<'a, B: AutodiffBackend> {
            grads: &'a mut B::Gradients,
            params: &'a mut GradientsParams,
        }
        impl<B: AutodiffBackend> ModuleVisitor<B> for Mover<'_, B> {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
                let Some(grad) = param.val().grad_remove(self.grads) else {
                    return;
                };
                let grad = match self.params.remove::<B::InnerBackend, D>(param.id) {
                    Some(before) => before + grad,
                    None => grad,
                };
                self.params.register(param.id, grad);
            }
        }
        module.visit(&mut Mover::<B> {
            grads,
            params: &mut self.params,
        });
    }

    /// Adds the gradient `grads` holds for the time-embedding leaf `emb` (none where the
    /// block has no ResBlock).
    fn add_emb(&mut self, emb: &Tensor<B, 2>, grads: &mut B::Gradients) {
        if let Some(g) = emb.grad_remove(grads) {
            self.emb_act = Some(match self.emb_act.take() {
                Some(before) => before + g,
                None => g,
            });
        }
    }
}

/// A kept activation as a leaf of a new graph.
fn leaf<B: AutodiffBackend, const D: usize>(t: Tensor<B::InnerBackend, D>) -> Tensor<B, D> {
    Tensor::from_inner(t).require_grad()
}

/// The gradient of leaf `t` (zeros if nothing it fed reached the output).
fn take_grad<B: AutodiffBackend, const D: usize>(
    t: &Tensor<B, D>,
    grads: &mut B::Gradients,
) -> Tensor<B::InnerBackend, D> {
    t.grad_remove(grads).unwrap_or_else(|| {
        let inner = t.clone().inner();
        inner.zeros_like()
    })
}
