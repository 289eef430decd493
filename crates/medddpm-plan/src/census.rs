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
    /// Values the largest block's forward pass holds at once beside what it keeps: what
    /// checkpointing's recomputation adds to the block's kept values and gradients.
    pub recompute_working: u64,
    /// Of `saved`, the GroupNorm + SiLU outputs that feed the ResBlocks' convolutions (what
    /// checkpointing `norms` recomputes instead of keeping), and the largest of them.
    pub norm_outputs: (u64, u64),
    /// Values a forward pass without a graph (sampling) holds at its fullest moment: the skips
    /// waiting for the decoder and the working tensors of one block, attention weights
    /// excepted, and those weights.
    pub inference_live: (u64, u64),
    /// The most values of one activation tensor a convolution reads or writes (the decoder's
    /// joined input at full resolution): cuDNN refuses tensors of 2^31 values or more.
    pub largest_tensor: u64,
}

/// The counts as the walk meets the blocks, in f64 so that no setting, however absurd,
/// overflows (exact below 2^53, far beyond any real network).
#[derive(Default)]
struct Counts {
    parameters: f64,
    saved: f64,
    saved_attention: f64,
    block_outputs: f64,
    largest_block: (f64, f64),
    backward_transient: f64,
    recompute_working: f64,
    norm_outputs: (f64, f64),
    inference_live: (f64, f64),
    largest_tensor: f64,
}

/// The walk through the network's blocks.
struct Walk {
    census: Counts,
    /// Voxels at level 0.
    v0: f64,
    emb: f64,
    attention_at: Vec<usize>,
    /// Sizes of the skips waiting for the decoder (sampling), in values.
    skips: Vec<f64>,
    /// Their sum.
    held: f64,
    /// GroupNorm's groups.
    groups: f64,
}

impl Walk {
    fn voxels(&self, level: usize) -> f64 {
        self.v0 / 8f64.powi(level as i32)
    }

    fn push_skip(&mut self, values: f64) {
        self.skips.push(values);
        self.held += values;
    }

    /// A convolution's input or output of `values` values.
    fn tensor(&mut self, values: f64) {
        self.census.largest_tensor = self.census.largest_tensor.max(values);
    }

    fn conv(&mut self, c_in: f64, c_out: f64, kernel: f64) {
        self.census.parameters += c_in * c_out * kernel + c_out;
    }

    /// A block that keeps `saved` values and `attention` weights, holds `grads` gradient values
    /// in its backward pass and `working` values at once without a graph, outputs `output`.
    fn block(&mut self, saved: f64, attention: f64, grads: f64, working: (f64, f64), output: f64) {
        let c = &mut self.census;
        c.saved += saved;
        c.saved_attention += attention;
        c.block_outputs += output;
        if saved + attention > c.largest_block.0 + c.largest_block.1 {
            c.largest_block = (saved, attention);
        }
        c.backward_transient = c.backward_transient.max(grads);
        c.recompute_working = c.recompute_working.max(working.0);
        let live = self.held + working.0;
        if live + working.1 > c.inference_live.0 + c.inference_live.1 {
            c.inference_live = (live, working.1);
        }
    }

    /// A ResBlock from `c_in` to `c_out` channels at `level`, with attention where configured;
    /// `joined`: the values per voxel its input keeps besides the normalised input (a
    /// decoder's current activation where the block takes [current, skip] as two parts, or
    /// their join where it makes one: [`Walk::joined_input`]).
    fn res(&mut self, c_in: f64, c_out: f64, level: usize, joined: f64) -> f64 {
        let attention = self.attention_at.contains(&(1 << level));
        self.res_with(c_in, c_out, level, joined, attention)
    }

    /// [`Walk::res`] with attention or without (the middle block's ResBlocks have none of
    /// their own).
    fn res_with(
        &mut self,
        c_in: f64,
        c_out: f64,
        level: usize,
        joined: f64,
        with_attention: bool,
    ) -> f64 {
        let v = self.voxels(level);
        self.tensor(c_in.max(c_out) * v);
        // GroupNorm, conv, time-embedding Linear, GroupNorm, conv, and the 1x1 skip conv.
        self.census.parameters += 2.0 * c_in + 2.0 * c_out + self.emb * c_out + c_out;
        self.conv(c_in, c_out, 27.0);
        self.conv(c_out, c_out, 27.0);
        if c_in != c_out {
            self.conv(c_in, c_out, 1.0);
        }
        // Kept: the decoder's input (`joined`), the first GroupNorm's output, the first conv's
        // output, the second GroupNorm's output and the sum.
        let saved = (joined + c_in) * v + 3.0 * c_out * v;
        // The two normalisations' outputs, each the input of a convolution.
        let norms = &mut self.census.norm_outputs;
        norms.0 += (c_in + c_out) * v;
        norms.1 = norms.1.max(c_in.max(c_out) * v);
        let grads = 2.0 * (c_in + c_out) * v;
        let working = 2.0 * (c_in + c_out) * v;
        let (mut saved, mut attention, mut working) = (saved, 0.0, (working, 0.0));
        if with_attention {
            let (s, a) = self.attention(c_out, level);
            saved += s;
            attention += a;
            working = (working.0.max(5.0 * c_out * v), a);
        }
        self.block(saved, attention, grads, working, c_out * v);
        c_out * v
    }

