//! The `#[cube]` helpers the kernels share: where a thread works, blocked f32 sums, the cube's
//! tree sum, and the SiLU's derivative.

use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;
use cubecl::prelude::*;

/// The operands of the affine map that every normalising kernel reads per group and channel:
/// the `[b, c]` shift (a stand-in where the input has none), gamma and beta `[c]`, and the
/// statistics `[b, g]` in f32. One kernel argument, so that each kernel and launch lists them
/// once.
#[derive(CubeType, CubeLaunch)]
pub(super) struct Affine<P: Float, S: Float> {
    pub shift: Tensor<S>,
    pub gamma: Tensor<P>,
    pub beta: Tensor<P>,
    pub mean: Tensor<f32>,
    pub rstd: Tensor<f32>,
}

/// [`Affine`]'s launch argument: the shift, gamma, beta, mean and rstd in that order.
pub(super) fn affine_arg<R: CubeRuntime, P: Float, S: Float>(
    [shift, gamma, beta, mean, rstd]: [&CubeTensor<R>; 5],
) -> AffineLaunch<P, S, R> {
    let arg = |t: &CubeTensor<R>| t.clone().into_tensor_arg();
    AffineLaunch::new(arg(shift), arg(gamma), arg(beta), arg(mean), arg(rstd))
}

/// The `[p, r, q]` view as the kernels take it: `blocks` blocks of `rows` rows per `p`, what
/// finds a column's group and channel (`group_div`, `c`: see [`group_and_channel`]), and the
/// columns of the input's first part (`split`; `q` for an input of one part).
#[derive(CubeType, CubeLaunch, Clone)]
pub(super) struct Rows {
    pub r: usize,
    pub q: usize,
    pub rows: usize,
    pub blocks: usize,
    pub group_div: usize,
    pub c: usize,
    pub split: usize,
}

/// The compile-time choices of the per-element kernels: the layout, whether a SiLU follows the
/// affine map, whether the input has a `[b, c]` shift added, whether it comes in two parts
/// joined along channels (channels-last only; see [`source_place`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Flags {
    pub channels_last: bool,
    pub silu: bool,
    pub shifted: bool,
    pub parts: bool,
}

/// Where vector column `vc` of batch item `p` of a channels-last input (`r` rows, `qv` vectors
/// wide) lies when the input comes as two parts joined along channels, the first `split`
/// vectors wide (`parts`; else it is one contiguous tensor): whether in the second part, the
/// index of its vector in row 0, and the part's row pitch in vectors. The join of the parts is
/// never made: a thread's column lies in one part for all its rows.
#[cube]
pub(super) fn source_place(
    p: usize,
    r: usize,
    qv: usize,
    vc: usize,
    split: usize,
    #[comptime] parts: bool,
) -> (bool, usize, usize) {
    let mut second = false;
    let mut pitch = qv;
    let mut col = vc;
    if parts {
        if vc >= split {
            second = true;
            pitch = qv - split;
            col = vc - split;
        } else {
            pitch = split;
        }
    }
    (second, p * r * pitch + col, pitch)
}

/// The vector at `idx` of the input's part that [`source_place`] named: `b`'s where `second`
/// (only with `parts`), else `a`'s.
#[cube]
pub(super) fn load<F: Float, N: Size>(
    a: &Tensor<Vector<F, N>>,
    b: &Tensor<Vector<F, N>>,
    idx: usize,
    second: bool,
    #[comptime] parts: bool,
) -> Vector<F, N> {
    if parts {
        if second {
            b[idx]
        } else {
            a[idx]
        }
    } else {
        a[idx]
    }
}

