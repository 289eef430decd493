//! U-Net settings, with presets equal to the reference's `create_model` calls.

use serde::{Deserialize, Serialize};

use crate::UNetError;

/// Shape of the U-Net. Field names and defaults follow the reference's `create_model` arguments;
/// the default is the whole-head model (40,226,433 parameters).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UNetConfig {
    /// Noisy image channels plus condition channels (whole-head: 1 + 2).
    pub in_channels: usize,
    /// Predicted-noise channels, equal to the image channels.
    pub out_channels: usize,
    /// Base channel count C (`num_channels` in the reference scripts).
    pub model_channels: usize,
    /// ResBlocks per level in the encoder (the decoder has one more).
    pub num_res_blocks: usize,
    /// Channel multiplier per level.
    pub channel_mult: Vec<usize>,
    /// Image sizes at which attention is used. As in the reference they are turned into
    /// downsampling factors by `image_size / r`, and attention sits where the running factor
    /// equals one of them (for BraTS, 192 / 16 = 12 never occurs, so only the middle block has it).
    pub attention_resolutions: Vec<usize>,
    /// In-plane image size the reference keys `attention_resolutions` on.
    pub image_size: usize,
    /// Attention heads; the reference always uses one head spanning all channels.
    pub num_heads: usize,
    /// Groups of every GroupNorm.
    pub num_groups: usize,
}

impl Default for UNetConfig {
    fn default() -> Self {
        Self::whole_head()
    }
}

impl UNetConfig {
    /// The released whole-head model: 128^3, 3 -> 1 channels, C = 64, one ResBlock per level,
    /// attention at 16^3.
    pub fn whole_head() -> Self {
        Self {
            in_channels: 3,
            out_channels: 1,
            model_channels: 64,
            num_res_blocks: 1,
            channel_mult: vec![1, 1, 2, 3, 4],
            attention_resolutions: vec![16],
            image_size: 128,
            num_heads: 1,
            num_groups: 32,
        }
    }

    /// The released BraTS model: 192x192x144, 8 -> 4 channels, C = 64, two ResBlocks per level,
    /// attention only in the middle block.
    pub fn brats() -> Self {
        Self {
            in_channels: 8,
            out_channels: 4,
            num_res_blocks: 2,
            image_size: 192,
            ..Self::whole_head()
        }
    }

    /// A small network with every block kind (two levels, attention at the second level and in
    /// the middle, upsampling, skips): C = 8, 4 groups, sizes a multiple of 2. For tests and
    /// quick checks of backends, precisions and layouts.
    pub fn tiny() -> Self {
        Self {
            model_channels: 8,
            channel_mult: vec![1, 2],
            attention_resolutions: vec![8],
            image_size: 16,
            num_groups: 4,
            ..Self::whole_head()
        }
    }

    /// Downsampling factors at which attention blocks are inserted.
    pub fn attention_downsample_factors(&self) -> Vec<usize> {
        self.attention_resolutions
            .iter()
            .filter(|&&r| r > 0)
            .map(|&r| self.image_size / r)
            .collect()
    }

    /// A sentence for each `attention_resolutions` entry that matches no level, so gets no
    /// attention block. Not an error: the reference's BraTS model has one (`[16]` with
    /// `image_size = 192`: factor 12), and its released weights depend on that.
    pub fn unmatched_attention(&self) -> Vec<String> {
        let factors: Vec<usize> = (0..self.channel_mult.len()).map(|l| 1 << l).collect();
        let resolutions: Vec<usize> = factors
            .iter()
            .filter(|&&f| self.image_size.is_multiple_of(f))
            .map(|f| self.image_size / f)
            .collect();
        self.attention_resolutions
            .iter()
            .filter(|&&r| {
                !(r > 0
                    && self.image_size.is_multiple_of(r)
                    && factors.contains(&(self.image_size / r)))
            })
            .map(|r| {
                format!(
                    "attention_resolutions entry {r} matches no level (with image_size {} the levels are at {resolutions:?}), so it adds no attention block",
                    self.image_size
                )
            })
            .collect()
    }

    /// Every spatial size must be divisible by this (one halving per level but the last).
    pub fn size_divisor(&self) -> usize {
        1 << self.channel_mult.len().saturating_sub(1)
    }

    /// Checks what the network cannot be built with.
    pub fn validate(&self) -> Result<(), UNetError> {
        let bad = |reason: String| Err(UNetError::InvalidConfig { reason });
        if self.in_channels == 0 || self.out_channels == 0 || self.model_channels == 0 {
            return bad("in_channels, out_channels and model_channels must be positive".into());
        }
        if self.channel_mult.is_empty() || self.channel_mult.contains(&0) {
            return bad(format!(
                "channel_mult must be non-empty and positive, got {:?}",
                self.channel_mult
            ));
        }
        if self.num_res_blocks == 0 {
            return bad("num_res_blocks must be at least 1".into());
        }
        if self.num_heads != 1 {
            return bad(format!(
                "only num_heads = 1 (the reference's setting) is implemented, got {}",
                self.num_heads
            ));
        }
        if !self.model_channels.is_multiple_of(2) {
            return bad(format!(
                "model_channels must be even for the sinusoidal time embedding, got {}",
                self.model_channels
            ));
        }
        for &m in &self.channel_mult {
            let ch = m * self.model_channels;
            if self.num_groups == 0 || !ch.is_multiple_of(self.num_groups) {
                return bad(format!(
                    "level width {ch} (model_channels {} x mult {m}) is not divisible by num_groups {}",
                    self.model_channels, self.num_groups
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attention_entries_that_match_no_level_are_named() {
        assert!(UNetConfig::whole_head().unmatched_attention().is_empty());
        assert!(UNetConfig::tiny().unmatched_attention().is_empty());
        // The reference's BraTS setting: 192 / 16 = 12 is no level's factor.
        let brats = UNetConfig::brats().unmatched_attention();
        assert_eq!(brats.len(), 1, "{brats:?}");
        assert!(brats[0].contains("entry 16"), "{brats:?}");
        let odd = UNetConfig {
            attention_resolutions: vec![8, 5, 0, 1],
            ..UNetConfig::tiny()
        };
        let warnings = odd.unmatched_attention();
        // tiny: image_size 16, two levels, at 16 and 8.
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        assert!(warnings[0].contains("entry 5") && warnings[0].contains("[16, 8]"));
    }
}
