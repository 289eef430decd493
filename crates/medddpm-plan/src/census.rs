//! What the U-Net holds while it runs, counted in values (not bytes) from its configuration
//! and the grid alone: the parameters, the activations a training forward pass keeps for its
//! backward pass, and what a forward pass without a graph holds at once.
//!
//! The counts follow what this workspace's operations keep (`medddpm-kernels`'
//! `extension/autodiff.rs`): a convolution keeps its input, a GroupNorm (fused with its SiLU)
//! its input, a matrix product both operands, a softmax its output; burn's additions and
//! layout changes keep nothing. A tensor kept by several operations counts once.

use medddpm_unet::UNetConfig;

/// The U-Net's memory in values, per example of a batch (parameters excepted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Census {
    /// Trainable parameters (equal to the built network's `num_params`).
    pub parameters: u64,
    /// Voxels of one input channel.
    pub voxels: u64,
    /// Activation values a training forward pass keeps for its backward pass, attention
    /// weights excepted.
    pub saved: u64,
    /// Attention weights the training forward pass keeps (n x n per attention block; each is
    /// kept in the compute dtype and, as the softmax's output, in f32).
    pub saved_attention: u64,
    /// Values activation checkpointing keeps: the network input and every block's output.
    pub block_outputs: u64,
    /// The largest single block's kept values (what checkpointing recomputes at once),
    /// attention weights excepted, and those weights.
    pub largest_block: (u64, u64),
    /// Gradient values the backward pass of the largest block holds at once.
    pub backward_transient: u64,
    /// Values a forward pass without a graph (sampling) holds at its fullest moment: the skips
    /// waiting for the decoder and the working tensors of one block, attention weights
    /// excepted, and those weights.
    pub inference_live: (u64, u64),
}

/// A block's channels at a level, as the walk meets it.
struct Walk {
    census: Census,
    /// Voxels at level 0.
    v0: u64,
    emb: u64,
    attention_at: Vec<usize>,
    /// Sizes of the skips waiting for the decoder (sampling), in values.
    skips: Vec<u64>,
}

impl Walk {
    fn voxels(&self, level: usize) -> u64 {
        self.v0 >> (3 * level)
    }

    fn conv(&mut self, c_in: u64, c_out: u64, kernel: u64) {
        self.census.parameters += c_in * c_out * kernel + c_out;
    }

    /// A block that keeps `saved` values and `attention` weights, holds `grads` gradient values
    /// in its backward pass and `working` values at once without a graph, outputs `output`.
    fn block(&mut self, saved: u64, attention: u64, grads: u64, working: (u64, u64), output: u64) {
        let c = &mut self.census;
        c.saved += saved;
        c.saved_attention += attention;
        c.block_outputs += output;
        if saved + attention > c.largest_block.0 + c.largest_block.1 {
            c.largest_block = (saved, attention);
        }
        c.backward_transient = c.backward_transient.max(grads);
        let live = self.skips.iter().sum::<u64>() + working.0;
        if live + working.1 > c.inference_live.0 + c.inference_live.1 {
            c.inference_live = (live, working.1);
        }
    }

    /// A ResBlock from `c_in` (`joined`: the decoder's [current, skip] made into a new tensor)
    /// to `c_out` channels at `level`, with attention where configured.
    fn res(&mut self, c_in: u64, c_out: u64, level: usize, joined: bool) -> u64 {
        let attention = self.attention_at.contains(&(1 << level));
        self.res_with(c_in, c_out, level, joined, attention)
    }

    /// [`Walk::res`] with attention or without (the middle block's ResBlocks have none of
    /// their own).
    fn res_with(
        &mut self,
        c_in: u64,
        c_out: u64,
        level: usize,
        joined: bool,
        with_attention: bool,
    ) -> u64 {
        let v = self.voxels(level);
        // GroupNorm, conv, time-embedding Linear, GroupNorm, conv, and the 1x1 skip conv.
        self.census.parameters += 2 * c_in + 2 * c_out + self.emb * c_out + c_out;
        self.conv(c_in, c_out, 27);
        self.conv(c_out, c_out, 27);
        if c_in != c_out {
            self.conv(c_in, c_out, 1);
        }
        // Kept: the joined input (decoder), the first GroupNorm's output, the first conv's
        // output, the second GroupNorm's output and the sum.
        let saved = (u64::from(joined) + 1) * c_in * v + 3 * c_out * v;
        let grads = 2 * (c_in + c_out) * v;
        let working = 2 * (c_in + c_out) * v;
        let (mut saved, mut attention, mut working) = (saved, 0, (working, 0));
        if with_attention {
            let (s, a) = self.attention(c_out, level);
            saved += s;
            attention += a;
            working = (working.0.max(5 * c_out * v), a);
        }
        self.block(saved, attention, grads, working, c_out * v);
        c_out * v
    }

    /// An attention block of `c` channels at `level`: returns its kept values and weights.
    fn attention(&mut self, c: u64, level: usize) -> (u64, u64) {
        let n = self.voxels(level);
        // GroupNorm, qkv (k = 1, c -> 3c), proj_out (c -> c).
        self.census.parameters += 2 * c + 3 * c * c + 3 * c + c * c + c;
        // The normalised tokens, qkv, the scaled q and k, the weighted values, the sum.
        (8 * c * n, n * n)
    }
}

