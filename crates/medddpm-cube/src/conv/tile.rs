//! The tile sizes of the implicit GEMM, fixed per launch (compile-time constants of the
//! kernel), and how they are chosen.

use super::tuning::ConvTuning;

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
    /// Input channels per step of the reduction (a power of two, at most 32; 64 on tensor
    /// cores where [`Tile::pipelined`] allows it).
    pub bk: u32,
    /// Consecutive channels of one input voxel each unit stages per step (divides `bk`):
    /// `bk` for channels-first input (neighbouring units take neighbouring voxels), fewer for
    /// channels-last input (neighbouring units take neighbouring channels).
    pub a_run: u32,
    /// The output is channels-last: neighbouring units store neighbouring channels.
    pub out_channels_fastest: bool,
    /// The product runs on tensor cores (16 x 16 x 16 cooperative matrices in the operands'
    /// 16-bit type, f32 accumulators): each of the cube's planes owns [`Tile::plane_rows`] rows and all
    /// `bn` channels, and `tm`/`tn` only say how the staging and the epilogue split the work.
    pub tensor_cores: bool,
    /// Shared-memory buffers of the staged tiles (tensor cores: 1 or 2; FMA: 1).
    pub stages: u32,
    /// Register cap per unit for the CUDA compiler, 0 for none. Part of the kernel's
    /// compile-time configuration, so a capped kernel is compiled and cached apart; the
    /// vendored `cubecl-cuda` writes it into the kernel's launch bounds (see its
    /// README.medddpm.md).
    pub max_registers: u32,
    /// The tensor-core products as CUDA's `ldmatrix` loads and `mma.sync` 16 x 8 x 16
    /// products instead of cooperative matrices (see `mma_ldm`; CUDA only).
    pub ldmatrix: bool,
    /// Tensor-core tiles of 32-channel steps in runs of 8: the staged rows' units rotated
    /// (see `gemm::a_slot`).
    pub rotate_rows: bool,
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

    /// Distance between the staged input tile's rows in shared memory. FMA: the tile is
    /// `[k, m]` and this is `bm` plus padding that puts the units of one warp storing short
    /// channel runs in distinct banks (with `bm` a multiple of 32, unit `(row r, run q)` of a
    /// warp lands in bank `q * 32 / runs + r`). Tensor cores: the tile is `[m, k]` (a row-major
    /// A, so that a channels-last run stores as one vector) and this is `bk + 8`: rows stay 16
    /// bytes aligned for the cooperative-matrix loads, and eight rows read together land on
    /// distinct banks.
    pub fn a_stride(&self) -> u32 {
        let runs = self.bk / self.a_run;
        match (runs > 1, self.tensor_cores) {
            (_, true) => self.bk + 8,
            (false, false) => self.bm(),
            (true, false) => self.bm() + 32 / self.bk,
        }
    }

    /// Distance between the staged weight tile's `k` rows (tensor cores; the FMA kernel packs
    /// them `bn` apart): eight elements more than a row, for the same reasons as
    /// [`Tile::a_stride`].
    pub fn b_stride(&self) -> u32 {
        self.bn() + 8
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
            tensor_cores: false,
            stages: 1,
            max_registers: 0,
            ldmatrix: false,
            rotate_rows: false,
        }
    }

    /// The tensor-core tile for the same product, or `None` for a product without output
    /// channels.
    ///
    /// Blocks of 256 positions by 16, 32 or 64 channels; 8 planes of 32 units, each owning 32
    /// rows, that is 2 x (bn / 16) accumulators of 16 x 16. The reduction steps 32 input
    /// channels at a time where there are that many (two matrix steps per staging, half the
    /// barriers), else 16 (zeros past the last channel). Four output channels or fewer (the
    /// last convolution, and the first's data gradient) still take 16-channel blocks: the
    /// padding costs products, which are cheap here, while the FMA kernel's scalar gather made
    /// the last convolution alone 7.8 ms of an H100's forward pass. Cubes
    /// of 128 units were measured too: no faster on CUDA, slower on Vulkan. Shared memory: at
    /// most 25 KiB staged plus 8 KiB of epilogue scratch.
    pub fn choose_tensor_cores(
        c_in: usize,
        c_out: usize,
        a_channels_last: bool,
        out_channels_last: bool,
    ) -> Option<Tile> {
        let bn: u32 = match c_out {
            0 => return None,
            1..=16 => 16,
            17..=32 => 32,
            _ => 64,
        };
        let bk = if c_in >= 32 { 32 } else { 16 };
        Some(Tile {
            threads_m: 32,
            threads_n: 8,
            tm: 8,
            tn: bn / 8,
            bk,
            a_run: if a_channels_last { 8 } else { bk },
            out_channels_fastest: out_channels_last,
            tensor_cores: true,
            stages: 1,
            max_registers: 0,
            ldmatrix: false,
            rotate_rows: false,
        })
    }

    /// This tensor-core tile with `tuning`'s pipeline where a cube's shared memory
    /// (`shared_limit` bytes) holds it: 64 channels a step for a channels-last input of at
    /// least 64 channels (two vectors of 8 per staged run), two stages; each dropped, the
    /// stages first, where the memory would not hold it.
    pub fn pipelined(self, tuning: &ConvTuning, c_in: usize, shared_limit: usize) -> Tile {
        let mut t = self;
        if !t.tensor_cores {
            return t;
        }
        t.max_registers = tuning.max_registers;
        t.stages = tuning.stages.clamp(1, 2);
        let channels_last = t.a_run < t.bk;
        if tuning.k_step == 64 && channels_last && c_in >= 64 {
            t.bk = 64;
            t.a_run = 16;
        }
        while t.shared_bytes() > shared_limit && t.stages > 1 {
            t.stages -= 1;
        }
        if t.shared_bytes() > shared_limit && t.bk == 64 {
            t.bk = 32;
            t.a_run = 8;
        }
        t
    }

    /// Shared memory a tensor-core cube takes: its stages of 16-bit A and B tiles and the
    /// epilogue's 16 x 16 f32 scratch per plane.
    pub fn shared_bytes(&self) -> usize {
        let staged = self.bm() * self.a_stride() + self.bk * self.b_stride();
        (2 * self.stages * staged + 4 * self.planes() * 256) as usize
    }

    /// Planes (of 32 units) of a tensor-core cube.
    pub fn planes(&self) -> u32 {
        self.threads() / 32
    }

    /// Rows each plane owns in a tensor-core tile.
    pub fn plane_rows(&self) -> u32 {
        self.bm() / self.planes()
    }
}

