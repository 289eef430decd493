//! The first level of both channels-last reductions, a cube per tile of rows: the forward's
//! block moments and the backward's block sums.
//!
//! A cube of [`TILE_THREADS`] threads covers `rows` consecutive rows of one batch item: `q / n`
//! threads across a row (a vector of `n` channels each, 16-byte loads in bf16), `ry` rows side
//! by side, every thread adding `k` rows `ry` apart with [`UNROLL`] loads in flight. The cube
//! then adds its threads' per-channel sums in shared memory and writes one partial per channel
//! and tile, so the finishing launches read fewer partial sums than with a column per thread
//! (at 128^3 x 64 channels 4x fewer in the forward, 16x in the backward). The
//! one-column-per-thread kernels took 2.18 ms (block moments) and 3.87 ms (backward sums) a bf16
//! training micro-step on an H200, where their reads would take about
//! 0.7 and 1.5 ms at 4 TB/s by arithmetic: a thread had one 2-byte load in flight.

use burn::tensor::Shape;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;
use cubecl::prelude::*;
use cubecl::{CubeCount, CubeDim};

use super::parts::{affine_arg, lane_params, lane_xhat_and_da, load, source_place, Affine};
use super::view::{f32_buffer, View};

/// Threads of one tile's cube.
pub(super) const TILE_THREADS: usize = 256;

/// Rows a thread loads before adding them (independent loads in flight).
const UNROLL: usize = 4;

/// Most rows one thread adds per tile (in `UNROLL`s): 1,024-row tiles at 128^3 x 64 channels.
const MAX_ROW_STEPS: usize = 8;

/// How a channels-last `[p, r, q]` view is cut into tiles.
#[derive(Debug, Clone, Copy)]
pub(super) struct Tiles {
    /// Channels per thread (one vector load).
    pub vector: usize,
    /// Threads across a row (`q / vector`).
    pub qv: usize,
    /// Rows side by side in a cube.
    pub ry: usize,
    /// `UNROLL`-row steps per thread.
    pub steps: usize,
    /// Rows per tile (`ry * steps * UNROLL`).
    pub rows: usize,
    /// Tiles per batch item.
    pub blocks: usize,
}

impl Tiles {
    /// The tiling of `v` for a tensor like `t`, or `None` where the reductions keep a column
    /// per thread: channels-first views, and rows wider than a cube.
    pub(super) fn new<R: CubeRuntime>(v: &View, t: &CubeTensor<R>) -> Option<Self> {
        if !v.channels_last {
            return None;
        }
        let vector = v.vector_size(t);
        let qv = v.q / vector;
        if qv > TILE_THREADS {
            return None;
        }
        let ry = TILE_THREADS / qv;
        // Long tiles (few partial sums) where the volume leaves at least about 512 cubes.
        let steps = (v.r / (ry * UNROLL * 512)).clamp(1, MAX_ROW_STEPS);
        let rows = ry * steps * UNROLL;
        Some(Tiles {
            vector,
            qv,
            ry,
            steps,
            rows,
            blocks: v.r.div_ceil(rows),
        })
    }

    fn launch(&self, v: &View) -> (CubeCount, CubeDim) {
        (
            CubeCount::Static((v.p * self.blocks) as u32, 1, 1),
            CubeDim::new_1d(TILE_THREADS as u32),
        )
    }

    /// A `[parts, p, blocks, q]` f32 buffer for `parts` per-tile, per-channel sums of `v`, and
    /// the length of one part.
    fn partials<R: CubeRuntime>(
        &self,
        like: &CubeTensor<R>,
        v: &View,
        parts: usize,
    ) -> (CubeTensor<R>, usize) {
        let shape = Shape::new([parts, v.p, self.blocks, v.q]);
        (f32_buffer(like, shape), v.p * self.blocks * v.q)
    }

