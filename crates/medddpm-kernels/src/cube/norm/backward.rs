//! The backward pass's four launches: one pass of block sums, one finishing launch for both
//! sums, one `[b, c]`-sized launch, one write of the input gradient.

use burn::tensor::Shape;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;
use cubecl::prelude::*;

use super::finish::{finish, Finish};
use super::parts::{group_and_channel, row_block, xhat_and_da};
use super::view::{f32_buffer, View, ELEMENTWISE_ROWS};
use crate::cube::elementwise;
use crate::norm::reference::GroupNormSpec;

/// The same for the backward's reduction, whose threads do more per value (the backward's sums
/// and their finishing launches: 5.6 ms with 64, 7.3 ms with 256).
pub const BACKWARD_ROWS: usize = 64;

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

/// `dL/dx = rstd (gamma dL/da - m1 - x_hat m2)`, `m1`, `m2` the per-group means of
/// `gamma dL/da` and `gamma dL/da x_hat`; blocks of rows and vectors of columns as in
/// [`normalise`].
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn input_grad<F: Float, P: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    dy: &Tensor<Vector<F, N>>,
    gamma: &Tensor<P>,
    beta: &Tensor<P>,
    mean: &Tensor<f32>,
    rstd: &Tensor<f32>,
    m1: &Tensor<f32>,
    m2: &Tensor<f32>,
    dx: &mut Tensor<Vector<F, N>>,
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
    let n = x.vector_size();
    let qv = q / n;
    let pos = ABSOLUTE_POS;
    if pos >= blocks * qv * (dx.len() / (r * qv)) {
        terminate!();
    }
    let (base, start, end, p, col) = row_block(pos, r, qv, rows, blocks);
    // Per lane (column `col * n + i`): the group's statistics and means, the channel's
    // parameters, read once for the thread's rows.
    let mut mu = Vector::<f32, N>::empty();
    let mut rs = Vector::<f32, N>::empty();
    let mut ga = Vector::<f32, N>::empty();
    let mut be = Vector::<f32, N>::empty();
    let mut g1 = Vector::<f32, N>::empty();
    let mut g2 = Vector::<f32, N>::empty();
    #[unroll]
    for i in 0..n {
        let (g, ch) = group_and_channel(p, q, col * n + i, group_div, c, channels_last);
        mu[i] = mean[g];
        rs[i] = rstd[g];
        g1[i] = m1[g];
        g2[i] = m2[g];
        ga[i] = f32::cast_from(gamma[ch]);
        be[i] = f32::cast_from(beta[ch]);
    }
    for row in start..end {
        let idx = base + row * qv;
        let (xv, dyv) = (x[idx], dy[idx]);
        let mut out = Vector::<F, N>::empty();
        #[unroll]
        for i in 0..n {
            let (x_hat, da) = xhat_and_da(
                f32::cast_from(xv[i]),
                f32::cast_from(dyv[i]),
                ga[i],
                be[i],
                mu[i],
                rs[i],
                silu,
            );
            out[i] = F::cast_from(rs[i] * (ga[i] * da - g1[i] - x_hat * g2[i]));
        }
        dx[idx] = out;
    }
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

/// The backward pass's `[b, c]`-sized step (see `param_grads`): `(m1, m2, d_gamma, d_beta)`.
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
    let vector = v.vector_size(&x);
    let (count, dim) = elementwise(&x, v.p * blocks * v.q / vector);
    let dtypes = [x.dtype.into(), gamma.dtype.into()];
    input_grad::launch::<R>(
        &x.client.clone(),
        count,
        dim,
        vector,
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
