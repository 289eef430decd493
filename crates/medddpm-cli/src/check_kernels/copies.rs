//! The copy-like kernels' cases of `medddpm check-kernels`: trilinear upsampling, and the
//! channel join and split of the decoder's skip connections and the channel padding.

use medddpm_backend::{KernelAutodiffBackend, Layout};
use serde::Serialize;

use super::{norm_tolerance, verdict, within, Cases};

/// One upsampling case's result.
#[derive(Debug, Serialize)]
pub(super) struct UpsampleRow {
    size: [usize; 5],
    layout: String,
    forward: f64,
    backward: f64,
    tolerance: f64,
    pub(super) pass: bool,
}

/// One channel join, split and padding case's result (exact copies: all must be 0).
#[derive(Debug, Serialize)]
pub(super) struct ChannelRow {
    rows: usize,
    channels: [usize; 2],
    join: f64,
    split: f64,
    /// The first part padded with zeros to both parts' channels.
    pad: f64,
    pub(super) pass: bool,
}

/// Trilinear x2 upsampling against its plain-op twin, both layouts.
pub(super) fn upsample_rows<B: KernelAutodiffBackend>(cases: &Cases<B>) -> Vec<UpsampleRow> {
    let &Cases { device, env, scale } = cases;
    // Upsampling: the same tolerance as GroupNorm (f32 arithmetic; bf16 output rounding).
    let tol = norm_tolerance(env.precision);
    let mut upsample_rows = Vec::new();
    for layout in Layout::ALL {
        for (i, size) in [[1, 64, 4, 4, 4], [2, 3, 5, 1, 3], [1, 8, 7, 6, 5]]
            .into_iter()
            .enumerate()
        {
            let size = [
                size[0],
                size[1],
                size[2] * scale,
                size[3] * scale,
                size[4] * scale,
            ];
            let [f, b] = medddpm_kernels::upsample::engine_vs_reference::<B::InnerBackend>(
                device,
                size,
                layout,
                env.compute_dtype(),
                200 + i as u64,
            );
            let pass = within(&[f, b], tol);
            eprintln!(
                "{layout} upsample x2 {size:?}: forward {f:.2e}, backward {b:.2e} {}",
                verdict(pass)
            );
            upsample_rows.push(UpsampleRow {
                size,
                layout: layout.to_string(),
                forward: f,
                backward: b,
                tolerance: tol,
                pass,
            });
        }
    }
    upsample_rows
}

/// The join of two channels-last activations, its split and the padding against burn's `cat`,
/// slices and zeros, in the precision's dtype: channel counts that allow vectors of 8 and of 1.
pub(super) fn channel_rows<B: KernelAutodiffBackend>(cases: &Cases<B>) -> Vec<ChannelRow> {
    let &Cases { device, env, .. } = cases;
    let mut rows = Vec::new();
    for (i, (n, a, b)) in [(4096, 64, 64), (999, 3, 5), (513, 192, 128)]
        .into_iter()
        .enumerate()
    {
        let [join, split, pad] = medddpm_kernels::channels::engine_vs_reference::<B::InnerBackend>(
            device,
            n,
            a,
            b,
            env.compute_dtype(),
            300 + i as u64,
        );
        let pass = join == 0.0 && split == 0.0 && pad == 0.0;
        eprintln!(
            "join {a} + {b} channels over {n} rows: join {join:.2e}, split {split:.2e}, pad {pad:.2e} {}",
            if pass { "ok" } else { "NOT EXACT" }
        );
        rows.push(ChannelRow {
            rows: n,
            channels: [a, b],
            join,
            split,
            pad,
            pass,
        });
    }
    rows
}
