//! The forward pass's three launches: per block of rows the sum and the centred sum of
//! squares, per group the mean and variance from them, one normalising write.

use burn::tensor::Shape;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;
use cubecl::prelude::*;
use cubecl::{CubeCount, CubeDim};

use super::finish::{addressing, Finish, FINISH_ROWS, FINISH_THREADS};
use super::parts::{
    affine_arg, chunked_sum, cube_total, group_and_channel, load, row_block, shift_index, sigmoid,
    vector_row_block, Affine, Flags, Partials, Rows,
};
use super::tiles::{self, Tiles};
use super::view::{f32_buffer, shift_operand, View, ELEMENTWISE_ROWS};
use crate::elementwise;
use crate::reference::norm::{GroupNormSpec, NormInput};

/// Values one thread adds before its partial sum is written, in the forward's reductions. 256
/// rather than 64: the finishing cubes read 4x fewer partial sums (H100, bf16 training step:
/// the forward's sums and their finishing launches 5.7 ms with 64, 4.2 ms with 256).
pub const FORWARD_ROWS: usize = 256;

/// The forward's first level where the tiles do not apply (channels-first views, and rows
/// wider than a tile's cube): per block of `rows` rows of each column of a contiguous
/// `[p, r, q]` array (plus the column's shift, when `shifted`), the sum and the sum of squares
/// about the block's own mean (two passes over the block, the second from cache), into
/// `moments` `[2, p, ceil(r / rows), q]`. Columns need no group here: `v.group_div` is unused.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn block_moments<F: Float, S: Float>(
    input: &Tensor<F>,
    shift: &Tensor<S>,
    moments: &mut Tensor<f32>,
    half: usize,
    v: Rows,
    #[comptime] channels_last: bool,
    #[comptime] shifted: bool,
    #[define(F, S)] _dtypes: [StorageType; 2],
) {
    let pos = ABSOLUTE_POS;
    if pos >= half {
        terminate!();
    }
    let (base, start, end, p, col) = row_block(pos, v.r, v.q, v.rows, v.blocks);
    let mut s = 0.0f32;
    if shifted {
        s = f32::cast_from(shift[shift_index(p, col, v.c, channels_last)]);
    }
    let mut acc = 0.0f32;
    for row in start..end {
        acc += f32::cast_from(input[base + row * v.q]) + s;
    }
    let m = acc / f32::cast_from(end - start);
    let mut m2 = 0.0f32;
    for row in start..end {
        let d = f32::cast_from(input[base + row * v.q]) + s - m;
        m2 += d * d;
    }
    moments[pos] = acc;
    moments[half + pos] = m2;
}

/// The forward's second level: one cube per (batch, group) combines the [`block_moments`] of its
/// blocks (Chan et al.: the group's mean from the sums, then the sums of squares about each
/// block's mean plus `n_k (mean_k - mean)^2`), each thread adding chunks of `chunk_rows`
/// partials in f32 before the cube's tree. Partials are addressed as in
/// [`group_sums`](super::finish::group_sums).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn group_moments(
    moments: &Tensor<f32>,
    mean: &mut Tensor<f32>,
    rstd: &mut Tensor<f32>,
    half: usize,
    a: Partials,
    r: usize,
    q: usize,
    rows: usize,
    blocks: usize,
    inv_n: f32,
    epsilon: f32,
    #[comptime] threads: usize,
    #[comptime] chunk_rows: usize,
    #[comptime] channels_last: bool,
) {
    let o = CUBE_POS;
    let t = UNIT_POS as usize;
    let base = (o / a.per_batch) * a.batch_stride + (o % a.per_batch) * a.group_stride;
    let mut shared = SharedMemory::<f32>::new(threads);
    let total = chunked_sum(moments, base, &a, threads, chunk_rows);
    let mu = cube_total(&mut shared, total) * inv_n;
    let mut total2 = 0.0f32;
    for c in 0..a.chunks {
        let mut acc = 0.0f32;
        for j in 0..chunk_rows {
            let k = (c * chunk_rows + j) * threads + t;
            if k < a.n {
                let at = base + (k / a.run) * a.run_stride + k % a.run;
                let mut blk = (k / q) % blocks;
                if channels_last {
                    blk = k / a.run;
                }
                let mut count = r - blk * rows;
                if count > rows {
                    count = rows;
                }
                let nk = f32::cast_from(count);
                let d = moments[at] - nk * mu;
                acc += moments[half + at] + d * d / nk;
            }
        }
        total2 += acc;
    }
    let var = cube_total(&mut shared, total2) * inv_n;
    if t == 0 {
        mean[o] = mu;
        rstd[o] = 1.0 / f32::sqrt(var + epsilon);
    }
}

