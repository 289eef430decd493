//! GroupNorm (+ SiLU) forward and backward as CubeCL kernels: four passes over the activation
//! forward (two reductions, as the reference does: the mean, then the centred squares; one
//! normalising write) and three backward (one reduction, one write), everything else on
//! `[b, c]`-sized tensors. Statistics and sums are f32 whatever the activation dtype.
//!
//! Every reduction is a tree of blocked sums: a thread adds [`ROWS`] values in f32 (one
//! column of a `[p, r, q]` view of the tensor, so neighbouring threads read neighbouring
//! addresses), and the partial sums are summed the same way until one row is left, so no f32
//! running sum ever spans more than [`ROWS`] terms (what keeps the statistics of a
//! two-million-voxel group at f32 rounding; see [`crate::norm`]).
//!
//! The reduced view is `[b, S, c]` for channels-last activations (columns are channels) and
//! `[b * c, S / q, q]` with `q` a power of two dividing `S` for channels-first ones (columns
//! are `q` interleaved slices of one channel). Either way, after the tree the values of one
//! (batch, group) -- or of one (batch, channel) -- lie next to each other, so the last step is
//! a sum over short contiguous segments.

use burn::tensor::{DType, Shape};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;
use cubecl::prelude::*;
use cubecl::{calculate_cube_count_elemwise, CubeCount, CubeDim};

use crate::compute::Layout;
use crate::norm::GroupNormSpec;

/// Values one thread adds before its partial sum is written.
pub const ROWS: usize = 64;

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

/// Sums of `rows` consecutive rows of each column of a contiguous `[p, r, q]` array, into
/// `[p, ceil(r / rows), q]`.
#[cube(launch)]
fn block_sums<F: Float>(
    input: &Tensor<F>,
    output: &mut Tensor<f32>,
    r: usize,
    q: usize,
    rows: usize,
    blocks: usize,
    #[define(F)] _dtype: StorageType,
) {
    let pos = ABSOLUTE_POS;
    if pos >= output.len() {
        terminate!();
    }
    let (base, start, end, _p, _col) = row_block(pos, r, q, rows, blocks);
    let mut acc = 0.0f32;
    for row in start..end {
        acc += f32::cast_from(input[base + row * q]);
    }
    output[pos] = acc;
}

/// The first level of the variance: sums of `(x - mean)^2`, the mean of element `(p, *, col)`
/// being `mean[(p * q + col) / group_div]`.
#[cube(launch)]
fn centred_square_sums<F: Float>(
    input: &Tensor<F>,
    mean: &Tensor<f32>,
    output: &mut Tensor<f32>,
    r: usize,
    q: usize,
    rows: usize,
    blocks: usize,
    group_div: usize,
    #[define(F)] _dtype: StorageType,
) {
    let pos = ABSOLUTE_POS;
    if pos >= output.len() {
        terminate!();
    }
    let (base, start, end, p, col) = row_block(pos, r, q, rows, blocks);
    let m = mean[(p * q + col) / group_div];
    let mut acc = 0.0f32;
    for row in start..end {
        let d = f32::cast_from(input[base + row * q]) - m;
        acc += d * d;
    }
    output[pos] = acc;
}

