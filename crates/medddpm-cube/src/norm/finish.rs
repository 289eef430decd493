//! The second level of the reductions: where each output's partial sums lie in the first
//! level's array, and the kernel (one cube per output) that adds them.

use burn::tensor::Shape;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;
use cubecl::prelude::*;
use cubecl::{CubeCount, CubeDim};

use super::parts::{chunked_sum, cube_total, Partials, PartialsLaunch};
use super::view::{f32_buffer, View};

/// Partial sums a finishing thread adds before adding that to its total.
pub(super) const FINISH_ROWS: usize = 64;

/// Threads of one [`group_sums`] cube.
pub(super) const FINISH_THREADS: usize = 256;

/// The outputs a [`group_sums`] launch reduces the partial sums to.
#[derive(Debug, Clone, Copy)]
pub(super) enum Finish {
    /// One per (batch, group).
    Groups,
    /// One per (batch, channel).
    Channels,
}

/// Where the partial sums of one output lie in the `[p, blocks, q]` partials of `v` (see
/// [`Partials`]), and the outputs per batch item. Channels-last partials `[b, blocks, c]` hold
/// an output's values as runs of `width` channels, one run per block; channels-first ones
/// `[b * c, blocks, q]` hold them contiguously.
pub(super) fn addressing<R: CubeRuntime>(
    v: &View,
    blocks: usize,
    per: Finish,
) -> (PartialsLaunch<R>, usize) {
    let width = match per {
        Finish::Groups => v.cpg(),
        Finish::Channels => 1,
    };
    let per_batch = v.channels / width;
    let [batch_stride, group_stride, run, run_stride, n] = if v.channels_last {
        [blocks * v.q, width, width, v.q, blocks * width]
    } else {
        let n = width * blocks * v.q;
        [v.channels * blocks * v.q, n, n, n, n]
    };
    let chunks = n.div_ceil(FINISH_THREADS * FINISH_ROWS);
    let partials = PartialsLaunch::new(
        per_batch,
        batch_stride,
        group_stride,
        run,
        run_stride,
        n,
        chunks,
    );
    (partials, per_batch)
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
    a: Partials,
    #[comptime] threads: usize,
    #[comptime] rows: usize,
) {
    let part = CUBE_POS / outputs_per_part;
    let o = CUBE_POS % outputs_per_part;
    let t = UNIT_POS as usize;
    let base = part * part_stride
        + (o / a.per_batch) * a.batch_stride
        + (o % a.per_batch) * a.group_stride;
    let total = chunked_sum(input, base, &a, threads, rows);
    let mut shared = SharedMemory::<f32>::new(threads);
    let sum = cube_total(&mut shared, total);
    if t == 0 {
        output[CUBE_POS] = sum;
    }
}

/// [`group_sums`] over `parts` consecutive `[p, blocks, q]` arrays of partial sums of `v`:
/// `[parts, b, groups or channels]`.
pub(super) fn finish<R: CubeRuntime>(
    partial: &CubeTensor<R>,
    parts: usize,
    v: &View,
    blocks: usize,
    per: Finish,
) -> CubeTensor<R> {
    let (a, per_batch) = addressing(v, blocks, per);
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
        a,
        FINISH_THREADS,
        FINISH_ROWS,
    );
    out
}
