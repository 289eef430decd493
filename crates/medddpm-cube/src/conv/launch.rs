//! Launching the implicit-GEMM kernel ([`conv_gemm`](super::gemm)) from host-side numbers.

use std::sync::atomic::{AtomicBool, Ordering};

use burn::tensor::DType;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;
use cubecl::ir::features::MmaConfig;
use cubecl::ir::{ElemType, FloatKind, StorageType};
use cubecl::{CubeCount, CubeDim};

use super::gemm::{conv_gemm, DimsLaunch, StridesLaunch, WeightWalkLaunch, WindowLaunch};
use super::mma::conv_gemm_mma;
use super::mma_parts::PLANE;
use super::tile::Tile;
use super::tuning::conv_tuning;

/// One launch of [`conv_gemm`], its numbers as the host sees them.
#[derive(Debug, Clone)]
pub(super) struct Problem {
    pub batch: usize,
    pub c_in: usize,
    pub c_out: usize,
    pub in_size: [usize; 3],
    pub out_size: [usize; 3],
    pub stride: [usize; 3],
    pub pad: [i64; 3],
    pub taps: [usize; 3],
    pub x_strides: [usize; 5],
    pub x_base: usize,
    pub w_base: i64,
    /// Signed element step per tap along d, h, w.
    pub w_taps: [i64; 3],
    pub w_ci: usize,
    pub w_co: usize,
    pub y_strides: [usize; 5],
    pub y_base: usize,
}

impl Problem {
    /// Output rows of the product.
    pub fn rows(&self) -> usize {
        self.batch * self.out_size.iter().product::<usize>()
    }
}

/// The tile for a product of `c_in` into `c_out` channels reading activation `a` and writing
/// `layout`'s order: on tensor cores where `a` is f16 or bf16 and the runtime has 16 x 16 x 16
/// cooperative matrices of that type with f32 accumulators on 32-unit planes (CUDA's WMMA;
/// Vulkan's cooperative matrices where wgpu compiles to SPIR-V, feature `vulkan`; never
/// WGSL), else register-tiled FMA.
pub(super) fn choose_tile<R: CubeRuntime>(
    a: &CubeTensor<R>,
    c_in: usize,
    c_out: usize,
    out_channels_last: bool,
) -> Tile {
    let a_channels_last = a.meta.strides()[1] == 1;
    let fma = || Tile::choose(c_in, c_out, a_channels_last, out_channels_last);
    if !tensor_cores::<R>(a) {
        return fma();
    }
    let shared = a.client.properties().hardware.max_shared_memory_size;
    let tuning = conv_tuning();
    let ldmatrix = tuning.ldmatrix && manual_mma::<R>(a);
    Tile::choose_tensor_cores(c_in, c_out, a_channels_last, out_channels_last)
        .map(|t| Tile {
            ldmatrix,
            rotate_rows: tuning.rotate,
            ..t.pipelined(&tuning, c_in, shared)
        })
        .unwrap_or_else(fma)
}

/// Whether `a`'s runtime has `ldmatrix` and `mma.sync` 16 x 8 x 16 products of `a`'s 16-bit
/// dtype with f32 sums (CUDA from sm_80), which `mma_ldm` uses instead of cooperative
/// matrices.
pub(super) fn manual_mma<R: CubeRuntime>(a: &CubeTensor<R>) -> bool {
    let Some((half, config)) = half_products(a.dtype, 8) else {
        return false;
    };
    let matmul = &a.client.properties().features.matmul;
    matmul.mma.contains(&config) && matmul.ldmatrix.contains(&half)
}

