//! The backward pass's four launches: one pass of block sums, one finishing launch for both
//! sums, one `[b, c]`-sized launch, one write of the input gradient.

use burn::tensor::Shape;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;
use cubecl::prelude::*;

use super::finish::{finish, Finish};
use super::parts::{
    affine_arg, group_and_channel, lane_params, lane_xhat_and_da, load, row_block, shift_index,
    vector_row_block, xhat_and_da, Affine, Flags, Rows,
};
use super::tiles::{self, Tiles};
use super::view::{f32_buffer, shift_operand, View, ELEMENTWISE_ROWS};
use crate::reference::norm::{GroupNormSpec, NormInput};
use crate::{elementwise, empty};

/// The same for the backward's reduction, whose threads do more per value (the backward's sums
/// and their finishing launches: 5.6 ms with 64, 7.3 ms with 256).
pub const BACKWARD_ROWS: usize = 64;

/// The first level of the backward reduction where the tiles do not apply (channels-first
/// views, and rows wider than a tile's cube; see [`tiles`](super::tiles)): block sums of
/// `dL/da` and of `dL/da * x_hat` (and of `x_hat` where `shifted`) over the same `[p, r, q]`
/// view as the forward's block moments; the channel of column `col` of row block `p` is `col`
/// (channels-last) or `p % c`.
#[cube(launch, fast_math = FastMath::all())]
#[allow(clippy::too_many_arguments)]
fn backward_sums<F: Float, P: Float, S: Float>(
    x: &Tensor<F>,
    dy: &Tensor<F>,
    affine: &Affine<P, S>,
    sums: &mut Tensor<f32>,
    half: usize,
    v: Rows,
    #[comptime] flags: Flags,
    #[define(F, P, S)] _dtypes: [StorageType; 3],
) {
    let pos = ABSOLUTE_POS;
    if pos >= half {
        terminate!();
    }
    let (base, start, end, p, col) = row_block(pos, v.r, v.q, v.rows, v.blocks);
    let (g, ch) = group_and_channel(p, v.q, col, v.group_div, v.c, flags.channels_last);
    let mut m = affine.mean[g];
    if flags.shifted {
        m -= f32::cast_from(affine.shift[shift_index(p, ch, v.c, flags.channels_last)]);
    }
    let rs = affine.rstd[g];
    let ga = f32::cast_from(affine.gamma[ch]);
    let be = f32::cast_from(affine.beta[ch]);
    let mut acc_da = 0.0f32;
    let mut acc_da_xhat = 0.0f32;
    let mut acc_xhat = 0.0f32;
    for row in start..end {
        let idx = base + row * v.q;
        let (x_hat, da) = xhat_and_da(
            f32::cast_from(x[idx]),
            f32::cast_from(dy[idx]),
            ga,
            be,
            m,
            rs,
            flags.silu,
        );
        acc_da += da;
        acc_da_xhat += da * x_hat;
        if flags.shifted {
            acc_xhat += x_hat;
        }
    }
    sums[pos] = acc_da;
    sums[half + pos] = acc_da_xhat;
    if flags.shifted {
        sums[2 * half + pos] = acc_xhat;
    }
}

