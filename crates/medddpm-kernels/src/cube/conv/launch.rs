//! Launching the implicit-GEMM kernel ([`conv_gemm`](super::gemm)) from host-side numbers.

use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;
use cubecl::{CubeCount, CubeDim};

use super::gemm::{conv_gemm, DimsLaunch, StridesLaunch, WeightWalkLaunch, WindowLaunch};
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
    let u = |v: usize| v as u32;
    let i = |v: i64| v as i32;
    let dims = DimsLaunch::new(
        u(rows),
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
    let dtypes = [x.dtype.into(), w.dtype.into(), y.dtype.into()];
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
            strides(p.x_base, p.x_strides),
            ws,
            strides(p.y_base, p.y_strides),
            tile,
            dtypes,
        );
    }
}
