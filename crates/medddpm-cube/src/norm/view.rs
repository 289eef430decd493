//! How an activation is viewed for the kernels (the `[p, r, q]` view of the module's
//! introduction) and what the elementwise passes take per thread.

use burn::tensor::{DType, Shape};
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;
use cubecl::{CubeCount, CubeDim};

use super::parts::{Flags, RowsLaunch};
use crate::compute::Layout;
use crate::reference::norm::GroupNormSpec;
use crate::{elementwise, empty};

/// Values one thread normalises (or differentiates) in the elementwise passes.
pub(super) const ELEMENTWISE_ROWS: usize = 16;

/// How an activation is viewed for the reductions.
#[derive(Debug, Clone, Copy)]
pub(super) struct View {
    pub batch: usize,
    pub channels: usize,
    pub groups: usize,
    /// Voxels per channel.
    pub spatial: usize,
    pub channels_last: bool,
    /// `[p, r, q]` of the reduced view.
    pub p: usize,
    pub r: usize,
    pub q: usize,
    /// The channels of the first part, where the input comes as two parts joined along
    /// channels (channels-last; [`View::parts`]).
    pub split: Option<usize>,
}

impl View {
    /// The view of an activation of `shape` normalised as `spec` says.
    pub(super) fn new(shape: &Shape, spec: &GroupNormSpec) -> Self {
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
            split: None,
        }
    }

    /// The view of the join along channels of a channels-last `a` and `b` (`b_channels`
    /// channels) normalised as `spec` says, without the join: the kernels read each column
    /// from its part.
    pub(super) fn parts(a: &Shape, b_channels: usize, spec: &GroupNormSpec) -> Self {
        let mut joined = a.clone();
        let last = joined.num_dims() - 1;
        let first = joined[last];
        joined[last] = first + b_channels;
        View {
            split: Some(first),
            ..View::new(&joined, spec)
        }
    }

    /// Channels per group.
    pub(super) fn cpg(&self) -> usize {
        self.channels / self.groups
    }

    /// Divides `p * q + col` down to the (batch, group) index.
    pub(super) fn group_div(&self) -> usize {
        if self.channels_last {
            self.cpg()
        } else {
            self.cpg() * self.q
        }
    }

    /// The view as the per-element kernels take it, in blocks of `rows` rows, `blocks` per `p`.
    pub(super) fn rows<R: CubeRuntime>(&self, rows: usize, blocks: usize) -> RowsLaunch<R> {
        RowsLaunch::new(
            self.r,
            self.q,
            rows,
            blocks,
            self.group_div(),
            self.channels,
            self.split.unwrap_or(self.q),
        )
    }

    /// The per-element kernels' compile-time choices for `spec`, the input `shifted` or not.
    pub(super) fn flags(&self, spec: &GroupNormSpec, shifted: bool) -> Flags {
        Flags {
            channels_last: self.channels_last,
            silu: spec.silu,
            shifted,
            parts: self.split.is_some(),
        }
    }

    /// Blocks of `rows` rows that cover `r` rows.
    pub(super) fn blocks(r: usize, rows: usize) -> usize {
        r.div_ceil(rows)
    }

    /// Channels one thread of the elementwise passes handles side by side (one vector load per
    /// row): channels-last, the widest vector that divides the channel count; channels-first, 1
    /// (a column is one channel's slice there). The scalar passes ran at 30-50 % of the H200's
    /// bandwidth (a GPU trace).
    pub(super) fn vector_size<R: CubeRuntime>(&self, t: &CubeTensor<R>) -> usize {
        if !self.channels_last {
            return 1;
        }
        crate::widest_vector(t, &[self.q, self.split.unwrap_or(self.q)])
    }

    /// The normalising pass's and the input gradient's set-up for `x` (the first part where
    /// there are two): a thread takes [`ELEMENTWISE_ROWS`] rows of a vector of columns.
    pub(super) fn elementwise_pass<R: CubeRuntime>(&self, x: &CubeTensor<R>) -> Pass {
        let blocks = self.r.div_ceil(ELEMENTWISE_ROWS);
        let vector = self.vector_size(x);
        let (count, dim) = elementwise(x, self.p * blocks * self.q / vector);
        Pass {
            blocks,
            vector,
            count,
            dim,
        }
    }

    /// A new tensor like `x` (the first part where there are two) of the view's whole
    /// (joined) shape: the normalisation's output.
    pub(super) fn output<R: CubeRuntime>(&self, x: &CubeTensor<R>) -> CubeTensor<R> {
        let mut shape = x.meta.shape().clone();
        let channel_dim = if self.channels_last {
            shape.num_dims() - 1
        } else {
            1
        };
        shape[channel_dim] = self.channels;
        empty(x, shape, x.dtype)
    }

    /// Values one group's statistics are taken over (per batch item).
    pub(super) fn values_per_group(&self) -> usize {
        self.spatial * self.cpg()
    }
}

/// An elementwise pass ([`View::elementwise_pass`]): its blocks of rows, its vector width and
/// its launch's geometry.
pub(super) struct Pass {
    pub blocks: usize,
    pub vector: usize,
    pub count: CubeCount,
    pub dim: CubeDim,
}

/// A new contiguous f32 buffer of `shape` on `like`'s device.
pub(super) fn f32_buffer<R: CubeRuntime>(like: &CubeTensor<R>, shape: Shape) -> CubeTensor<R> {
    empty(like, shape, DType::F32)
}

/// The shift operand of the kernels and their comptime `shifted`: the `[b, c]` shift, or where
/// there is none `stand_in` (any small tensor; the kernels then never read it).
pub(super) fn shift_operand<'a, R: CubeRuntime>(
    shift: Option<&'a CubeTensor<R>>,
    stand_in: &'a CubeTensor<R>,
) -> (&'a CubeTensor<R>, bool) {
    match shift {
        Some(s) => (s, true),
        None => (stand_in, false),
    }
}