    /// The tiling of `v` as the kernels take it.
    fn shape<R: CubeRuntime>(&self, v: &View) -> TileShapeLaunch<R> {
        TileShapeLaunch::new(
            v.r,
            v.q,
            self.qv,
            self.ry,
            self.rows,
            self.blocks,
            self.steps,
            v.split.unwrap_or(v.q) / self.vector,
        )
    }

    /// Floats of the shared sums (a slot per thread and channel of its vector).
    fn shared_len(&self) -> usize {
        TILE_THREADS * self.vector
    }
}

/// A `[p, r, q]` view's tiling as the kernels take it (see [`Tiles`]), and the vectors of the
/// input's first part (`split`: `qv` for an input of one part).
#[derive(CubeType, CubeLaunch, Clone)]
struct TileShape {
    r: usize,
    q: usize,
    qv: usize,
    ry: usize,
    rows: usize,
    blocks: usize,
    steps: usize,
    split: usize,
}

/// Where a tile's thread works: its batch item, first and end rows of the tile, its column (in
/// vectors), its row offset, and the index of its column's vector in row 0.
#[cube]
fn tile_place(s: &TileShape) -> (usize, usize, usize, usize, usize, usize) {
    let t = UNIT_POS as usize;
    let p = CUBE_POS / s.blocks;
    let start = (CUBE_POS % s.blocks) * s.rows;
    let mut end = start + s.rows;
    if end > s.r {
        end = s.r;
    }
    let vc = t % s.qv;
    (p, start, end, vc, t / s.qv, p * s.r * s.qv + vc)
}

/// Adds the per-thread sums `a`, `b` (a vector of channels each) over the cube's rows side by
/// side: on return `sa[ch]`, `sb[ch]` hold the tile's sums of channel `ch` for `ch < q`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn tile_channel_totals<N: Size>(
    sa: &mut SharedMemory<f32>,
    sb: &mut SharedMemory<f32>,
    a: Vector<f32, N>,
    b: Vector<f32, N>,
    vc: usize,
    y: usize,
    ry: usize,
    q: usize,
) {
    let n = a.vector_size();
    if y < ry {
        #[unroll]
        for i in 0..n {
            sa[y * q + vc * n + i] = a[i];
            sb[y * q + vc * n + i] = b[i];
        }
    }
    sync_cube();
    // Each channel's column of slots, added by one thread into row 0 (rows written in order,
    // so the tile's sum is the same whatever the hardware's scheduling).
    let mut ch = UNIT_POS as usize;
    while ch < q {
        let mut ta = 0.0f32;
        let mut tb = 0.0f32;
        for yy in 0..ry {
            ta += sa[yy * q + ch];
            tb += sb[yy * q + ch];
        }
        sa[ch] = ta;
        sb[ch] = tb;
        ch += TILE_THREADS;
    }
    sync_cube();
}

