//! GroupNorm (+ SiLU) forward and backward as CubeCL kernels: three launches forward (per block
//! of rows the sum and the centred sum of squares, per group the mean and variance from them,
//! one normalising write) and four backward (one pass of sums, one finishing launch for both
//! sums, one `[b, c]`-sized launch, one write). Statistics and sums are f32 whatever the
//! activation dtype; launches are few because each costs host time on the order of a small
//! kernel's run time.
//!
//! Every reduction is blocked: a thread adds [`FORWARD_ROWS`] or [`BACKWARD_ROWS`] values in
//! f32 (one column of a `[p, r, q]` view of the tensor, so neighbouring threads read
//! neighbouring addresses), and one cube per statistic adds its partial sums in chunks of
//! [`FINISH_ROWS`] before a tree over the cube, so no f32 running sum spans more than a few
//! hundred terms (what keeps the statistics of a two-million-voxel group at f32 rounding; see
//! [`crate::norm`]). The variance combines per-block centred sums of squares (Chan et al.'s
//! parallel formula), as stable as a second pass about the group's mean.
//!
//! The reduced view is `[b, S, c]` for channels-last activations (columns are channels) and
//! `[b * c, S / q, q]` with `q` a power of two dividing `S` for channels-first ones (columns
//! are `q` interleaved slices of one channel).

use burn::tensor::{DType, Shape};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;
use cubecl::prelude::*;
use cubecl::{calculate_cube_count_elemwise, CubeCount, CubeDim};

use crate::compute::Layout;
use crate::norm::GroupNormSpec;

/// Values one thread adds before its partial sum is written, in the forward's reductions. 256
/// rather than 64: the finishing cubes read 4x fewer partial sums (H100, bf16 training step:
/// the forward's sums and their finishing launches 5.7 ms with 64, 4.2 ms with 256).
pub const FORWARD_ROWS: usize = 256;

/// The same for the backward's reduction, whose threads do more per value (the backward's sums
/// and their finishing launches: 5.6 ms with 64, 7.3 ms with 256).
pub const BACKWARD_ROWS: usize = 64;

/// Partial sums a finishing thread adds before adding that to its total.
const FINISH_ROWS: usize = 64;

/// Values one thread normalises (or differentiates) in the elementwise passes.
const ELEMENTWISE_ROWS: usize = 16;

const THREADS: u32 = 256;

/// Where thread `pos` works in a `[p, r, q]` view cut into blocks of `rows` rows: the first
/// element of its column in that view (`base`; rows are `q` apart), its rows `start..end`, and
/// its `p` and column.
#[cube]
fn row_block(
    pos: usize,
    r: usize,
    q: usize,
    rows: usize,
    blocks: usize,
) -> (usize, usize, usize, usize, usize) {
    let col = pos % q;
    let rest = pos / q;
    let p = rest / blocks;
    let start = (rest % blocks) * rows;
    let mut end = start + rows;
    if end > r {
        end = r;
    }
    (p * r * q + col, start, end, p, col)
}

/// The (batch, group) index and the channel of column `col` of row block `p`: the group is
/// `(p * q + col) / group_div` in both views, the channel `col` (channels-last) or `p % c`.
#[cube]
fn group_and_channel(
    p: usize,
    q: usize,
    col: usize,
    group_div: usize,
    c: usize,
    #[comptime] channels_last: bool,
) -> (usize, usize) {
    let mut ch = p % c;
    if channels_last {
        ch = col;
    }
    ((p * q + col) / group_div, ch)
}

/// The forward's first level: per block of `rows` rows of each column of a contiguous
/// `[p, r, q]` array, the sum and the sum of squares about the block's own mean (two passes
/// over the block, the second from cache), into `moments` `[2, p, ceil(r / rows), q]`.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn block_moments<F: Float>(
    input: &Tensor<F>,
    moments: &mut Tensor<f32>,
    half: usize,
    r: usize,
    q: usize,
    rows: usize,
    blocks: usize,
    #[define(F)] _dtype: StorageType,
) {
    let pos = ABSOLUTE_POS;
    if pos >= half {
        terminate!();
    }
    let (base, start, end, _p, _col) = row_block(pos, r, q, rows, blocks);
    let mut acc = 0.0f32;
    for row in start..end {
        acc += f32::cast_from(input[base + row * q]);
    }
    let m = acc / f32::cast_from(end - start);
    let mut m2 = 0.0f32;
    for row in start..end {
        let d = f32::cast_from(input[base + row * q]) - m;
        m2 += d * d;
    }
    moments[pos] = acc;
    moments[half + pos] = m2;
}