/// What the backward pass needs from the per-(batch, channel) sums `sums` (`[parts, b, c]`: of
/// `dL/da`, of `dL/da x_hat`, and where `shifted` of `x_hat`): the per-group means `m1`, `m2`
/// (`[b, g]`) of `gamma dL/da` and `gamma dL/da x_hat`, the parameter gradients `d_gamma`,
/// `d_beta` (`[c]`), and where `shifted` the shift's gradient `d_shift` (`[b, c]`: the sum of
/// `dL/dx = rstd (gamma dL/da - m1 - x_hat m2)` over the channel's `per_channel` values), in one
/// launch of `max(b * g, c, b * c)` threads.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn param_grads<P: Float, S: Float>(
    sums: &Tensor<f32>,
    gamma: &Tensor<P>,
    rstd: &Tensor<f32>,
    m1: &mut Tensor<f32>,
    m2: &mut Tensor<f32>,
    d_gamma: &mut Tensor<P>,
    d_beta: &mut Tensor<P>,
    d_shift: &mut Tensor<S>,
    batch: usize,
    channels: usize,
    cpg: usize,
    inv_n: f32,
    per_channel: f32,
    #[comptime] shifted: bool,
    #[define(P, S)] _dtypes: [StorageType; 2],
) {
    let t = ABSOLUTE_POS;
    let groups = channels / cpg;
    let half = batch * channels;
    if shifted && t < half {
        // This thread's (batch, channel) and its group's m1, m2, as the threads below find them.
        let (bi, ch) = (t / channels, t % channels);
        let g = ch / cpg;
        let row = bi * channels + g * cpg;
        let mut a1 = 0.0f32;
        let mut a2 = 0.0f32;
        for j in 0..cpg {
            let ga = f32::cast_from(gamma[g * cpg + j]);
            a1 += ga * sums[row + j];
            a2 += ga * sums[half + row + j];
        }
        let ga = f32::cast_from(gamma[ch]);
        let ds = rstd[bi * groups + g]
            * (ga * sums[t] - per_channel * a1 * inv_n - a2 * inv_n * sums[2 * half + t]);
        d_shift[t] = S::cast_from(ds);
    }
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
/// `gamma dL/da` and `gamma dL/da x_hat`, `x_hat` from `x` plus the shift where `shifted`;
/// blocks of rows and vectors of columns as in the forward's normalising pass. With
/// `flags.parts` the input is `x` and `x_b` joined along channels (`dy` is of the join), and
/// each column's gradient goes to its part's (`dx`, `dx_b`); else `dx_b` is never written.
#[cube(launch, fast_math = FastMath::all())]
#[allow(clippy::too_many_arguments)]
fn input_grad<F: Float, P: Float, S: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    x_b: &Tensor<Vector<F, N>>,
    dy: &Tensor<Vector<F, N>>,
    affine: &Affine<P, S>,
    m1: &Tensor<f32>,
    m2: &Tensor<f32>,
    dx: &mut Tensor<Vector<F, N>>,
    dx_b: &mut Tensor<Vector<F, N>>,
    v: Rows,
    #[comptime] flags: Flags,
    #[define(F, P, S)] _dtypes: [StorageType; 3],
) {
    let n = x.vector_size();
    let (base, start, end, p, col, qv, second, x_base, pitch) =
        vector_row_block(dy.len(), &v, n, flags.parts);
    // Per lane (column `col * n + i`): the group's statistics and means, the channel's
    // parameters, read once for the thread's rows.
    let (mu, rs, ga, be) = lane_params::<P, S, N>(
        affine,
        p,
        col * n,
        v.q,
        v.group_div,
        v.c,
        flags.channels_last,
        flags.shifted,
    );
    let mut g1 = Vector::<f32, N>::empty();
    let mut g2 = Vector::<f32, N>::empty();
    #[unroll]
    for i in 0..n {
        let (g, _ch) =
            group_and_channel(p, v.q, col * n + i, v.group_div, v.c, flags.channels_last);
        g1[i] = m1[g];
        g2[i] = m2[g];
    }
    for row in start..end {
        let at = x_base + row * pitch;
        let xv = load(x, x_b, at, second, flags.parts);
        let dyv = dy[base + row * qv];
        let mut out = Vector::<F, N>::empty();
        #[unroll]
        for i in 0..n {
            let lanes = (mu, rs, ga, be);
            let (x_hat, da) = lane_xhat_and_da::<F, N>(xv, dyv, lanes, i, flags.silu);
            out[i] = F::cast_from(rs[i] * (ga[i] * da - g1[i] - x_hat * g2[i]));
        }
        if flags.parts {
            if second {
                dx_b[at] = out;
            } else {
                dx[at] = out;
            }
        } else {
            dx[at] = out;
        }
    }
}

/// The gradients of a normalisation on CubeCL tensors: of its input, shaped as the input
/// (dL/dx and the shift's, or each part's), of gamma and of beta.
pub struct NormGrads<R: CubeRuntime> {
    /// dL/dx and dL/dshift where the input had a shift, or dL/da and dL/db of two parts.
    pub input: NormInput<CubeTensor<R>>,
    /// dL/dgamma, `[c]`.
    pub gamma: CubeTensor<R>,
    /// dL/dbeta, `[c]`.
    pub beta: CubeTensor<R>,
}

