//! Launching the implicit-GEMM kernel ([`conv_gemm`](super::gemm)) from host-side numbers.

use std::sync::atomic::{AtomicBool, Ordering};

use burn::tensor::DType;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;
use cubecl::ir::features::MmaConfig;
use cubecl::ir::{ElemType, FloatKind, StorageType};
use cubecl::{CubeCount, CubeDim};

use super::gemm::{conv_gemm, DimsLaunch, StridesLaunch, WeightWalkLaunch, WindowLaunch};
use super::mma::{conv_gemm_mma, PLANE};
use super::tile::Tile;

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
    Tile::choose_tensor_cores(c_in, c_out, a_channels_last, out_channels_last).unwrap_or_else(fma)
}

/// Whether `a`'s runtime multiplies `a`'s 16-bit dtype on tensor cores (see [`choose_tile`]).
pub(super) fn tensor_cores<R: CubeRuntime>(a: &CubeTensor<R>) -> bool {
    let kind = match a.dtype {
        DType::F16 => FloatKind::F16,
        DType::BF16 => FloatKind::BF16,
        _ => return false,
    };
    let props = a.client.properties();
    let half: StorageType = ElemType::Float(kind).into();
    let config = MmaConfig {
        a_type: half,
        b_type: half,
        cd_type: ElemType::Float(FloatKind::F32).into(),
        m: 16,
        n: 16,
        k: 16,
    };
    let planes = props.hardware.plane_size_min == PLANE && props.hardware.plane_size_max == PLANE;
    let yes = planes && props.features.matmul.cmma.contains(&config);
    static NOTED: AtomicBool = AtomicBool::new(false);
    if yes && !NOTED.swap(true, Ordering::Relaxed) {
        eprintln!(
            "convolutions: {:?} products on tensor cores (16x16x16 cooperative matrices, f32 sums)",
            a.dtype
        );
    }
    yes
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
    let tiles_n = p.c_out.div_ceil(tile.bn() as usize);
    let cubes_x = tiles_m.min(MAX_CUBES_PER_AXIS);
    let count = CubeCount::Static(
        cubes_x as u32,
        tiles_m.div_ceil(cubes_x) as u32,
        tiles_n as u32,
    );
    let (dims, window, xs, ws, ys) = arguments(p);
    let dtypes = [x.dtype.into(), w.dtype.into(), y.dtype.into()];
    if tile.tensor_cores {
        // SAFETY: as below; the staged type is `x`'s, which `choose_tile` checked the
        // runtime multiplies on tensor cores.
        unsafe {
            conv_gemm_mma::launch_unchecked::<R>(
                &x.client,
                count,
                CubeDim::new_1d(tile.threads()),
                x.clone().into_tensor_arg(),
                w.clone().into_tensor_arg(),
                y.clone().into_tensor_arg(),
                dims,
                window,
                xs,
                ws,
                ys,
                tile,
                [dtypes[0], dtypes[1], dtypes[2], x.dtype.into()],
            );
        }
        return;
    }
    // SAFETY: every read and write index is checked against the sizes in `dims` (rows,
    // channels, the input grid), and the caller sizes the buffers and strides in `p` to them.
    unsafe {
        conv_gemm::launch_unchecked::<R>(
            &x.client,
            count,
            CubeDim::new_1d(tile.threads()),
            x.clone().into_tensor_arg(),
            w.clone().into_tensor_arg(),
            y.clone().into_tensor_arg(),
            dims,
            window,
            xs,
            ws,
            ys,
            tile,
            dtypes,
        );
    }
}

/// The kernel's arguments: sizes, window, input strides, weight walk, output strides.
type Arguments<R> = (
    DimsLaunch<R>,
    WindowLaunch<R>,
    StridesLaunch<R>,
    WeightWalkLaunch<R>,
    StridesLaunch<R>,
);

/// The kernel's [`Arguments`] for `p`.
fn arguments<R: CubeRuntime>(p: &Problem) -> Arguments<R> {
    let u = |v: usize| v as u32;
    let i = |v: i64| v as i32;
    let dims = DimsLaunch::new(
        u(p.rows()),
        u(p.c_in),
        u(p.c_out),
        u(p.out_size[0]),
        u(p.out_size[1]),
        u(p.out_size[2]),
        u(p.in_size[0]),
        u(p.in_size[1]),
        u(p.in_size[2]),
    );
    let window = WindowLaunch::new(
        u(p.stride[0]),
        u(p.stride[1]),
        u(p.stride[2]),
        i(p.pad[0]),
        i(p.pad[1]),
        i(p.pad[2]),
        u(p.taps[0]),
        u(p.taps[1]),
        u(p.taps[2]),
    );
    let strides = |base: usize, s: [usize; 5]| {
        StridesLaunch::new(u(base), u(s[0]), u(s[1]), u(s[2]), u(s[3]), u(s[4]))
    };
    let ws = WeightWalkLaunch::new(
        i(p.w_base),
        i(p.w_taps[0]),
        i(p.w_taps[1]),
        i(p.w_taps[2]),
        u(p.w_ci),
        u(p.w_co),
    );
    (
        dims,
        window,
        strides(p.x_base, p.x_strides),
        ws,
        strides(p.y_base, p.y_strides),
    )
}