/// Counts `model` on a network grid of `grid` voxels ([depth, height, width], each a multiple
/// of the model's size divisor).
pub fn census(model: &UNetConfig, grid: [usize; 3]) -> Census {
    let v0 = grid.iter().map(|&s| s as u64).product::<u64>();
    let c = model.model_channels as u64;
    let mut walk = Walk {
        census: Census {
            voxels: v0,
            ..Census::default()
        },
        v0,
        emb: 4 * c,
        attention_at: model.attention_downsample_factors(),
        skips: Vec::new(),
    };
    // Time embedding: Linear(C -> 4C), Linear(4C -> 4C).
    walk.census.parameters += c * 4 * c + 4 * c + 16 * c * c + 4 * c;
    let mults: Vec<u64> = model.channel_mult.iter().map(|&m| m as u64).collect();
    let levels = mults.len();
    let nrb = model.num_res_blocks;
    let c_in = model.in_channels as u64;
    // The stem keeps the network input; its output is the first skip.
    let mut ch = c * mults[0];
    walk.conv(c_in, ch, 27);
    walk.census.block_outputs += c_in * v0;
    walk.block(
        (c_in + ch) * v0,
        0,
        2 * (c_in + ch) * v0,
        ((c_in + ch) * v0, 0),
        ch * v0,
    );
    walk.skips.push(ch * v0);
    let mut skip_channels = vec![ch];
    for (level, &mult) in mults.iter().enumerate() {
        for _ in 0..nrb {
            let out = walk.res(ch, c * mult, level, false);
            ch = c * mult;
            walk.skips.push(out);
            skip_channels.push(ch);
        }
        if level + 1 != levels {
            walk.conv(ch, ch, 27);
            let v = walk.voxels(level + 1);
            let v_in = walk.voxels(level);
            walk.block(
                ch * v,
                0,
                ch * (v + v_in),
                (ch * (v + v_in), 0),
                ch * v,
            );
            walk.skips.push(ch * v);
            skip_channels.push(ch);
        }
    }
    // Middle: ResBlock, attention, ResBlock at the bottom level.
    let bottom = levels - 1;
    let v = walk.voxels(bottom);
    walk.res_with(ch, ch, bottom, false, false);
    let (s, a) = walk.attention(ch, bottom);
    walk.block(s, a, 2 * ch * v, (5 * ch * v, a), ch * v);
    walk.res_with(ch, ch, bottom, false, false);
    for level in (0..levels).rev() {
        for i in 0..=nrb {
            let skip = skip_channels.pop().expect("one skip per encoder block");
            walk.skips.pop();
            let out = c * mults[level];
            walk.res(ch + skip, out, level, true);
            ch = out;
            if level > 0 && i == nrb {
                // Upsample: the trilinear x2 output and its conv's, one level up.
                walk.conv(ch, ch, 27);
                let v = walk.voxels(level - 1);
                walk.block(2 * ch * v, 0, 2 * ch * v, (2 * ch * v, 0), ch * v);
            }
        }
    }
    // Head: GroupNorm + SiLU (its output kept by the conv), conv to the output channels.
    let out = model.out_channels as u64;
    walk.census.parameters += 2 * ch;
    walk.conv(ch, out, 27);
    walk.block(
        (ch + out) * v0,
        0,
        2 * (ch + out) * v0,
        ((2 * ch + out) * v0, 0),
        0,
    );
    walk.census
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::module::Module;

    /// The walk meets the blocks the network is built from: its parameter count is the built
    /// network's, for every preset and a few odd shapes.
    #[test]
    fn the_census_counts_the_built_networks_parameters() {
        let odd = UNetConfig {
            num_res_blocks: 3,
            channel_mult: vec![1, 2, 2],
            attention_resolutions: vec![16, 32],
            ..UNetConfig::tiny()
        };
        let wide_input = UNetConfig {
            in_channels: 8,
            out_channels: 4,
            model_channels: 16,
            num_groups: 8,
            ..UNetConfig::whole_head()
        };
        for model in [
            UNetConfig::whole_head(),
            UNetConfig::brats(),
            UNetConfig::tiny(),
            odd,
            wide_input,
        ] {
            let built = model.init::<Flex>(&Default::default()).unwrap().num_params() as u64;
            assert_eq!(census(&model, [16, 16, 16]).parameters, built, "{model:?}");
        }
    }

    /// Activations grow with the voxels and the batch's examples do not share them; the
    /// attention weights grow with the square of the attention level's voxels.
    #[test]
    fn activations_scale_with_the_grid() {
        let model = UNetConfig::whole_head();
        let small = census(&model, [64, 64, 64]);
        let large = census(&model, [128, 128, 128]);
        assert_eq!(large.voxels, 8 * small.voxels);
        assert_eq!(large.saved, 8 * small.saved);
        assert_eq!(large.block_outputs, 8 * small.block_outputs);
        assert_eq!(large.saved_attention, 64 * small.saved_attention);
        assert_eq!(large.parameters, small.parameters);
        // Checkpointing keeps a fraction of what the plain pass keeps.
        assert!(large.block_outputs + large.largest_block.0 < large.saved / 2);
        // Sampling holds far less than training keeps.
        assert!(large.inference_live.0 < large.saved / 3);
    }
}
