//! The tile sizes of the implicit GEMM, fixed per launch (compile-time constants of the
//! kernel), and how they are chosen.

/// One cube computes a `bm x bn` block of the output (`bm = threads_m * tm` positions,
/// `bn = threads_n * tn` channels), each of its `threads_m * threads_n` units a `tm x tn`
/// register tile, and the reduction advances `bk` input channels per step through shared
/// memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tile {
    /// Units along the output positions.
    pub threads_m: u32,
    /// Units along the output channels.
    pub threads_n: u32,
    /// Output positions per unit.
    pub tm: u32,
    /// Output channels per unit.
    pub tn: u32,
    /// Input channels per step of the reduction (a power of two, at most 32).
    pub bk: u32,
    /// Consecutive channels of one input voxel each unit stages per step (divides `bk`):
    /// `bk` for channels-first input (neighbouring units take neighbouring voxels), fewer for
    /// channels-last input (neighbouring units take neighbouring channels).
    pub a_run: u32,
    /// The output is channels-last: neighbouring units store neighbouring channels.
    pub out_channels_fastest: bool,
}

impl Tile {
    /// Units per cube.
    pub fn threads(&self) -> u32 {
        self.threads_m * self.threads_n
    }

    /// Output positions per cube.
    pub fn bm(&self) -> u32 {
        self.threads_m * self.tm
    }

    /// Output channels per cube.
    pub fn bn(&self) -> u32 {
        self.threads_n * self.tn
    }

    /// Input voxels (tile rows) each unit stages per step, `a_run` channels each.
    pub fn a_rows(&self) -> u32 {
        let runs = self.bk / self.a_run;
        (self.bm() * runs).div_ceil(self.threads())
    }

    /// Distance between the staged input tile's channel rows in shared memory: `bm` plus
    /// padding that puts the units of one warp storing short channel runs in distinct banks
    /// (with `bm` a multiple of 32, unit `(row r, run q)` of a warp lands in bank
    /// `q * 32 / runs + r`).
    pub fn a_stride(&self) -> u32 {
        let runs = self.bk / self.a_run;
        if runs > 1 {
            self.bm() + 32 / self.bk
        } else {
            self.bm()
        }
    }

    /// Weight-tile elements each unit stages per step.
    pub fn b_loads(&self) -> u32 {
        (self.bn() * self.bk).div_ceil(self.threads())
    }

    /// The tile for a product with `c_in` input and `c_out` output channels.
    ///
    /// Always 256 units (the most every Vulkan device allows) and blocks of 256 output
    /// positions. Each unit holds an 8x8 register tile where there are more than 32 output
    /// channels (the U-Net's 64 to 256): per step of the reduction 16 shared-memory reads feed
    /// 64 fused multiply-adds, about the ratio at which a GPU's shared memory keeps its FMA
    /// units busy, in 256 x 64 blocks (64 channels: the U-Net's widest, most expensive
    /// levels). Fewer output channels narrow the block (32, 16 or 4 channels) so that no cube
    /// computes mostly padding: the last convolution has one to four output channels, the
    /// data gradient of the first as many as the image and mask channels. `bk` is 16 channels,
    /// or the next power of two above fewer input channels, so that a product over 2 to 5
    /// channels (the first convolution) does not multiply 16-channel chunks of zeros. Shared
    /// memory: at most 21 KiB a cube.
    pub fn choose(
        c_in: usize,
        c_out: usize,
        a_channels_last: bool,
        out_channels_last: bool,
    ) -> Tile {
        let (threads_n, tm, tn) = match c_out {
            0..=4 => (4, 4, 1),
            5..=16 => (4, 4, 4),
            17..=32 => (8, 8, 4),
            _ => (8, 8, 8),
        };
        let bk = c_in.next_power_of_two().clamp(1, 16) as u32;
        Tile {
            threads_m: 256 / threads_n,
            threads_n,
            tm,
            tn,
            bk,
            a_run: if a_channels_last { bk.min(4) } else { bk },
            out_channels_fastest: out_channels_last && c_out > 1,
        }
    }
}
