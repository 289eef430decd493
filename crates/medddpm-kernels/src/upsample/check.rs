//! The agreement check of a backend's upsampling and its backward against the plain-op twins
//! (what `medddpm check-kernels` and the tests run).

use crate::agreement::{draw_rounded, on_cpu, on_device, rel_l2, seeded_cpu};
use crate::compute::Layout;
use crate::extension::KernelBackend;
use crate::primitive::{float, tensor};
use crate::reference::upsample::{upsample_trilinear_x2_backward_in, upsample_trilinear_x2_in};

/// Relative L2 differences of backend `B`'s upsampling and its backward (as
/// [`crate::KernelBackend`] computes them) against the plain-op twins in f32 on the CPU, for a
/// `[b, c, d, h, w]` volume in `layout` with values in `dtype`: `[forward, backward]`. The
/// operands are drawn on the CPU and rounded to `dtype` first.
pub fn engine_vs_reference<B: KernelBackend>(
    device: &B::Device,
    size: [usize; 5],
    layout: Layout,
    dtype: burn::tensor::DType,
    seed: u64,
) -> [f64; 2] {
    use burn::tensor::Distribution::Normal;
    let cpu = seeded_cpu(seed);
    let [b, c, d, h, w] = size;
    let (small, big) = match layout {
        Layout::Ncdhw => ([b, c, d, h, w], [b, c, 2 * d, 2 * h, 2 * w]),
        Layout::Ndhwc => ([b, d, h, w, c], [b, 2 * d, 2 * h, 2 * w, c]),
    };
    let x = draw_rounded(small, Normal(0.0, 1.0), dtype, &cpu);
    let dy = draw_rounded(big, Normal(0.0, 1.0), dtype, &cpu);
    let want_y = upsample_trilinear_x2_in(x.clone(), layout);
    let want_dx = upsample_trilinear_x2_backward_in(dy.clone(), layout);
    let on = |t| float(on_device::<B, 5>(t, device, dtype));
    let back = |t| on_cpu::<B, 5>(tensor(t));
    let y = back(B::upsample_trilinear_x2(on(&x), layout));
    let dx = back(B::upsample_trilinear_x2_backward(on(&dy), layout));
    [rel_l2(y, want_y), rel_l2(dx, want_dx)]
}
