//! How far a backend's output is from its reference twin's, as the agreement checks measure it.

use burn::backend::Flex;
use burn::tensor::{backend::Backend, DType, Device, Distribution, Tensor};

use crate::dtype::cast_to;

/// The CPU device, its generator seeded: where a check draws the operands.
pub fn seeded_cpu(seed: u64) -> Device<Flex> {
    let cpu = Default::default();
    Flex::seed(&cpu, seed);
    cpu
}

/// Values drawn from `dist` on the CPU and rounded to `dtype` (kept in f32), so that the
/// engine in `dtype` and the f32 twin see the same operands.
pub fn draw_rounded<const D: usize>(
    dims: [usize; D],
    dist: Distribution,
    dtype: DType,
    cpu: &Device<Flex>,
) -> Tensor<Flex, D> {
    let t = Tensor::<Flex, D>::random(dims, dist, cpu);
    cast_to(cast_to(t, dtype), DType::F32)
}

/// `t`'s values on `device`, in `dtype`.
pub fn on_device<B: Backend, const D: usize>(
    t: &Tensor<Flex, D>,
    device: &B::Device,
    dtype: DType,
) -> Tensor<B, D> {
    cast_to(Tensor::<B, D>::from_data(t.to_data(), device), dtype)
}

/// `t`'s values in f32 on the CPU, to compare with the twin's.
pub fn on_cpu<B: Backend, const D: usize>(t: Tensor<B, D>) -> Tensor<Flex, D> {
    Tensor::from_data(cast_to(t, DType::F32).to_data(), &Default::default())
}

/// The larger of two errors, NaN counting as infinite (`f64::max` would drop it).
pub fn worse(a: f64, b: f64) -> f64 {
    let b = if b.is_nan() { f64::INFINITY } else { b };
    a.max(b)
}

/// `||a - b|| / ||b||`, in f64 on the host.
pub fn rel_l2<B: Backend, const D: usize>(a: Tensor<B, D>, b: Tensor<B, D>) -> f64 {
    assert_eq!(a.dims(), b.dims(), "shapes differ");
    let f = |t: Tensor<B, D>| -> Vec<f32> {
        t.cast(burn::tensor::DType::F32)
            .into_data()
            .convert::<f32>()
            .to_vec::<f32>()
            .expect("f32 data")
    };
    let (a, b) = (f(a), f(b));
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(&b) {
        num += ((x - y) as f64).powi(2);
        den += (*y as f64).powi(2);
    }
    if den == 0.0 {
        num.sqrt()
    } else {
        (num / den).sqrt()
    }
}