/// The forward's first level, channels-last: per tile and channel the sum and the sum of
/// squares about the tile's own mean into `moments` `[2, p, blocks, q]` (what
/// [`group_moments`](super::forward) combines). One pass: each thread adds differences from
/// the tile's first row, which keeps the cancellation of `sum d^2 - (sum d)^2 / n` to the
/// spread within one tile of neighbouring voxels.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn tile_moments<F: Float, S: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    x_b: &Tensor<Vector<F, N>>,
    shift_in: &Tensor<S>,
    moments: &mut Tensor<f32>,
    half: usize,
    ts: TileShape,
    #[comptime] shared_len: usize,
    #[comptime] shifted: bool,
    #[comptime] parts: bool,
    #[define(F, S)] _dtypes: [StorageType; 2],
) {
    let n = x.vector_size();
    let (p, start, end, vc, y, _) = tile_place(&ts);
    let (second, base, pitch) = source_place(p, ts.r, ts.qv, vc, ts.split, parts);
    let mut sa = SharedMemory::<f32>::new(shared_len);
    let mut sb = SharedMemory::<f32>::new(shared_len);
    let mut s1 = Vector::<f32, N>::new(0.0);
    let mut s2 = Vector::<f32, N>::new(0.0);
    // Differences from the tile's first row: the input's shift cancels in them (it moves the
    // first row too) and is added back in the tile's sum below.
    let first = Vector::<f32, N>::cast_from(load(x, x_b, base + start * pitch, second, parts));
    if y < ts.ry {
        for k in 0..ts.steps {
            #[unroll]
            for u in 0..UNROLL {
                let row = start + (k * UNROLL + u) * ts.ry + y;
                if row < end {
                    let xv = load(x, x_b, base + row * pitch, second, parts);
                    let d = Vector::<f32, N>::cast_from(xv) - first;
                    s1 += d;
                    s2 += d * d;
                }
            }
        }
    }
    // Per channel, the value the differences were taken from (the first row plus the input's
    // shift), to turn the tile's sum of differences into its sum below.
    let mut firsts = SharedMemory::<f32>::new(shared_len);
    if y == 0 {
        #[unroll]
        for i in 0..n {
            let mut k = first[i];
            if shifted {
                k += f32::cast_from(shift_in[p * ts.q + vc * n + i]);
            }
            firsts[vc * n + i] = k;
        }
    }
    tile_channel_totals(&mut sa, &mut sb, s1, s2, vc, y, ts.ry, ts.q);
    let count = f32::cast_from(end - start);
    let tile = CUBE_POS * ts.q;
    let mut ch = UNIT_POS as usize;
    while ch < ts.q {
        let d1 = sa[ch];
        moments[tile + ch] = count * firsts[ch] + d1;
        moments[half + tile + ch] = sb[ch] - d1 * d1 / count;
        ch += TILE_THREADS;
    }
}

/// The backward's first level, channels-last: per tile and channel the sums of `dL/da`, of
/// `dL/da * x_hat` and, where `shifted`, of `x_hat` into `sums` `[parts, p, blocks, q]` (what the
/// `Channels` finish adds).
#[cube(launch, fast_math = FastMath::all())]
#[allow(clippy::too_many_arguments)]
fn tile_backward_sums<F: Float, P: Float, S: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    x_b: &Tensor<Vector<F, N>>,
    dy: &Tensor<Vector<F, N>>,
    affine: &Affine<P, S>,
    sums: &mut Tensor<f32>,
    half: usize,
    ts: TileShape,
    group_div: usize,
    #[comptime] shared_len: usize,
    #[comptime] silu: bool,
    #[comptime] shifted: bool,
    #[comptime] parts: bool,
    #[define(F, P, S)] _dtypes: [StorageType; 3],
) {
    let n = x.vector_size();
    let (p, start, end, vc, y, base) = tile_place(&ts);
    let (second, x_base, pitch) = source_place(p, ts.r, ts.qv, vc, ts.split, parts);
    let lanes = lane_params::<P, S, N>(affine, p, vc * n, ts.q, group_div, ts.q, true, shifted);
    let mut s_da = Vector::<f32, N>::new(0.0);
    let mut s_da_xhat = Vector::<f32, N>::new(0.0);
    let mut s_xhat = Vector::<f32, N>::new(0.0);
    if y < ts.ry {
        for k in 0..ts.steps {
            #[unroll]
            for u in 0..UNROLL {
                let row = start + (k * UNROLL + u) * ts.ry + y;
                if row < end {
                    let xv = load(x, x_b, x_base + row * pitch, second, parts);
                    let dyv = dy[base + row * ts.qv];
                    #[unroll]
                    for i in 0..n {
                        let (x_hat, da) = lane_xhat_and_da::<F, N>(xv, dyv, lanes, i, silu);
                        s_da[i] = s_da[i] + da;
                        s_da_xhat[i] = s_da_xhat[i] + da * x_hat;
                        if shifted {
                            s_xhat[i] = s_xhat[i] + x_hat;
                        }
                    }
                }
            }
        }
    }
    write_tile_sums(
        sums, s_da, s_da_xhat, s_xhat, half, vc, y, ts.ry, ts.q, shared_len, shifted,
    );
}