/// The backward pass of the normalisation of `input` (of two parts channels-last only; of
/// their join where its rows are too wide for the tiles), given the forward's statistics: the one
/// reduction over the activation, the `[b, c]`-sized arithmetic and the input gradient, four
/// launches in all.
#[allow(clippy::too_many_arguments)]
pub fn backward<R: CubeRuntime>(
    input: NormInput<CubeTensor<R>>,
    gamma: CubeTensor<R>,
    beta: CubeTensor<R>,
    mean: CubeTensor<R>,
    rstd: CubeTensor<R>,
    dy: CubeTensor<R>,
    spec: &GroupNormSpec,
) -> NormGrads<R> {
    let super::Prepared {
        x,
        x_b,
        shift,
        view: v,
        joined,
    } = super::prepare(input, spec);
    let [gamma, beta, mean, rstd, dy] = [gamma, beta, mean, rstd, dy].map(into_contiguous);
    let shift = shift.as_ref();
    let x_b = x_b.as_ref();
    let sums = channel_sums(&v, &x, x_b, shift, [&gamma, &beta, &mean, &rstd], &dy, spec);
    let ([m1, m2, d_gamma, d_beta], d_shift) =
        param_grads_of(&sums, shift, &gamma, &rstd, spec, v.values_per_group());
    let operands = [gamma, beta, mean, rstd, dy, m1, m2];
    let (dx, dx_b) = input_grad_of(&v, x, x_b, shift, operands, spec);
    let input = match joined {
        Some(first) => {
            let [da, db] = crate::channels::split(dx, first);
            NormInput::Parts(da, db)
        }
        None => NormInput::from_pair(dx, dx_b.or(d_shift), v.split.is_some()),
    };
    NormGrads {
        input,
        gamma: d_gamma,
        beta: d_beta,
    }
}

/// The backward pass's reduction: per-(batch, channel) sums of `dL/da`, of `dL/da * x_hat`
/// and, for a shifted input, of `x_hat`: `[parts, b, c]` f32 (`sums[0]`, `sums[1]`, `sums[2]`).
#[allow(clippy::too_many_arguments)]
fn channel_sums<R: CubeRuntime>(
    v: &View,
    x: &CubeTensor<R>,
    x_b: Option<&CubeTensor<R>>,
    shift: Option<&CubeTensor<R>>,
    [gamma, beta, mean, rstd]: [&CubeTensor<R>; 4],
    dy: &CubeTensor<R>,
    spec: &GroupNormSpec,
) -> CubeTensor<R> {
    let (shift_t, shifted) = shift_operand(shift, gamma);
    let parts = if shifted { 3 } else { 2 };
    if let Some(t) = Tiles::new(v, x) {
        let partial = tiles::backward_sums(
            x, x_b, dy, shift_t, shifted, gamma, beta, mean, rstd, v, &t, spec.silu,
        );
        return finish(&partial, parts, v, t.blocks, Finish::Channels);
    }
    assert!(x_b.is_none(), "a normalisation of two parts without tiles");
    let blocks = View::blocks(v.r, BACKWARD_ROWS);
    let partial = f32_buffer(x, Shape::new([parts, v.p, blocks, v.q]));
    let (count, dim) = elementwise(x, v.p * blocks * v.q);
    backward_sums::launch::<R>(
        &x.client,
        count,
        dim,
        x.clone().into_tensor_arg(),
        dy.clone().into_tensor_arg(),
        affine_arg([shift_t, gamma, beta, mean, rstd]),
        partial.clone().into_tensor_arg(),
        v.p * blocks * v.q,
        v.rows(BACKWARD_ROWS, blocks),
        v.flags(spec, shifted),
        [x.dtype.into(), gamma.dtype.into(), shift_t.dtype.into()],
    );
    finish(&partial, parts, v, blocks, Finish::Channels)
}