/// Whether `a`'s runtime multiplies `a`'s 16-bit dtype on tensor cores (see [`choose_tile`]).
pub(super) fn tensor_cores<R: CubeRuntime>(a: &CubeTensor<R>) -> bool {
    let Some((_, config)) = half_products(a.dtype, 16) else {
        return false;
    };
    let props = a.client.properties();
    let planes = props.hardware.plane_size_min == PLANE && props.hardware.plane_size_max == PLANE;
    let yes = planes && props.features.matmul.cmma.contains(&config);
    static NOTED: AtomicBool = AtomicBool::new(false);
    if yes && !NOTED.swap(true, Ordering::Relaxed) {
        log::info!(
            "convolutions: {:?} products on tensor cores (16x16x16 cooperative matrices, f32 sums)",
            a.dtype
        );
    }
    yes
}

/// `dtype`'s 16 x `n` x 16 products with f32 sums (the storage type and the configuration a
/// runtime lists), or `None` for a dtype other than f16 and bf16.
fn half_products(dtype: DType, n: u32) -> Option<(StorageType, MmaConfig)> {
    let kind = match dtype {
        DType::F16 => FloatKind::F16,
        DType::BF16 => FloatKind::BF16,
        _ => return None,
    };
    let half: StorageType = ElemType::Float(kind).into();
    let config = MmaConfig {
        a_type: half,
        b_type: half,
        cd_type: ElemType::Float(FloatKind::F32).into(),
        m: 16,
        n,
        k: 16,
    };
    Some((half, config))
}

/// Cubes for `tiles` tiles (x, then y past [`MAX_CUBES_PER_AXIS`]) and `z` along z.
pub(super) fn cube_count(tiles: usize, z: usize) -> CubeCount {
    let cubes_x = tiles.clamp(1, MAX_CUBES_PER_AXIS);
    CubeCount::Static(cubes_x as u32, tiles.div_ceil(cubes_x) as u32, z as u32)
}

/// The most cubes along one axis of a launch (Vulkan guarantees 65535).
const MAX_CUBES_PER_AXIS: usize = 65_535;

/// Runs [`conv_gemm`] for `p`, reading `x` and `w` and writing `y` (whose buffer the strides
/// in `p` address). Nothing runs when the product has no rows.
pub(super) fn launch<R: CubeRuntime>(
    x: &CubeTensor<R>,
    w: &CubeTensor<R>,
    y: &CubeTensor<R>,
    p: &Problem,
    tile: Tile,
) {
    let rows = p.rows();
    if rows == 0 || p.c_out == 0 {
        return;
    }
    let tiles_m = rows.div_ceil(tile.bm() as usize);
    let count = cube_count(tiles_m, p.c_out.div_ceil(tile.bn() as usize));
    let args = arguments(p);
    let dtypes: [StorageType; 3] = [x.dtype.into(), w.dtype.into(), y.dtype.into()];
    // Both kernels take the same operands; the tensor-core one also its vector widths.
    macro_rules! launch {
        ($kernel:path, [$($width:expr),*], $dtypes:expr) => {
            $kernel(
                &x.client,
                count,
                CubeDim::new_1d(tile.threads()),
                $($width,)*
                x.clone().into_tensor_arg(),
                w.clone().into_tensor_arg(),
                y.clone().into_tensor_arg(),
                args,
                tile,
                $dtypes,
            )
        };
    }
    if tile.tensor_cores {
        let widths = vector_widths(p, tile, widest_vector(x));
        let staged = [dtypes[0], dtypes[1], dtypes[2], x.dtype.into()];
        // SAFETY: as below; the staged type is `x`'s, which `choose_tile` checked the
        // runtime multiplies on tensor cores, and `vector_widths` checked that every vector
        // read and written lies whole inside its tensor's channels at aligned offsets.
        unsafe {
            launch!(
                conv_gemm_mma::launch_unchecked::<R>,
                [widths.a, widths.b, widths.y],
                staged
            );
        }
        return;
    }
    // SAFETY: every read and write index is checked against the sizes in `dims` (rows,
    // channels, the input grid), and the caller sizes the buffers and strides in `p` to them.
    unsafe {
        launch!(conv_gemm::launch_unchecked::<R>, [], dtypes);
    }
}