/// `y = silu?(gamma * (x + shift - mean) * rstd + beta)`, over the same `[p, r, q]` view and
/// blocks of rows as the reductions: a thread's rows share their channels and groups, so it
/// reads the statistics and parameters once and does no index division per element; it takes
/// a vector of neighbouring columns (`q` counts single columns). With `flags.parts` it reads
/// each column from its part (`x` or `x_b`) and writes the join.
#[cube(launch, fast_math = FastMath::all())]
#[allow(clippy::too_many_arguments)]
fn normalise<F: Float, P: Float, S: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    x_b: &Tensor<Vector<F, N>>,
    affine: &Affine<P, S>,
    y: &mut Tensor<Vector<F, N>>,
    v: Rows,
    #[comptime] flags: Flags,
    #[define(F, P, S)] _dtypes: [StorageType; 3],
) {
    let n = x.vector_size();
    let (base, start, end, p, col, qv, second, x_base, pitch) =
        vector_row_block(y.len(), &v, n, flags.parts);
    let mut scale = Vector::<f32, N>::empty();
    let mut offset = Vector::<f32, N>::empty();
    #[unroll]
    for i in 0..n {
        let (g, ch) = group_and_channel(p, v.q, col * n + i, v.group_div, v.c, flags.channels_last);
        let s = affine.rstd[g] * f32::cast_from(affine.gamma[ch]);
        let mut centre = affine.mean[g];
        if flags.shifted {
            centre -= f32::cast_from(affine.shift[shift_index(p, ch, v.c, flags.channels_last)]);
        }
        scale[i] = s;
        offset[i] = f32::cast_from(affine.beta[ch]) - centre * s;
    }
    for row in start..end {
        let xv = load(x, x_b, x_base + row * pitch, second, flags.parts);
        let a = Vector::<f32, N>::cast_from(xv) * scale + offset;
        let mut out = Vector::<F, N>::empty();
        #[unroll]
        for i in 0..n {
            if flags.silu {
                out[i] = F::cast_from(a[i] * sigmoid(a[i]));
            } else {
                out[i] = F::cast_from(a[i]);
            }
        }
        y[base + row * qv] = out;
    }
}

/// The forward pass of `input`, `x` plus `shift` (`[b, c]`, when given) or two channels-last
/// parts joined along channels: `(y, mean, rstd)`, the statistics `[b, g]` in f32. Of two
/// parts, what the join gives, in as many launches, without the join (of the join where its
/// rows are too wide for the channels-last tiles).
pub fn forward<R: CubeRuntime>(
    input: NormInput<CubeTensor<R>>,
    gamma: CubeTensor<R>,
    beta: CubeTensor<R>,
    spec: &GroupNormSpec,
) -> (CubeTensor<R>, CubeTensor<R>, CubeTensor<R>) {
    let p = super::prepare(input, spec);
    let (x_b, shift) = (p.x_b.as_ref(), p.shift.as_ref());
    normalisation(&p.view, p.x, x_b, shift, gamma, beta, spec)
}

/// The statistics and the normalising write of the view `v` of `x` (and `x_b`, its second
/// part, where `v` has two).
fn normalisation<R: CubeRuntime>(
    v: &View,
    x: CubeTensor<R>,
    x_b: Option<&CubeTensor<R>>,
    shift: Option<&CubeTensor<R>>,
    gamma: CubeTensor<R>,
    beta: CubeTensor<R>,
    spec: &GroupNormSpec,
) -> (CubeTensor<R>, CubeTensor<R>, CubeTensor<R>) {
    let gamma = into_contiguous(gamma);
    let beta = into_contiguous(beta);
    let (mean, rstd) = statistics(&x, x_b, shift, &gamma, v, spec);
    let y = normalised(x, x_b, shift, gamma, beta, &mean, &rstd, v, spec);
    (y, mean, rstd)
}

