//! The agreement check of a backend's upsampling and its backward against the plain-op twins
//! (what `medddpm check-kernels` and the tests run).

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use crate::agreement::rel_l2;
use crate::compute::Layout;
use crate::dtype::cast_to;
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
    use burn::backend::Flex;
    use burn::tensor::{DType, Distribution};
    let cpu = Default::default();
    Flex::seed(&cpu, seed);
    let [b, c, d, h, w] = size;
    let (small, big) = match layout {
        Layout::Ncdhw => ([b, c, d, h, w], [b, c, 2 * d, 2 * h, 2 * w]),
        Layout::Ndhwc => ([b, d, h, w, c], [b, 2 * d, 2 * h, 2 * w, c]),
    };
    let round = |t: Tensor<Flex, 5>| cast_to(cast_to(t, dtype), DType::F32);
    let x = round(Tensor::<Flex, 5>::random(
        small,
        Distribution::Normal(0.0, 1.0),
        &cpu,
    ));
    let dy = round(Tensor::<Flex, 5>::random(
        big,
        Distribution::Normal(0.0, 1.0),
        &cpu,
    ));
    let want_y = upsample_trilinear_x2_in(x.clone(), layout);
    let want_dx = upsample_trilinear_x2_backward_in(dy.clone(), layout);
    let on = |t: &Tensor<Flex, 5>| {
        float(cast_to(
            Tensor::<B, 5>::from_data(t.to_data(), device),
            dtype,
        ))
    };
    let back = |t| {
        let t: Tensor<B, 5> = tensor(t);
        Tensor::<Flex, 5>::from_data(cast_to(t, DType::F32).to_data(), &cpu)
    };
    let y = back(B::upsample_trilinear_x2(on(&x), layout));
    let dx = back(B::upsample_trilinear_x2_backward(on(&dy), layout));
    [rel_l2(y, want_y), rel_l2(dx, want_dx)]
}
