//! GroupNorm (+ SiLU) forward and backward as CubeCL kernels: three launches forward (per block
//! of rows the sum and the centred sum of squares, per group the mean and variance from them,
//! one normalising write) and four backward (one pass of sums, one finishing launch for both
//! sums, one `[b, c]`-sized launch, one write). Statistics and sums are f32 whatever the
//! activation dtype; launches are few because each costs host time on the order of a small
//! kernel's run time.
//!
//! Every reduction is blocked, so no f32 running sum spans more than a few hundred terms (what
//! keeps the statistics of a two-million-voxel group at f32 rounding; see [`crate::norm`]).
//! Channels-last, a cube sums a tile of rows (`tiles`: vectors of channels per thread, several
//! loads in flight, the threads' sums added in shared memory) into one partial per channel;
//! channels-first, a thread adds [`FORWARD_ROWS`] or [`BACKWARD_ROWS`] values of one column of a
//! `[p, r, q]` view (neighbouring threads read neighbouring addresses). One cube per statistic
//! then adds its partial sums in chunks of `FINISH_ROWS` before a tree over the cube. The
//! variance combines per-block centred sums of squares (Chan et al.'s parallel formula), as
//! stable as a second pass about the group's mean.
//!
//! The reduced view is `[b, S, c]` for channels-last activations (columns are channels) and
//! `[b * c, S / q, q]` with `q` a power of two dividing `S` for channels-first ones (columns
//! are `q` interleaved slices of one channel).
//!
//! Channels-last, the input may come as two parts joined along channels (the decoder's
//! [current, skip]): the kernels read each column from its part and write the joined output
//! (forward) or each part's gradient (backward), so the join of the inputs is never made, and
//! they compute what they compute of the join (the same views and tiles).
//!
//! Its parts: `view` (the `[p, r, q]` view and the launch geometry), `parts` (the `#[cube]`
//! helpers the kernels share), `tiles` (the channels-last first level of both reductions),
//! `finish` (the second level), `forward` and `backward` (each pass's kernels and their
//! launches), `fused` (the passes as burn-fusion operations).

mod backward;
mod finish;
mod forward;
pub(crate) mod fused;
mod parts;
mod tiles;
mod view;

pub use backward::{backward, NormGrads, BACKWARD_ROWS};
pub use forward::{forward, FORWARD_ROWS};
pub(crate) use parts::cube_total;

use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;

use crate::compute::Layout;
use crate::reference::norm::{GroupNormSpec, NormInput};

/// The last axis's length of `t` (the channels, channels-last).
fn last_dim<R: CubeRuntime>(t: &CubeTensor<R>) -> usize {
    let shape = t.meta.shape();
    shape[shape.num_dims() - 1]
}

/// An input as the passes take it: contiguous, its view, the second part where the kernels
/// read two, the shift where it has one; of two parts whose joined rows are too wide for the
/// channels-last tiles, their join, with the first part's channels (`joined`) to split its
/// gradient at.
struct Prepared<R: CubeRuntime> {
    x: CubeTensor<R>,
    x_b: Option<CubeTensor<R>>,
    shift: Option<CubeTensor<R>>,
    view: view::View,
    joined: Option<usize>,
}

/// `input` as the passes take it ([`Prepared`]).
fn prepare<R: CubeRuntime>(input: NormInput<CubeTensor<R>>, spec: &GroupNormSpec) -> Prepared<R> {
    let one = |x: CubeTensor<R>, shift, joined| {
        let x = into_contiguous(x);
        let view = view::View::new(&x.meta.shape().clone(), spec);
        Prepared {
            x,
            x_b: None,
            shift,
            view,
            joined,
        }
    };
    match input {
        NormInput::Shifted(x, shift) => one(x, shift.map(into_contiguous), None),
        NormInput::Parts(a, b) => {
            assert_eq!(
                spec.layout,
                Layout::Ndhwc,
                "two parts of a channels-first input"
            );
            let (a, b) = (into_contiguous(a), into_contiguous(b));
            let view = view::View::parts(a.meta.shape(), last_dim(&b), spec);
            if tiles::Tiles::new(&view, &a).is_none() {
                let first = last_dim(&a);
                return one(crate::channels::join(a, b), None, Some(first));
            }
            Prepared {
                x: a,
                x_b: Some(b),
                shift: None,
                view,
                joined: None,
            }
        }
    }
}