/// Where thread `pos` works in a `[p, r, q]` view cut into blocks of `rows` rows: the first
/// element of its column in that view (`base`; rows are `q` apart), its rows `start..end`, and
/// its `p` and column.
#[cube]
pub(super) fn row_block(
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

/// Where a thread of an elementwise pass over `len` vectors of `n` columns (the `[p, r, q / n]`
/// view of `v`) works: [`row_block`]'s index of its column's vector in row 0 (of the joined
/// view), rows, `p` and column (joined), `q / n`, and where its column lies in the input
/// ([`source_place`]'s whether in the second part, index in row 0 and row pitch). With `parts`
/// the threads of the first part's columns come first, then the second's, each over its own
/// `[p, r, width]` view, so that a warp reads and writes one part (with the joined view's
/// threads, half a warp in each part, the input gradient of two parts took 0.49 ms more a
/// bf16 training step than the two passes of one part it replaced on one H200; on another
/// both mappings took the same). A thread past the last block stops here.
#[cube]
pub(super) fn vector_row_block(
    len: usize,
    v: &Rows,
    #[comptime] n: usize,
    #[comptime] parts: bool,
) -> (usize, usize, usize, usize, usize, usize, bool, usize, usize) {
    let qv = v.q / n;
    let pos = ABSOLUTE_POS;
    let items = len / (v.r * qv);
    if pos >= v.blocks * qv * items {
        terminate!();
    }
    let mut second = false;
    let mut local = pos;
    let mut width = qv;
    let mut first_col = 0;
    if parts {
        let split = v.split / n;
        let threads_a = items * v.blocks * split;
        if pos >= threads_a {
            second = true;
            local = pos - threads_a;
            width = qv - split;
            first_col = split;
        } else {
            width = split;
        }
    }
    let (x_base, start, end, p, col) = row_block(local, v.r, width, v.rows, v.blocks);
    let joined = first_col + col;
    (
        p * v.r * qv + joined,
        start,
        end,
        p,
        joined,
        qv,
        second,
        x_base,
        width,
    )
}

/// The (batch, group) index and the channel of column `col` of row block `p`: the group is
/// `(p * q + col) / group_div` in both views, the channel `col` (channels-last) or `p % c`.
#[cube]
pub(super) fn group_and_channel(
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

/// Where the shift (`[b, c]`) of channel `ch` of row block `p` lies: `p * c + ch` channels-last
/// (`p` is the batch item), `p` channels-first (`p` is already `batch * c + ch`).
#[cube]
pub(super) fn shift_index(p: usize, ch: usize, c: usize, #[comptime] channels_last: bool) -> usize {
    let mut at = p;
    if channels_last {
        at = p * c + ch;
    }
    at
}

/// Per lane: `(mean less shift, rstd, gamma, beta)` (see [`lane_params`]).
pub(super) type LaneParams<N> = (
    Vector<f32, N>,
    Vector<f32, N>,
    Vector<f32, N>,
    Vector<f32, N>,
);

/// What a thread of the backward passes needs per lane of its vector of columns (`first_col +
/// i`), read once for all its rows: the group's mean less the lane's shift where `shifted` (so
/// that `x - mu` is `x + shift - mean`), the group's rstd, and the channel's gamma and beta.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn lane_params<P: Float, S: Float, N: Size>(
    affine: &Affine<P, S>,
    p: usize,
    first_col: usize,
    q: usize,
    group_div: usize,
    c: usize,
    #[comptime] channels_last: bool,
    #[comptime] shifted: bool,
) -> LaneParams<N> {
    let mut mu = Vector::<f32, N>::empty();
    let mut rs = Vector::<f32, N>::empty();
    let mut ga = Vector::<f32, N>::empty();
    let mut be = Vector::<f32, N>::empty();
    #[unroll]
    for i in 0..mu.vector_size() {
        let (g, ch) = group_and_channel(p, q, first_col + i, group_div, c, channels_last);
        mu[i] = affine.mean[g];
        if shifted {
            mu[i] =
                affine.mean[g] - f32::cast_from(affine.shift[shift_index(p, ch, c, channels_last)]);
        }
        rs[i] = affine.rstd[g];
        ga[i] = f32::cast_from(affine.gamma[ch]);
        be[i] = f32::cast_from(affine.beta[ch]);
    }
    (mu, rs, ga, be)
}

/// Where the `n` partial sums of output `o` lie in `[p, blocks, q]` partials: from
/// `(o / per_batch) * batch_stride + (o % per_batch) * group_stride`, in runs of `run` values
/// `run_stride` apart; a finishing thread adds `chunks` chunks of them.
#[derive(CubeType, CubeLaunch, Clone)]
pub(super) struct Partials {
    pub per_batch: usize,
    pub batch_stride: usize,
    pub group_stride: usize,
    pub run: usize,
    pub run_stride: usize,
    pub n: usize,
    pub chunks: usize,
}

/// This unit's share of the `n` partial sums `input[base + (k / run) * run_stride + k % run]`
/// of one output (every `threads`-th `k`; see [`Partials`]), added in `chunks` chunks of `rows`
/// in f32.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn chunked_sum(
    input: &Tensor<f32>,
    base: usize,
    a: &Partials,
    #[comptime] threads: usize,
    #[comptime] rows: usize,
) -> f32 {
    let t = UNIT_POS as usize;
    let mut total = 0.0f32;
    for c in 0..a.chunks {
        let mut acc = 0.0f32;
        for j in 0..rows {
            let k = (c * rows + j) * threads + t;
            if k < a.n {
                acc += input[base + (k / a.run) * a.run_stride + k % a.run];
            }
        }
        total += acc;
    }
    total
}

/// The sum of `value` over the cube (a tree in `shared`, one slot per unit); every unit gets it.
#[cube]
pub(crate) fn cube_total(shared: &mut SharedMemory<f32>, value: f32) -> f32 {
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

/// The SiLU's sigmoid. The kernels that take it run with `fast_math = FastMath::all()`, whose
/// only effect there is the exponential and the division as the GPU's approximate instructions
/// (`__expf`, `__fdividef` on CUDA: a few ulp): IEEE `expf` and division were most of the
/// backward's per-value work (H200, bf16 training micro-step: the
/// backward sums took 3.6 ms where their reads would take about 1.5 ms at 4 TB/s, by arithmetic). Where `exp(-a)` overflows
/// (a < -88) the division still gives 0, the sigmoid's limit.
#[cube]
pub(super) fn sigmoid(a: f32) -> f32 {
    1.0 / (1.0 + f32::exp(-a))
}

/// [`xhat_and_da`] of lane `i` of the vectors `xv`, `dyv`, with the lanes' [`LaneParams`]:
/// what both vectorised backward kernels compute per element.
#[cube]
pub(super) fn lane_xhat_and_da<F: Float, N: Size>(
    xv: Vector<F, N>,
    dyv: Vector<F, N>,
    lanes: LaneParams<N>,
    i: usize,
    #[comptime] silu: bool,
) -> (f32, f32) {
    let (mu, rs, ga, be) = lanes;
    let (x, dy) = (f32::cast_from(xv[i]), f32::cast_from(dyv[i]));
    xhat_and_da(x, dy, ga[i], be[i], mu[i], rs[i], silu)
}

/// `x_hat` and `dL/da` (a = gamma x_hat + beta, the SiLU input) of one element.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn xhat_and_da(
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