/// Per-block sums and centred sums of squares, then per group the mean and
/// 1 / sqrt(variance + epsilon): `(mean, rstd)`, `[b, g]` f32, in two launches.
fn statistics<R: CubeRuntime>(
    x: &CubeTensor<R>,
    x_b: Option<&CubeTensor<R>>,
    shift: Option<&CubeTensor<R>>,
    stand_in: &CubeTensor<R>,
    v: &View,
    spec: &GroupNormSpec,
) -> (CubeTensor<R>, CubeTensor<R>) {
    let client = &x.client;
    let x_dtype: StorageType = x.dtype.into();
    let inv_n = 1.0 / v.values_per_group() as f32;
    let (shift_t, shifted) = shift_operand(shift, stand_in);
    let (moments, rows, blocks) = match Tiles::new(v, x) {
        Some(tiles) => (
            tiles::moments(x, x_b, shift_t, shifted, v, &tiles),
            tiles.rows,
            tiles.blocks,
        ),
        None => {
            assert!(x_b.is_none(), "a normalisation of two parts without tiles");
            let blocks = View::blocks(v.r, FORWARD_ROWS);
            let half = v.p * blocks * v.q;
            let moments = f32_buffer(x, Shape::new([2, v.p, blocks, v.q]));
            let (count, dim) = elementwise(x, half);
            block_moments::launch::<R>(
                client,
                count,
                dim,
                x.clone().into_tensor_arg(),
                shift_t.clone().into_tensor_arg(),
                moments.clone().into_tensor_arg(),
                half,
                v.rows(FORWARD_ROWS, blocks),
                v.channels_last,
                shifted,
                [x_dtype, shift_t.dtype.into()],
            );
            (moments, FORWARD_ROWS, blocks)
        }
    };
    let half = v.p * blocks * v.q;
    let (partials, _) = addressing(v, blocks, Finish::Groups);
    let stats = || f32_buffer(x, Shape::new([v.batch, v.groups]));
    let (mean, rstd) = (stats(), stats());
    group_moments::launch::<R>(
        client,
        CubeCount::Static((v.batch * v.groups) as u32, 1, 1),
        CubeDim::new_1d(FINISH_THREADS as u32),
        moments.into_tensor_arg(),
        mean.clone().into_tensor_arg(),
        rstd.clone().into_tensor_arg(),
        half,
        partials,
        v.r,
        v.q,
        rows,
        blocks,
        inv_n,
        spec.epsilon as f32,
        FINISH_THREADS,
        FINISH_ROWS,
        v.channels_last,
    );
    (mean, rstd)
}

/// `y = silu?(gamma * (x + shift - mean) * rstd + beta)` in `x`'s dtype (of the join of `x`
/// and `x_b` where there are two parts), in one launch.
#[allow(clippy::too_many_arguments)]
fn normalised<R: CubeRuntime>(
    x: CubeTensor<R>,
    x_b: Option<&CubeTensor<R>>,
    shift: Option<&CubeTensor<R>>,
    gamma: CubeTensor<R>,
    beta: CubeTensor<R>,
    mean: &CubeTensor<R>,
    rstd: &CubeTensor<R>,
    v: &View,
    spec: &GroupNormSpec,
) -> CubeTensor<R> {
    let client = x.client.clone();
    let x_dtype: StorageType = x.dtype.into();
    let pass = v.elementwise_pass(&x);
    let y = v.output(&x);
    let x_b = x_b.unwrap_or(&x).clone();
    let p_dtype: StorageType = gamma.dtype.into();
    let (shift_t, shifted) = shift_operand(shift, &gamma);
    let s_dtype: StorageType = shift_t.dtype.into();
    normalise::launch::<R>(
        &client,
        pass.count,
        pass.dim,
        pass.vector,
        x.into_tensor_arg(),
        x_b.into_tensor_arg(),
        affine_arg([shift_t, &gamma, &beta, mean, rstd]),
        y.clone().into_tensor_arg(),
        v.rows(ELEMENTWISE_ROWS, pass.blocks),
        v.flags(spec, shifted),
        [x_dtype, p_dtype, s_dtype],
    );
    y
}