    /// What a decoder ResBlock keeps of its input [current, skip] per voxel beyond what the
    /// encoder keeps (the skip): the current activation where no group of the first GroupNorm
    /// straddles the two (the block takes them as parts), else their join.
    fn joined_input(&self, current: f64, skip: f64) -> f64 {
        let c_in = current + skip;
        let per_group = c_in / self.groups;
        if c_in % self.groups == 0.0 && current % per_group == 0.0 {
            current
        } else {
            current + skip
        }
    }

    /// An attention block of `c` channels at `level`: returns its kept values and weights.
    fn attention(&mut self, c: f64, level: usize) -> (f64, f64) {
        let n = self.voxels(level);
        // GroupNorm, qkv (k = 1, c -> 3c), proj_out (c -> c).
        self.census.parameters += 2.0 * c + 3.0 * c * c + 3.0 * c + c * c + c;
        // The normalised tokens, qkv, the scaled q and k, the weighted values, the sum.
        (8.0 * c * n, n * n)
    }
}

impl Walk {
    /// The middle block, the decoder (each block taking a skip) and the output head, from
    /// `ch` channels at the bottom.
    fn middle_decoder_head(
        &mut self,
        model: &UNetConfig,
        mut ch: f64,
        mut skip_channels: Vec<f64>,
    ) {
        let walk = self;
        let c = model.model_channels as f64;
        let mults: Vec<f64> = model.channel_mult.iter().map(|&m| m as f64).collect();
        let levels = mults.len();
        let nrb = model.num_res_blocks;
        let v0 = walk.v0;
        // Middle: ResBlock, attention, ResBlock at the bottom level.
        let bottom = levels - 1;
        let v = walk.voxels(bottom);
        walk.res_with(ch, ch, bottom, 0.0, false);
        let (s, a) = walk.attention(ch, bottom);
        walk.block(s, a, 2.0 * ch * v, (5.0 * ch * v, a), ch * v);
        walk.res_with(ch, ch, bottom, 0.0, false);
        for level in (0..levels).rev() {
            for i in 0..=nrb {
                let skip = skip_channels.pop().expect("one skip per encoder block");
                walk.held -= walk.skips.pop().expect("one skip size per skip");
                let out = c * mults[level];
                walk.res(ch + skip, out, level, walk.joined_input(ch, skip));
                ch = out;
                if level > 0 && i == nrb {
                    // Upsample: the trilinear x2 output and its conv's, one level up.
                    walk.conv(ch, ch, 27.0);
                    let up = 2.0 * ch * walk.voxels(level - 1);
                    walk.tensor(up / 2.0);
                    walk.block(up, 0.0, up, (up, 0.0), up / 2.0);
                }
            }
        }
        // Head: GroupNorm + SiLU (its output kept by the conv), conv to the output channels.
        let out = model.out_channels as f64;
        walk.census.parameters += 2.0 * ch;
        walk.conv(ch, out, 27.0);
        let head = (ch + out) * v0;
        walk.block(head, 0.0, 2.0 * head, (head + ch * v0, 0.0), 0.0);
    }
}

