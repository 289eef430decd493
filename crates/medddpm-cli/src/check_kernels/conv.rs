//! The convolution cases of `medddpm check-kernels`: the engine against the f32 CPU
//! convolution, forward and both gradients, and the batch cases through the batch-chunk
//! rewrites.

use medddpm_backend::{KernelAutodiffBackend, Layout};
use medddpm_kernels::conv::{batch_chunks_vs_reference, engine_vs_reference, ConvCase};
use serde::Serialize;

use super::{tolerance, verdict, within, Cases};

/// One case's result.
#[derive(Debug, Serialize)]
pub(super) struct Row {
    case: ConvCase,
    layout: String,
    /// Examples per engine call where the batch went through the batch-chunk rewrites.
    batch_chunk: Option<usize>,
    forward: f64,
    data_grad: f64,
    weight_grad: f64,
    tolerance: f64,
    pub(super) pass: bool,
}

/// The convolution engine against the f32 CPU convolution, both layouts.
pub(super) fn conv_rows<B: KernelAutodiffBackend>(cases: &Cases<B>) -> Vec<Row> {
    let &Cases { device, env, scale } = cases;
    let mut rows = Vec::new();
    let tol = tolerance(env.precision);
    for layout in Layout::ALL {
        let compute = medddpm_kernels::Compute {
            layout,
            ..env.compute()
        };
        let standard = ConvCase::standard(scale);
        // The batch cases once more one example per call, as the cuDNN engine runs a batch
        // past what cuDNN indexes (views at an offset, the parts joined, weight gradients summed).
        let chunked = standard
            .iter()
            .filter(|c| c.batch > 1)
            .map(|&c| (c, Some(1)));
        let cases: Vec<_> = standard.iter().map(|&c| (c, None)).chain(chunked).collect();
        for (i, (case, batch_chunk)) in cases.into_iter().enumerate() {
            let [f, d, w] = match batch_chunk {
                None => engine_vs_reference::<B::InnerBackend>(device, case, compute, i as u64, 3),
                Some(per_call) => batch_chunks_vs_reference::<B::InnerBackend>(
                    device, case, compute, i as u64, per_call,
                ),
            };
            let pass = within(&[f, d, w], tol);
            let chunks = batch_chunk.map_or(String::new(), |p| format!(" ({p} a call)"));
            eprintln!(
                    "{layout} {:>3}->{:<3} k{} s{} {:?} b{}{chunks}: forward {f:.2e}, data grad {d:.2e}, weight grad {w:.2e} {}",
                    case.c_in,
                    case.c_out,
                    case.kernel,
                    case.stride,
                    case.size,
                    case.batch,
                    verdict(pass)
                );
            rows.push(Row {
                case,
                layout: layout.to_string(),
                batch_chunk,
                forward: f,
                data_grad: d,
                weight_grad: w,
                tolerance: tol,
                pass,
            });
        }
    }
    rows
}