/// `output[k] = scale * sum(input[k * m .. (k + 1) * m])`, or `1 / sqrt(that + epsilon)`
/// when `rsqrt`.
#[cube(launch)]
fn segment_sums(
    input: &Tensor<f32>,
    output: &mut Tensor<f32>,
    m: usize,
    scale: f32,
    epsilon: f32,
    #[comptime] rsqrt: bool,
) {
    let k = ABSOLUTE_POS;
    if k >= output.len() {
        terminate!();
    }
    let mut acc = 0.0f32;
    for t in 0..m {
        acc += input[k * m + t];
    }
    let v = acc * scale;
    if rsqrt {
        output[k] = 1.0 / f32::sqrt(v + epsilon);
    } else {
        output[k] = v;
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
/// over the same `[p, r, q]` view as [`block_sums`]; the channel of column `col` of row block
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
    sum_da: &mut Tensor<f32>,
    sum_da_xhat: &mut Tensor<f32>,
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
    if pos >= sum_da.len() {
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
    sum_da[pos] = acc_da;
    sum_da_xhat[pos] = acc_da_xhat;
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

    fn blocks(r: usize) -> usize {
        r.div_ceil(ROWS)
    }

    /// Values per (batch, group) once the rows are summed away.
    fn per_group(&self) -> usize {
        self.p * self.q / (self.batch * self.groups)
    }

    /// Values per (batch, channel) once the rows are summed away.
    fn per_channel(&self) -> usize {
        self.p * self.q / (self.batch * self.channels)
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

/// Sums the rows of a `[p, r, q]` f32 array in blocks until one row is left: `[p, 1, q]`.
fn reduce_rows<R: CubeRuntime>(
    mut t: CubeTensor<R>,
    p: usize,
    mut r: usize,
    q: usize,
) -> CubeTensor<R> {
    while r > 1 {
        let blocks = View::blocks(r);
        let out = f32_buffer(&t, Shape::new([p, blocks, q]));
        let (count, dim) = elementwise(&t, p * blocks * q);
        block_sums::launch::<R>(
            &t.client,
            count,
            dim,
            t.clone().into_tensor_arg(),
            out.clone().into_tensor_arg(),
            r,
            q,
            ROWS,
            blocks,
            DType::F32.into(),
        );
        t = out;
        r = blocks;
    }
    t
}

/// `scale *` sums of consecutive segments of `m` values of `t` (or, `rsqrt`, their reciprocal
/// square roots after adding `epsilon`) as a `[outer, inner]` tensor.
fn segments<R: CubeRuntime>(
    t: &CubeTensor<R>,
    m: usize,
    out_shape: [usize; 2],
    scale: f32,
    epsilon: f32,
    rsqrt: bool,
) -> CubeTensor<R> {
    let out = f32_buffer(t, Shape::new(out_shape));
    let (count, dim) = elementwise(t, out_shape[0] * out_shape[1]);
    segment_sums::launch::<R>(
        &t.client,
        count,
        dim,
        t.clone().into_tensor_arg(),
        out.clone().into_tensor_arg(),
        m,
        scale,
        epsilon,
        rsqrt,
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
    let stats_shape = [v.batch, v.groups];
    let blocks = View::blocks(v.r);

    // Mean.
    let partial = f32_buffer(&x, Shape::new([v.p, blocks, v.q]));
    let (count, dim) = elementwise(&x, v.p * blocks * v.q);
    block_sums::launch::<R>(
        &client,
        count.clone(),
        dim,
        x.clone().into_tensor_arg(),
        partial.clone().into_tensor_arg(),
        v.r,
        v.q,
        ROWS,
        blocks,
        x_dtype,
    );
    let sums = reduce_rows(partial, v.p, blocks, v.q);
    let mean = segments(&sums, v.per_group(), stats_shape, inv_n, 0.0, false);

    // 1 / sqrt(variance + epsilon), from the centred squares.
    let partial = f32_buffer(&x, Shape::new([v.p, blocks, v.q]));
    centred_square_sums::launch::<R>(
        &client,
        count,
        dim,
        x.clone().into_tensor_arg(),
        mean.clone().into_tensor_arg(),
        partial.clone().into_tensor_arg(),
        v.r,
        v.q,
        ROWS,
        blocks,
        v.group_div(),
        x_dtype,
    );
    let sums = reduce_rows(partial, v.p, blocks, v.q);
    let rstd = segments(
        &sums,
        v.per_group(),
        stats_shape,
        inv_n,
        spec.epsilon as f32,
        true,
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
/// `dL/da * x_hat`, `[b, c]` f32.
pub struct ChannelSums<R: CubeRuntime> {
    /// `sum dL/da` per (batch, channel).
    pub da: CubeTensor<R>,
    /// `sum dL/da * x_hat` per (batch, channel).
    pub da_xhat: CubeTensor<R>,
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
    let blocks = View::blocks(v.r);
    let partial_da = f32_buffer(x, Shape::new([v.p, blocks, v.q]));
    let partial_da_xhat = f32_buffer(x, Shape::new([v.p, blocks, v.q]));
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
        partial_da.clone().into_tensor_arg(),
        partial_da_xhat.clone().into_tensor_arg(),
        v.r,
        v.q,
        ROWS,
        blocks,
        v.group_div(),
        v.channels,
        v.channels_last,
        spec.silu,
        [x.dtype.into(), gamma.dtype.into()],
    );
    let shape = [v.batch, v.channels];
    let da = reduce_rows(partial_da, v.p, blocks, v.q);
    let da_xhat = reduce_rows(partial_da_xhat, v.p, blocks, v.q);
    ChannelSums {
        da: segments(&da, v.per_channel(), shape, 1.0, 0.0, false),
        da_xhat: segments(&da_xhat, v.per_channel(), shape, 1.0, 0.0, false),
    }
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