/// The tile's per-channel sums of the backward (`a`, `b`, and `c` where `shifted`) from its
/// threads' vectors, into parts 0, 1 (and 2) of `sums`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn write_tile_sums<N: Size>(
    sums: &mut Tensor<f32>,
    a: Vector<f32, N>,
    b: Vector<f32, N>,
    c: Vector<f32, N>,
    half: usize,
    vc: usize,
    y: usize,
    ry: usize,
    q: usize,
    #[comptime] shared_len: usize,
    #[comptime] shifted: bool,
) {
    let mut sa = SharedMemory::<f32>::new(shared_len);
    let mut sb = SharedMemory::<f32>::new(shared_len);
    tile_channel_totals(&mut sa, &mut sb, a, b, vc, y, ry, q);
    let tile = CUBE_POS * q;
    let mut ch = UNIT_POS as usize;
    while ch < q {
        sums[tile + ch] = sa[ch];
        sums[half + tile + ch] = sb[ch];
        ch += TILE_THREADS;
    }
    if shifted {
        // The third sum (of x_hat, for the shift's gradient), through the same slots once
        // every thread has read the first two.
        sync_cube();
        tile_channel_totals(&mut sa, &mut sb, c, c, vc, y, ry, q);
        let mut ch = UNIT_POS as usize;
        while ch < q {
            sums[2 * half + tile + ch] = sa[ch];
            ch += TILE_THREADS;
        }
    }
}

/// [`tile_moments`] of `x` (plus `shift` where `shifted`; or of `x` and `x_b` joined along
/// channels where `v` is of two parts): `[2, p, blocks, q]` f32.
pub(super) fn moments<R: CubeRuntime>(
    x: &CubeTensor<R>,
    x_b: Option<&CubeTensor<R>>,
    shift: &CubeTensor<R>,
    shifted: bool,
    v: &View,
    tiles: &Tiles,
) -> CubeTensor<R> {
    let (moments, half) = tiles.partials(x, v, 2);
    let (count, dim) = tiles.launch(v);
    tile_moments::launch::<R>(
        &x.client,
        count,
        dim,
        tiles.vector,
        x.clone().into_tensor_arg(),
        x_b.unwrap_or(x).clone().into_tensor_arg(),
        shift.clone().into_tensor_arg(),
        moments.clone().into_tensor_arg(),
        half,
        tiles.shape(v),
        tiles.shared_len(),
        shifted,
        x_b.is_some(),
        [x.dtype.into(), shift.dtype.into()],
    );
    moments
}

/// [`tile_backward_sums`] (of the input `x`, or of `x` and `x_b` joined along channels where
/// `v` is of two parts): `[parts, p, blocks, q]` f32, `parts` 3 where `shifted` (the sums of
/// x_hat too), else 2.
#[allow(clippy::too_many_arguments)]
pub(super) fn backward_sums<R: CubeRuntime>(
    x: &CubeTensor<R>,
    x_b: Option<&CubeTensor<R>>,
    dy: &CubeTensor<R>,
    shift: &CubeTensor<R>,
    shifted: bool,
    gamma: &CubeTensor<R>,
    beta: &CubeTensor<R>,
    mean: &CubeTensor<R>,
    rstd: &CubeTensor<R>,
    v: &View,
    tiles: &Tiles,
    silu: bool,
) -> CubeTensor<R> {
    let (sums, half) = tiles.partials(x, v, if shifted { 3 } else { 2 });
    let (count, dim) = tiles.launch(v);
    tile_backward_sums::launch::<R>(
        &x.client,
        count,
        dim,
        tiles.vector,
        x.clone().into_tensor_arg(),
        x_b.unwrap_or(x).clone().into_tensor_arg(),
        dy.clone().into_tensor_arg(),
        affine_arg([shift, gamma, beta, mean, rstd]),
        sums.clone().into_tensor_arg(),
        half,
        tiles.shape(v),
        v.group_div(),
        tiles.shared_len(),
        silu,
        shifted,
        x_b.is_some(),
        [x.dtype.into(), gamma.dtype.into(), shift.dtype.into()],
    );
    sums
}