#[cfg(test)]
mod tests {
    use super::{ConvTuning, Tile};

    /// What a 16 x 16 x 16 cooperative-matrix load and the kernel's plane layout need of
    /// every tensor-core tile the U-Net's and odd channel counts get.
    #[test]
    fn tensor_core_tiles_fit_the_cooperative_matrices() {
        for c_in in [1, 2, 5, 16, 17, 31, 32, 33, 64, 192, 512] {
            for c_out in [1, 2, 4, 5, 8, 16, 17, 32, 33, 64, 128, 512] {
                for (a_last, out_last) in [(false, false), (true, true), (true, false)] {
                    let t = Tile::choose_tensor_cores(c_in, c_out, a_last, out_last)
                        .expect("every product with output channels takes tensor cores");
                    assert!(t.tensor_cores);
                    assert_eq!(t.threads(), 256, "eight planes of 32");
                    assert_eq!(t.plane_rows(), 32, "{t:?}");
                    assert_eq!(t.plane_rows() % 16, 0, "{t:?}");
                    assert_eq!(t.bn() % 16, 0, "{t:?}");
                    assert!(t.bn() as usize >= c_out.min(64), "{t:?}");
                    assert!(t.bk == 16 || t.bk == 32, "{t:?}");
                    assert_eq!(t.bk % t.a_run, 0, "{t:?}");
                    // 16-bit rows a multiple of 8 elements apart (16-byte aligned loads).
                    assert_eq!(t.a_stride() % 8, 0, "{t:?}");
                    assert_eq!(t.b_stride() % 8, 0, "{t:?}");
                    assert!(t.shared_bytes() <= 48 * 1024, "{t:?}");
                }
            }
        }
    }

    /// Two stages and 64-channel steps where a cube's shared memory holds them (an H100's
    /// 227 KiB), dropped where it does not (48 KiB, what Vulkan drivers commonly offer).
    #[test]
    fn pipelines_drop_what_the_shared_memory_cannot_hold() {
        let deep = ConvTuning {
            stages: 2,
            k_step: 64,
            ..ConvTuning::default()
        };
        for c_in in [1, 2, 5, 16, 17, 31, 32, 33, 64, 192, 512] {
            for c_out in [1, 2, 4, 5, 8, 16, 17, 32, 33, 64, 128, 512] {
                for (a_last, out_last) in [(false, false), (true, true), (true, false)] {
                    let t = Tile::choose_tensor_cores(c_in, c_out, a_last, out_last)
                        .expect("every product with output channels takes tensor cores");
                    let small = t.pipelined(&deep, c_in, 48 * 1024);
                    assert!(small.shared_bytes() <= 48 * 1024, "{small:?}");
                    // One 64-channel stage fits only beside a 16-channel weight tile.
                    let narrow = a_last && c_in >= 64 && t.bn() == 16;
                    assert_eq!(small.bk == 64, narrow, "{small:?}");
                    if t.bk == 32 {
                        assert_eq!(small.stages, 1, "{small:?}");
                    }
                    let big = t.pipelined(&deep, c_in, 227 * 1024);
                    assert_eq!(big.stages, 2, "{big:?}");
                    assert_eq!(big.bk == 64, a_last && c_in >= 64, "{big:?}");
                    assert_eq!(big.bk % big.a_run, 0, "{big:?}");
                    assert_eq!(big.a_rows(), t.a_rows(), "{big:?}");
                }
            }
        }
    }

    #[test]
    fn one_output_channel_takes_a_sixteen_channel_block() {
        let t = Tile::choose_tensor_cores(64, 1, true, true).expect("a tensor-core tile");
        assert_eq!(t.bn(), 16);
        assert_eq!(Tile::choose_tensor_cores(64, 0, true, true), None);
        assert!(!Tile::choose(64, 64, true, true).tensor_cores);
    }
}