/// The widest vector of `t`'s dtype its runtime loads in one access (8 16-bit values on CUDA,
/// 4 on wgpu), at most 8: the tensor-core kernels stage rows 8 elements longer than their
/// tiles, which must hold whole vectors.
pub(super) fn widest_vector<R: CubeRuntime>(t: &CubeTensor<R>) -> usize {
    t.client
        .io_optimized_vector_sizes(t.dtype.size())
        .next()
        .unwrap_or(1)
        .clamp(1, 8)
}

/// The widest power of two up to `widest` dividing every one of `values` (channel count, base
/// offset, other strides), so that a vector along the channels never straddles two positions
/// or the last channel and starts aligned; 1 unless the channels are contiguous
/// (`channel_stride == 1`).
pub(super) fn widest_dividing(widest: usize, channel_stride: usize, values: &[i64]) -> usize {
    if channel_stride != 1 {
        return 1;
    }
    let mut width = widest.max(1);
    while width > 1 && values.iter().any(|v| v.rem_euclid(width as i64) != 0) {
        width /= 2;
    }
    width
}

/// The widest vector (at most `widest`) along the channels of an activation with `strides`
/// (`[b, c, d, h, w]`) and `channels` channels: [`widest_dividing`] of the channel count and
/// the other strides.
pub(super) fn channel_width(widest: usize, strides: &[usize], channels: usize) -> usize {
    let values = [channels, strides[0], strides[2], strides[3], strides[4]];
    widest_dividing(widest, strides[1], &values.map(|v| v as i64))
}

/// Elements per vector of the tensor-core kernel's three tensors, along their channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct VectorWidths {
    /// Input activation: up to `a_run` consecutive channels of one voxel.
    pub a: usize,
    /// Weight: output channels of one `(tap, ci)`.
    pub b: usize,
    /// Output: channels of one position.
    pub y: usize,
}

/// The widest vectors (at most `widest`) that every access of [`conv_gemm_mma`] for `p` can
/// use ([`widest_dividing`]); 1 where the channels are not contiguous, and for the output
/// unless the tile stores channels fastest.
pub(super) fn vector_widths(p: &Problem, tile: Tile, widest: usize) -> VectorWidths {
    let i = |v: usize| v as i64;
    let [xn, xc, xd, xh, xw] = p.x_strides;
    let [yn, yc, yd, yh, yw] = p.y_strides;
    let x_values = [p.c_in, p.x_base, xn, xd, xh, xw].map(i);
    let w_values = [
        i(p.c_out),
        p.w_base,
        p.w_taps[0],
        p.w_taps[1],
        p.w_taps[2],
        i(p.w_ci),
    ];
    let y_values = [p.c_out, p.y_base, yn, yd, yh, yw].map(i);
    VectorWidths {
        a: widest_dividing(widest.min(tile.a_run as usize), xc, &x_values),
        b: widest_dividing(widest, p.w_co, &w_values),
        y: if tile.out_channels_fastest {
            widest_dividing(widest, yc, &y_values)
        } else {
            1
        },
    }
}

/// The kernel's arguments: sizes, window, input strides, weight walk, output strides.
pub(super) type Arguments<R> = (
    DimsLaunch<R>,
    WindowLaunch<R>,
    StridesLaunch<R>,
    WeightWalkLaunch<R>,
    StridesLaunch<R>,
);

/// The kernel's [`Arguments`] for `p`.
pub(super) fn arguments<R: CubeRuntime>(p: &Problem) -> Arguments<R> {
    let u = |v: usize| v as u32;
    let i = |v: i64| v as i32;
    let [od, oh, ow] = p.out_size.map(u);
    let [id, ih, iw] = p.in_size.map(u);
    let dims = DimsLaunch::new(u(p.rows()), u(p.c_in), u(p.c_out), od, oh, ow, id, ih, iw);
    let [sd, sh, sw] = p.stride.map(u);
    let [pd, ph, pw] = p.pad.map(i);
    let [td, th, tw] = p.taps.map(u);
    let window = WindowLaunch::new(sd, sh, sw, pd, ph, pw, td, th, tw);
    let strides = |base: usize, s: [usize; 5]| {
        StridesLaunch::new(u(base), u(s[0]), u(s[1]), u(s[2]), u(s[3]), u(s[4]))
    };
    let [wd, wh, ww] = p.w_taps.map(i);
    let ws = WeightWalkLaunch::new(i(p.w_base), wd, wh, ww, u(p.w_ci), u(p.w_co));
    (
        dims,
        window,
        strides(p.x_base, p.x_strides),
        ws,
        strides(p.y_base, p.y_strides),
    )
}