/// This unit's share of the `n` partial sums `input[base + (k / run) * run_stride + k % run]`
/// of one output (every `threads`-th `k`), added in chunks of `rows` in f32.
#[cube]
#[allow(clippy::too_many_arguments)]
fn chunked_sum(
    input: &Tensor<f32>,
    base: usize,
    run: usize,
    run_stride: usize,
    n: usize,
    chunks: usize,
    #[comptime] threads: usize,
    #[comptime] rows: usize,
) -> f32 {
    let t = UNIT_POS as usize;
    let mut total = 0.0f32;
    for c in 0..chunks {
        let mut acc = 0.0f32;
        for j in 0..rows {
            let k = (c * rows + j) * threads + t;
            if k < n {
                acc += input[base + (k / run) * run_stride + k % run];
            }
        }
        total += acc;
    }
    total
}

/// The sum of `value` over the cube (a tree in `shared`, one slot per unit); every unit gets it.
#[cube]
fn cube_total(shared: &mut SharedMemory<f32>, value: f32) -> f32 {
    let t = UNIT_POS as usize;
    shared[t] = value;
    sync_cube();
    let mut active = CUBE_DIM;
    while active > 1 {
        active /= 2;
        if UNIT_POS < active {
            let other = shared[t + active as usize];
            shared[t] += other;
        }
        sync_cube();
    }
    let total = shared[0];
    sync_cube();
    total
}