/// The backward pass's `[b, c]`-sized step (see `param_grads`) from the [`channel_sums`]
/// `sums`: `(m1, m2, d_gamma, d_beta)` and, for a shifted input (`shift` gives the gradient's
/// dtype), `d_shift`.
fn param_grads_of<R: CubeRuntime>(
    sums: &CubeTensor<R>,
    shift: Option<&CubeTensor<R>>,
    gamma: &CubeTensor<R>,
    rstd: &CubeTensor<R>,
    spec: &GroupNormSpec,
    values_per_group: usize,
) -> ([CubeTensor<R>; 4], Option<CubeTensor<R>>) {
    let dims = sums.meta.shape().clone();
    let (batch, channels) = (dims[1], dims[2]);
    let groups = spec.num_groups;
    let stats = || f32_buffer(gamma, Shape::new([batch, groups]));
    let new = |shape: Shape, like: &CubeTensor<R>| empty(gamma, shape, like.dtype);
    let (m1, m2) = (stats(), stats());
    let (d_gamma, d_beta) = (
        new(Shape::new([channels]), gamma),
        new(Shape::new([channels]), gamma),
    );
    let d_shift = shift.map(|s| new(Shape::new([batch, channels]), s));
    // Without a shift the kernel never writes its `d_shift` operand: `d_beta` stands in.
    let (d_shift_t, shifted) = shift_operand(d_shift.as_ref(), &d_beta);
    let threads = (batch * groups)
        .max(channels)
        .max(if shifted { batch * channels } else { 0 });
    let (count, dim) = elementwise(gamma, threads);
    param_grads::launch::<R>(
        &gamma.client,
        count,
        dim,
        sums.clone().into_tensor_arg(),
        gamma.clone().into_tensor_arg(),
        rstd.clone().into_tensor_arg(),
        m1.clone().into_tensor_arg(),
        m2.clone().into_tensor_arg(),
        d_gamma.clone().into_tensor_arg(),
        d_beta.clone().into_tensor_arg(),
        d_shift_t.clone().into_tensor_arg(),
        batch,
        channels,
        channels / groups,
        1.0 / values_per_group as f32,
        (values_per_group / (channels / groups)) as f32,
        shifted,
        [gamma.dtype.into(), d_shift_t.dtype.into()],
    );
    ([m1, m2, d_gamma, d_beta], d_shift)
}

/// The backward pass's input gradient (of `x`, or of `x` and `x_b` where `v` has two parts),
/// given `[gamma, beta, mean, rstd, dy, m1, m2]`, `m1`, `m2` the per-group means (`[b, g]`
/// f32) of `gamma dL/da` and `gamma dL/da x_hat`.
fn input_grad_of<R: CubeRuntime>(
    v: &View,
    x: CubeTensor<R>,
    x_b: Option<&CubeTensor<R>>,
    shift: Option<&CubeTensor<R>>,
    [gamma, beta, mean, rstd, dy, m1, m2]: [CubeTensor<R>; 7],
    spec: &GroupNormSpec,
) -> (CubeTensor<R>, Option<CubeTensor<R>>) {
    let pass = v.elementwise_pass(&x);
    let (shift_t, shifted) = shift_operand(shift, &gamma);
    let dtypes = [x.dtype.into(), gamma.dtype.into(), shift_t.dtype.into()];
    let like = |t: &CubeTensor<R>| empty(t, t.meta.shape().clone(), t.dtype);
    let dx = like(&x);
    // With one part the kernel never writes its second output: `dx` stands in.
    let dx_b = x_b.map(like);
    let second = x_b.unwrap_or(&x).clone();
    input_grad::launch::<R>(
        &x.client.clone(),
        pass.count,
        pass.dim,
        pass.vector,
        x.into_tensor_arg(),
        second.into_tensor_arg(),
        dy.into_tensor_arg(),
        affine_arg([shift_t, &gamma, &beta, &mean, &rstd]),
        m1.into_tensor_arg(),
        m2.into_tensor_arg(),
        dx.clone().into_tensor_arg(),
        dx_b.as_ref().unwrap_or(&dx).clone().into_tensor_arg(),
        v.rows(ELEMENTWISE_ROWS, pass.blocks),
        v.flags(spec, shifted),
        dtypes,
    );
    (dx, dx_b)
}