#[cfg(test)]
mod tests {
    use super::{vector_widths, Problem, VectorWidths};
    use crate::conv::tile::Tile;

    /// A stride-1 3x3x3 product of `c_in` into `c_out` channels over an 8^3 grid, both
    /// activations channels-last (`[b, d, h, w, c]` buffers) and the weight
    /// `[kd, kh, kw, c_in, c_out]`.
    fn channels_last(c_in: usize, c_out: usize) -> Problem {
        let act = |c: usize| [512 * c, 1, 64 * c, 8 * c, c];
        Problem {
            batch: 2,
            c_in,
            c_out,
            in_size: [8; 3],
            out_size: [8; 3],
            stride: [1; 3],
            pad: [1; 3],
            taps: [3; 3],
            x_strides: act(c_in),
            x_base: 0,
            w_base: 0,
            w_taps: [
                (9 * c_in * c_out) as i64,
                (3 * c_in * c_out) as i64,
                (c_in * c_out) as i64,
            ],
            w_ci: c_out,
            w_co: 1,
            y_strides: act(c_out),
            y_base: 0,
        }
    }

    fn tile(p: &Problem) -> Tile {
        Tile::choose_tensor_cores(p.c_in, p.c_out, true, true).expect("a tensor-core tile")
    }

    #[test]
    fn channels_last_products_read_and_write_whole_vectors() {
        let p = channels_last(64, 64);
        let all = |w| VectorWidths { a: w, b: w, y: w };
        assert_eq!(
            vector_widths(&p, tile(&p), 8),
            all(8),
            "CUDA: 16 bytes of f16"
        );
        assert_eq!(vector_widths(&p, tile(&p), 4), all(4), "wgpu: four lanes");
        let p = channels_last(48, 40);
        assert_eq!(vector_widths(&p, tile(&p), 8), all(8));
    }

    #[test]
    fn vectors_narrow_to_what_the_channel_counts_and_offsets_allow() {
        // Three input channels (the first convolution): scalar input reads.
        let p = channels_last(3, 64);
        assert_eq!(vector_widths(&p, tile(&p), 8).a, 1);
        // 12 output channels: vectors of 4 for the weight and the output.
        let p = channels_last(64, 12);
        let w = vector_widths(&p, tile(&p), 8);
        assert_eq!((w.a, w.b, w.y), (8, 4, 4));
        // A data-gradient phase writing from an odd offset stores scalars.
        let mut p = channels_last(64, 64);
        p.y_base = 3;
        assert_eq!(vector_widths(&p, tile(&p), 8).y, 1);
        // A flipped weight walk (negative tap steps) stays vectorised.
        let mut p = channels_last(32, 32);
        p.w_base = 26 * 32 * 32;
        p.w_taps = p.w_taps.map(|s| -s);
        assert_eq!(vector_widths(&p, tile(&p), 8).b, 8);
    }

    #[test]
    fn channels_first_operands_are_read_one_element_at_a_time() {
        let mut p = channels_last(64, 64);
        p.x_strides = [64 * 512, 512, 64, 8, 1];
        p.y_strides = [64 * 512, 512, 64, 8, 1];
        let t = Tile::choose_tensor_cores(64, 64, false, false).expect("a tensor-core tile");
        let w = vector_widths(&p, t, 8);
        assert_eq!((w.a, w.y), (1, 1), "{w:?}");
        assert_eq!(w.b, 8, "the weight keeps its output channels contiguous");
    }
}