/// The forward's second level: one cube per (batch, group) combines the [`block_moments`] of its
/// blocks (Chan et al.: the group's mean from the sums, then the sums of squares about each
/// block's mean plus `n_k (mean_k - mean)^2`), each thread adding chunks of `chunk_rows`
/// partials in f32 before the cube's tree. Partials are addressed as in [`group_sums`].
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn group_moments(
    moments: &Tensor<f32>,
    mean: &mut Tensor<f32>,
    rstd: &mut Tensor<f32>,
    half: usize,
    per_batch: usize,
    batch_stride: usize,
    group_stride: usize,
    run: usize,
    run_stride: usize,
    n: usize,
    chunks: usize,
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
    let base = (o / per_batch) * batch_stride + (o % per_batch) * group_stride;
    let mut shared = SharedMemory::<f32>::new(threads);
    let total = chunked_sum(
        moments, base, run, run_stride, n, chunks, threads, chunk_rows,
    );
    let mu = cube_total(&mut shared, total) * inv_n;
    let mut total2 = 0.0f32;
    for c in 0..chunks {
        let mut acc = 0.0f32;
        for j in 0..chunk_rows {
            let k = (c * chunk_rows + j) * threads + t;
            if k < n {
                let at = base + (k / run) * run_stride + k % run;
                let mut blk = (k / q) % blocks;
                if channels_last {
                    blk = k / run;
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

/// The second level of every reduction: one cube per output `o` of each of the `parts`
/// consecutive arrays of partial sums in `input` (`part_stride` apart), its threads summing the `n`
/// partial sums `input[base + (k / run) * run_stride + k % run]` (`base` from `o`: see
/// [`Finish`]) in chunks of [`FINISH_ROWS`] in f32, then a tree over the cube in shared memory.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn group_sums(
    input: &Tensor<f32>,
    output: &mut Tensor<f32>,
    outputs_per_part: usize,
    part_stride: usize,
    per_batch: usize,
    batch_stride: usize,
    group_stride: usize,
    run: usize,
    run_stride: usize,
    n: usize,
    chunks: usize,
    #[comptime] threads: usize,
    #[comptime] rows: usize,
) {
    let part = CUBE_POS / outputs_per_part;
    let o = CUBE_POS % outputs_per_part;
    let t = UNIT_POS as usize;
    let base = part * part_stride + (o / per_batch) * batch_stride + (o % per_batch) * group_stride;
    let total = chunked_sum(input, base, run, run_stride, n, chunks, threads, rows);
    let mut shared = SharedMemory::<f32>::new(threads);
    let sum = cube_total(&mut shared, total);
    if t == 0 {
        output[CUBE_POS] = sum;
    }
}

/// What the backward pass needs from the per-(batch, channel) sums `sums` (`[2, b, c]`: of
/// `dL/da`, then of `dL/da x_hat`): the per-group means `m1`, `m2` (`[b, g]`) of `gamma dL/da` and
/// `gamma dL/da x_hat`, and the parameter gradients `d_gamma`, `d_beta` (`[c]`), in one launch
/// of `max(b * g, c)` threads.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn param_grads<P: Float>(
    sums: &Tensor<f32>,
    gamma: &Tensor<P>,
    m1: &mut Tensor<f32>,
    m2: &mut Tensor<f32>,
    d_gamma: &mut Tensor<P>,
    d_beta: &mut Tensor<P>,
    batch: usize,
    channels: usize,
    cpg: usize,
    inv_n: f32,
    #[define(P)] _dtype: StorageType,
) {
    let t = ABSOLUTE_POS;
    let groups = channels / cpg;
    let half = batch * channels;
    if t < batch * groups {
        let row = (t / groups) * channels + (t % groups) * cpg;
        let mut a1 = 0.0f32;
        let mut a2 = 0.0f32;
        for j in 0..cpg {
            let ga = f32::cast_from(gamma[(t % groups) * cpg + j]);
            a1 += ga * sums[row + j];
            a2 += ga * sums[half + row + j];
        }
        m1[t] = a1 * inv_n;
        m2[t] = a2 * inv_n;
    }
    if t < channels {
        let mut db = 0.0f32;
        let mut dg = 0.0f32;
        for bi in 0..batch {
            db += sums[bi * channels + t];
            dg += sums[half + bi * channels + t];
        }
        d_beta[t] = P::cast_from(db);
        d_gamma[t] = P::cast_from(dg);
    }
}

#[cube]
fn sigmoid(a: f32) -> f32 {
    1.0 / (1.0 + f32::exp(-a))
}

/// `y = silu?(gamma * (x - mean) * rstd + beta)`, over the same `[p, r, q]` view and blocks of
/// rows as the reductions: a thread's elements share one channel and group, so it reads the
/// statistics and parameters once and does no index division per element.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn normalise<F: Float, P: Float>(
    x: &Tensor<F>,
    gamma: &Tensor<P>,
    beta: &Tensor<P>,
    mean: &Tensor<f32>,
    rstd: &Tensor<f32>,
    y: &mut Tensor<F>,
    r: usize,
    q: usize,
    rows: usize,
    blocks: usize,
    group_div: usize,
    c: usize,
    #[comptime] channels_last: bool,
    #[comptime] silu: bool,
    #[define(F, P)] _dtypes: [StorageType; 2],
) {
    let pos = ABSOLUTE_POS;
    if pos >= blocks * q * (y.len() / (r * q)) {
        terminate!();
    }
    let (base, start, end, p, col) = row_block(pos, r, q, rows, blocks);
    let (g, ch) = group_and_channel(p, q, col, group_div, c, channels_last);
    let scale = rstd[g] * f32::cast_from(gamma[ch]);
    let shift = f32::cast_from(beta[ch]) - mean[g] * scale;
    for row in start..end {
        let idx = base + row * q;
        let a = f32::cast_from(x[idx]) * scale + shift;
        if silu {
            y[idx] = F::cast_from(a * sigmoid(a));
        } else {
            y[idx] = F::cast_from(a);
        }
    }
}

/// `x_hat` and `dL/da` (a = gamma x_hat + beta, the SiLU input) of one element.
#[cube]
#[allow(clippy::too_many_arguments)]
fn xhat_and_da(
    x: f32,
    dy: f32,
    gamma: f32,
    beta: f32,
    mean: f32,
    rstd: f32,
    #[comptime] silu: bool,
) -> (f32, f32) {
    let x_hat = (x - mean) * rstd;
    if silu {
        let a = x_hat * gamma + beta;
        let sg = sigmoid(a);
        (x_hat, dy * sg * (1.0 + a * (1.0 - sg)))
    } else {
        (x_hat, dy)
    }
}

/// The first level of the backward reduction: block sums of `dL/da` and of `dL/da * x_hat`
/// over the same `[p, r, q]` view as [`block_moments`]; the channel of column `col` of row block
/// `p` is `col` (channels-last) or `p % c`.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn backward_sums<F: Float, P: Float>(
    x: &Tensor<F>,
    dy: &Tensor<F>,
    gamma: &Tensor<P>,
    beta: &Tensor<P>,
    mean: &Tensor<f32>,
    rstd: &Tensor<f32>,
    sums: &mut Tensor<f32>,
    half: usize,
    r: usize,
    q: usize,
    rows: usize,
    blocks: usize,
    group_div: usize,
    c: usize,
    #[comptime] channels_last: bool,
    #[comptime] silu: bool,
    #[define(F, P)] _dtypes: [StorageType; 2],
) {
    let pos = ABSOLUTE_POS;
    if pos >= half {
        terminate!();
    }
    let (base, start, end, p, col) = row_block(pos, r, q, rows, blocks);
    let (g, ch) = group_and_channel(p, q, col, group_div, c, channels_last);
    let m = mean[g];
    let rs = rstd[g];
    let ga = f32::cast_from(gamma[ch]);
    let be = f32::cast_from(beta[ch]);
    let mut acc_da = 0.0f32;
    let mut acc_da_xhat = 0.0f32;
    for row in start..end {
        let idx = base + row * q;
        let (x_hat, da) = xhat_and_da(
            f32::cast_from(x[idx]),
            f32::cast_from(dy[idx]),
            ga,
            be,
            m,
            rs,
            silu,
        );
        acc_da += da;
        acc_da_xhat += da * x_hat;
    }
    sums[pos] = acc_da;
    sums[half + pos] = acc_da_xhat;
}

/// `dL/dx = rstd (gamma dL/da - m1 - x_hat m2)`, `m1`, `m2` the per-group means of
/// `gamma dL/da` and `gamma dL/da x_hat`; blocks of rows as in [`normalise`].
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn input_grad<F: Float, P: Float>(
    x: &Tensor<F>,
    dy: &Tensor<F>,
    gamma: &Tensor<P>,
    beta: &Tensor<P>,
    mean: &Tensor<f32>,
    rstd: &Tensor<f32>,
    m1: &Tensor<f32>,
    m2: &Tensor<f32>,
    dx: &mut Tensor<F>,
    r: usize,
    q: usize,
    rows: usize,
    blocks: usize,
    group_div: usize,
    c: usize,
    #[comptime] channels_last: bool,
    #[comptime] silu: bool,
    #[define(F, P)] _dtypes: [StorageType; 2],
) {
    let pos = ABSOLUTE_POS;
    if pos >= blocks * q * (dx.len() / (r * q)) {
        terminate!();
    }
    let (base, start, end, p, col) = row_block(pos, r, q, rows, blocks);
    let (g, ch) = group_and_channel(p, q, col, group_div, c, channels_last);
    let ga = f32::cast_from(gamma[ch]);
    let be = f32::cast_from(beta[ch]);
    let mu = mean[g];
    let rs = rstd[g];
    let g1 = m1[g];
    let g2 = m2[g];
    for row in start..end {
        let idx = base + row * q;
        let (x_hat, da) = xhat_and_da(
            f32::cast_from(x[idx]),
            f32::cast_from(dy[idx]),
            ga,
            be,
            mu,
            rs,
            silu,
        );
        dx[idx] = F::cast_from(rs * (ga * da - g1 - x_hat * g2));
    }
}

/// How an activation is viewed for the reductions.
#[derive(Debug, Clone, Copy)]
struct View {
    batch: usize,
    channels: usize,
    groups: usize,
    /// Voxels per channel.
    spatial: usize,
    channels_last: bool,
    /// `[p, r, q]` of the reduced view.
    p: usize,
    r: usize,
    q: usize,
}

impl View {
    fn new(shape: &Shape, spec: &GroupNormSpec) -> Self {
        let dims: Vec<usize> = shape.iter().copied().collect();
        let channels_last = spec.layout == Layout::Ndhwc;
        let batch = dims[0];
        let channels = dims[spec.layout.channel_dim()];
        let spatial = dims.iter().product::<usize>() / (batch * channels);
        let (p, r, q) = if channels_last {
            (batch, spatial, channels)
        } else {
            let mut q = 1;
            while q < 32 && spatial.is_multiple_of(2 * q) {
                q *= 2;
            }
            (batch * channels, spatial / q, q)
        };
        View {
            batch,
            channels,
            groups: spec.num_groups,
            spatial,
            channels_last,
            p,
            r,
            q,
        }
    }

    fn cpg(&self) -> usize {
        self.channels / self.groups
    }

    /// Divides `p * q + col` down to the (batch, group) index.
    fn group_div(&self) -> usize {
        if self.channels_last {
            self.cpg()
        } else {
            self.cpg() * self.q
        }
    }

    fn blocks(r: usize, rows: usize) -> usize {
        r.div_ceil(rows)
    }

    fn values_per_group(&self) -> usize {
        self.spatial * self.cpg()
    }
}

fn f32_buffer<R: CubeRuntime>(like: &CubeTensor<R>, shape: Shape) -> CubeTensor<R> {
    empty_device_contiguous_dtype::<R>(like.client.clone(), like.device.clone(), shape, DType::F32)
}

fn elementwise<R: CubeRuntime>(t: &CubeTensor<R>, n: usize) -> (CubeCount, CubeDim) {
    let dim = CubeDim::new_1d(THREADS);
    (calculate_cube_count_elemwise(&t.client, n, dim), dim)
}

/// Threads of one [`group_sums`] cube.
const FINISH_THREADS: usize = 256;

/// The outputs a [`group_sums`] launch reduces the partial sums to.
#[derive(Debug, Clone, Copy)]
enum Finish {
    /// One per (batch, group).
    Groups,
    /// One per (batch, channel).
    Channels,
}

/// Where the partial sums of one output lie in the `[p, blocks, q]` partials of `v` (see
/// [`group_sums`]): `(outputs per batch, batch stride, group stride, run, run stride, n)`.
/// Channels-last partials `[b, blocks, c]` hold an output's values as runs of `width` channels,
/// one run per block; channels-first ones `[b * c, blocks, q]` hold them contiguously.
fn addressing(v: &View, blocks: usize, per: Finish) -> [usize; 6] {
    let width = match per {
        Finish::Groups => v.cpg(),
        Finish::Channels => 1,
    };
    let per_batch = v.channels / width;
    if v.channels_last {
        [per_batch, blocks * v.q, width, width, v.q, blocks * width]
    } else {
        let n = width * blocks * v.q;
        [per_batch, v.channels * blocks * v.q, n, n, n, n]
    }
}

/// [`group_sums`] over `parts` consecutive `[p, blocks, q]` arrays of partial sums of `v`:
/// `[parts, b, groups or channels]`.
fn finish<R: CubeRuntime>(
    partial: &CubeTensor<R>,
    parts: usize,
    v: &View,
    blocks: usize,
    per: Finish,
) -> CubeTensor<R> {
    let [per_batch, batch_stride, group_stride, run, run_stride, n] = addressing(v, blocks, per);
    let outputs = v.batch * per_batch;
    let out = f32_buffer(partial, Shape::new([parts, v.batch, per_batch]));
    group_sums::launch::<R>(
        &partial.client,
        CubeCount::Static((parts * outputs) as u32, 1, 1),
        CubeDim::new_1d(FINISH_THREADS as u32),
        partial.clone().into_tensor_arg(),
        out.clone().into_tensor_arg(),
        outputs,
        v.p * blocks * v.q,
        per_batch,
        batch_stride,
        group_stride,
        run,
        run_stride,
        n,
        n.div_ceil(FINISH_THREADS * FINISH_ROWS),
        FINISH_THREADS,
        FINISH_ROWS,
    );
    out
}

/// The forward pass: `(y, mean, rstd)`, the statistics `[b, g]` in f32.
pub fn forward<R: CubeRuntime>(
    x: CubeTensor<R>,
    gamma: CubeTensor<R>,
    beta: CubeTensor<R>,
    spec: &GroupNormSpec,
) -> (CubeTensor<R>, CubeTensor<R>, CubeTensor<R>) {
    let x = into_contiguous(x);
    let gamma = into_contiguous(gamma);
    let beta = into_contiguous(beta);
    let v = View::new(&x.meta.shape().clone(), spec);
    let client = x.client.clone();
    let x_dtype: StorageType = x.dtype.into();
    let inv_n = 1.0 / v.values_per_group() as f32;
    let blocks = View::blocks(v.r, FORWARD_ROWS);

    // Per-block sums and centred sums of squares, then per group the mean and
    // 1 / sqrt(variance + epsilon).
    let half = v.p * blocks * v.q;
    let moments = f32_buffer(&x, Shape::new([2, v.p, blocks, v.q]));
    let (count, dim) = elementwise(&x, half);
    block_moments::launch::<R>(
        &client,
        count,
        dim,
        x.clone().into_tensor_arg(),
        moments.clone().into_tensor_arg(),
        half,
        v.r,
        v.q,
        FORWARD_ROWS,
        blocks,
        x_dtype,
    );
    let [per_batch, batch_stride, group_stride, run, run_stride, n] =
        addressing(&v, blocks, Finish::Groups);
    let stats = || f32_buffer(&x, Shape::new([v.batch, v.groups]));
    let (mean, rstd) = (stats(), stats());
    group_moments::launch::<R>(
        &client,
        CubeCount::Static((v.batch * v.groups) as u32, 1, 1),
        CubeDim::new_1d(FINISH_THREADS as u32),
        moments.into_tensor_arg(),
        mean.clone().into_tensor_arg(),
        rstd.clone().into_tensor_arg(),
        half,
        per_batch,
        batch_stride,
        group_stride,
        run,
        run_stride,
        n,
        n.div_ceil(FINISH_THREADS * FINISH_ROWS),
        v.r,
        v.q,
        FORWARD_ROWS,
        blocks,
        inv_n,
        spec.epsilon as f32,
        FINISH_THREADS,
        FINISH_ROWS,
        v.channels_last,
    );

    let y = empty_device_contiguous_dtype::<R>(
        client.clone(),
        x.device.clone(),
        x.meta.shape().clone(),
        x.dtype,
    );
    let blocks = v.r.div_ceil(ELEMENTWISE_ROWS);
    let (count, dim) = elementwise(&x, v.p * blocks * v.q);
    let p_dtype: StorageType = gamma.dtype.into();
    normalise::launch::<R>(
        &client,
        count,
        dim,
        x.into_tensor_arg(),
        gamma.into_tensor_arg(),
        beta.into_tensor_arg(),
        mean.clone().into_tensor_arg(),
        rstd.clone().into_tensor_arg(),
        y.clone().into_tensor_arg(),
        v.r,
        v.q,
        ELEMENTWISE_ROWS,
        blocks,
        v.group_div(),
        v.channels,
        v.channels_last,
        spec.silu,
        [x_dtype, p_dtype],
    );
    (y, mean, rstd)
}

/// What the backward pass's reduction gives: per-(batch, channel) sums of `dL/da` and of
/// `dL/da * x_hat`, `[2, b, c]` f32.
pub struct ChannelSums<R: CubeRuntime> {
    /// `sums[0]`: `sum dL/da`; `sums[1]`: `sum dL/da * x_hat`.
    pub sums: CubeTensor<R>,
}

/// The backward pass's reduction (see [`ChannelSums`]).
#[allow(clippy::too_many_arguments)]
pub fn backward_channel_sums<R: CubeRuntime>(
    x: &CubeTensor<R>,
    gamma: &CubeTensor<R>,
    beta: &CubeTensor<R>,
    mean: &CubeTensor<R>,
    rstd: &CubeTensor<R>,
    dy: &CubeTensor<R>,
    spec: &GroupNormSpec,
) -> ChannelSums<R> {
    let v = View::new(&x.meta.shape().clone(), spec);
    let blocks = View::blocks(v.r, BACKWARD_ROWS);
    let partial = f32_buffer(x, Shape::new([2, v.p, blocks, v.q]));
    let (count, dim) = elementwise(x, v.p * blocks * v.q);
    backward_sums::launch::<R>(
        &x.client,
        count,
        dim,
        x.clone().into_tensor_arg(),
        dy.clone().into_tensor_arg(),
        gamma.clone().into_tensor_arg(),
        beta.clone().into_tensor_arg(),
        mean.clone().into_tensor_arg(),
        rstd.clone().into_tensor_arg(),
        partial.clone().into_tensor_arg(),
        v.p * blocks * v.q,
        v.r,
        v.q,
        BACKWARD_ROWS,
        blocks,
        v.group_div(),
        v.channels,
        v.channels_last,
        spec.silu,
        [x.dtype.into(), gamma.dtype.into()],
    );
    ChannelSums {
        sums: finish(&partial, 2, &v, blocks, Finish::Channels),
    }
}

/// The backward pass's `[b, c]`-sized step (see [`param_grads`]): `(m1, m2, d_gamma, d_beta)`.
pub fn backward_param_grads<R: CubeRuntime>(
    sums: &ChannelSums<R>,
    gamma: &CubeTensor<R>,
    spec: &GroupNormSpec,
    values_per_group: usize,
) -> [CubeTensor<R>; 4] {
    let dims = sums.sums.meta.shape().clone();
    let (batch, channels) = (dims[1], dims[2]);
    let groups = spec.num_groups;
    let stats = || f32_buffer(gamma, Shape::new([batch, groups]));
    let param = || {
        empty_device_contiguous_dtype::<R>(
            gamma.client.clone(),
            gamma.device.clone(),
            Shape::new([channels]),
            gamma.dtype,
        )
    };
    let (m1, m2, d_gamma, d_beta) = (stats(), stats(), param(), param());
    let (count, dim) = elementwise(gamma, (batch * groups).max(channels));
    param_grads::launch::<R>(
        &gamma.client,
        count,
        dim,
        sums.sums.clone().into_tensor_arg(),
        gamma.clone().into_tensor_arg(),
        m1.clone().into_tensor_arg(),
        m2.clone().into_tensor_arg(),
        d_gamma.clone().into_tensor_arg(),
        d_beta.clone().into_tensor_arg(),
        batch,
        channels,
        channels / groups,
        1.0 / values_per_group as f32,
        gamma.dtype.into(),
    );
    [m1, m2, d_gamma, d_beta]
}

/// The backward pass's input gradient, given the per-group means `m1`, `m2` (`[b, g]` f32) of
/// `gamma dL/da` and `gamma dL/da x_hat`.
#[allow(clippy::too_many_arguments)]
pub fn backward_input_grad<R: CubeRuntime>(
    x: CubeTensor<R>,
    gamma: CubeTensor<R>,
    beta: CubeTensor<R>,
    mean: CubeTensor<R>,
    rstd: CubeTensor<R>,
    dy: CubeTensor<R>,
    m1: CubeTensor<R>,
    m2: CubeTensor<R>,
    spec: &GroupNormSpec,
) -> CubeTensor<R> {
    let v = View::new(&x.meta.shape().clone(), spec);
    let dx = empty_device_contiguous_dtype::<R>(
        x.client.clone(),
        x.device.clone(),
        x.meta.shape().clone(),
        x.dtype,
    );
    let blocks = v.r.div_ceil(ELEMENTWISE_ROWS);
    let (count, dim) = elementwise(&x, v.p * blocks * v.q);
    let dtypes = [x.dtype.into(), gamma.dtype.into()];
    input_grad::launch::<R>(
        &x.client.clone(),
        count,
        dim,
        x.into_tensor_arg(),
        dy.into_tensor_arg(),
        gamma.into_tensor_arg(),
        beta.into_tensor_arg(),
        mean.into_tensor_arg(),
        rstd.into_tensor_arg(),
        into_contiguous(m1).into_tensor_arg(),
        into_contiguous(m2).into_tensor_arg(),
        dx.clone().into_tensor_arg(),
        v.r,
        v.q,
        ELEMENTWISE_ROWS,
        blocks,
        v.group_div(),
        v.channels,
        v.channels_last,
        spec.silu,
        dtypes,
    );
    dx
}