/// Counts `model` on a network grid of `grid` voxels ([depth, height, width], each a multiple
/// of the model's size divisor).
pub fn census(model: &UNetConfig, grid: [usize; 3]) -> Census {
    let v0 = grid.iter().map(|&s| s as f64).product::<f64>();
    let c = model.model_channels as f64;
    let mut walk = Walk {
        census: Counts::default(),
        v0,
        emb: 4.0 * c,
        attention_at: model.attention_downsample_factors(),
        skips: Vec::new(),
        held: 0.0,
        groups: model.num_groups as f64,
    };
    // Time embedding: Linear(C -> 4C), Linear(4C -> 4C).
    walk.census.parameters += c * 4.0 * c + 4.0 * c + 16.0 * c * c + 4.0 * c;
    let mults: Vec<f64> = model.channel_mult.iter().map(|&m| m as f64).collect();
    let levels = mults.len();
    let nrb = model.num_res_blocks;
    let c_in = model.in_channels as f64;
    // The stem keeps the network input; its output is the first skip.
    let mut ch = c * mults[0];
    walk.conv(c_in, ch, 27.0);
    walk.census.block_outputs += c_in * v0;
    let stem = (c_in + ch) * v0;
    walk.tensor(c_in.max(ch) * v0);
    walk.block(stem, 0.0, 2.0 * stem, (stem, 0.0), ch * v0);
    walk.push_skip(ch * v0);
    let mut skip_channels = vec![ch];
    for (level, &mult) in mults.iter().enumerate() {
        for _ in 0..nrb {
            let out = walk.res(ch, c * mult, level, 0.0);
            ch = c * mult;
            walk.push_skip(out);
            skip_channels.push(ch);
        }
        if level + 1 != levels {
            walk.conv(ch, ch, 27.0);
            let v = walk.voxels(level + 1);
            let both = ch * (v + walk.voxels(level));
            walk.block(ch * v, 0.0, both, (both, 0.0), ch * v);
            walk.push_skip(ch * v);
            skip_channels.push(ch);
        }
    }
    walk.middle_decoder_head(model, ch, skip_channels);
    let n = walk.census;
    // `as` saturates: a setting beyond any machine reads as u64::MAX, never wraps.
    let whole = |v: f64| v as u64;
    Census {
        parameters: whole(n.parameters),
        voxels: whole(v0),
        saved: whole(n.saved),
        saved_attention: whole(n.saved_attention),
        block_outputs: whole(n.block_outputs),
        largest_block: (whole(n.largest_block.0), whole(n.largest_block.1)),
        backward_transient: whole(n.backward_transient),
        recompute_working: whole(n.recompute_working),
        norm_outputs: (whole(n.norm_outputs.0), whole(n.norm_outputs.1)),
        inference_live: (whole(n.inference_live.0), whole(n.inference_live.1)),
        largest_tensor: whole(n.largest_tensor),
    }
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
            let built = model
                .init::<Flex>(&Default::default())
                .unwrap()
                .num_params() as u64;
            assert_eq!(census(&model, [16, 16, 16]).parameters, built, "{model:?}");
        }
    }

    /// The largest tensor is the decoder's joined input at full resolution (64 channels and a
    /// 64-channel skip for both released networks): four BraTS examples pass cuDNN's 2^31.
    #[test]
    fn the_largest_tensor_is_the_joined_input_at_full_resolution() {
        let whole_head = census(&UNetConfig::whole_head(), [128, 128, 128]);
        assert_eq!(whole_head.largest_tensor, 128 * 128 * 128 * 128);
        let brats = census(&UNetConfig::brats(), [144, 192, 192]);
        assert_eq!(brats.largest_tensor, 128 * 144 * 192 * 192);
        assert!(4 * brats.largest_tensor > i32::MAX as u64);
        assert!(3 * brats.largest_tensor <= i32::MAX as u64);
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

    /// A decoder ResBlock whose first GroupNorm has no group across [current, skip] keeps the
    /// current activation, not the join: in the whole-head model the two top-level blocks, the
    /// second at 64^3 and the first at 8^3 (544 MiB fewer values kept in bf16 at 128^3).
    #[test]
    fn the_decoder_keeps_the_join_only_where_a_group_straddles_it() {
        let model = UNetConfig::whole_head();
        let walk = Walk {
            census: Counts::default(),
            v0: 0.0,
            emb: 0.0,
            attention_at: Vec::new(),
            skips: Vec::new(),
            held: 0.0,
            groups: model.num_groups as f64,
        };
        // 64 + 64 in 32 groups of 4; 256 + 256 in groups of 16.
        assert_eq!(walk.joined_input(64.0, 64.0), 64.0);
        assert_eq!(walk.joined_input(256.0, 256.0), 256.0);
        // 256 + 192 in groups of 14 and 128 + 64 in groups of 6: a group straddles both.
        assert_eq!(walk.joined_input(256.0, 192.0), 448.0);
        assert_eq!(walk.joined_input(128.0, 64.0), 192.0);
        // One group spans every channel: each decoder block keeps its join.
        let one_group = UNetConfig {
            num_groups: 1,
            ..model.clone()
        };
        let saved = |model: &UNetConfig| census(model, [128; 3]).saved as f64;
        let mib = (saved(&one_group) - saved(&model)) * 2.0 / f64::from(1 << 20);
        assert!((mib - 544.25).abs() < 1e-9, "{mib} MiB");
    }
}
