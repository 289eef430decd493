//! Gradients of several micro-batches summed in f32 for one optimizer step, as one backend
//! operation: [`crate::KernelBackend::sum_f32`], with [`sum_f32_primitive`] (a cast of each
//! operand and an addition, per tensor) as its plain-op twin; and their squared norm for the
//! log ([`crate::KernelBackend::squared_norm_f32`], checked by [`squared_norm_vs_reference`]).
//!
//! Per tensor, the casts and the addition were burn operations for each of the U-Net's 246
//! parameter tensors and micro-batch: 738 operations an optimizer step with two micro-batches,
//! each costing the host about what a kernel launch does.

use burn::tensor::{DType, Tensor, TensorPrimitive};

use burn::tensor::Distribution;

use crate::agreement::{draw_rounded, on_cpu, on_device, rel_l2, seeded_cpu};
use crate::extension::KernelBackend;

/// The worst relative L2 difference of backend `B`'s [`crate::KernelBackend::sum_f32`] from
/// the twin on the CPU, for the two sums a trainer makes over the tensors of
/// [`super::case_lengths`]`(len)`, each of them one call: the first two micro-batches' gradients
/// (both in `grads`), then the running f32 sum and a third micro-batch's. The operands are bf16
/// values between 0.5 and 4, which f16 holds exactly too and whose sums f32 holds exactly, so
/// anything but 0 is a wrong kernel.
pub fn engine_vs_reference<B: KernelBackend>(
    device: &B::Device,
    len: usize,
    seed: u64,
    grads: DType,
) -> f64 {
    let cpu = seeded_cpu(seed);
    let draw = |n: usize, dtype: DType| {
        let t = draw_rounded([n], Distribution::Uniform(0.5, 4.0), DType::BF16, &cpu);
        let on = on_device::<B, 1>(&t, device, dtype);
        (t, on)
    };
    let lengths = super::case_lengths(len);
    let mut worst: f64 = 0.0;
    for acc in [grads, DType::F32] {
        let mut want = Vec::with_capacity(lengths.len());
        let mut pairs = Vec::with_capacity(lengths.len());
        for &n in &lengths {
            let (a, a_on) = draw(n, acc);
            let (b, b_on) = draw(n, grads);
            want.push(a + b);
            pairs.push([
                a_on.into_primitive().tensor(),
                b_on.into_primitive().tensor(),
            ]);
        }
        for (g, w) in B::sum_f32(pairs).into_iter().zip(want) {
            let g = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(g));
            if g.dtype() != DType::F32 {
                return f64::INFINITY;
            }
            let g = on_cpu(g);
            worst = crate::agreement::worse(worst, rel_l2(g, w));
        }
    }
    worst
}

/// The relative difference of backend `B`'s [`crate::KernelBackend::squared_norm_f32`] over
/// the tensors of [`super::case_lengths`]`(len)` in `dtype` from the exact sum (f64 on the
/// CPU). The values are bf16 numbers between -4 and 4, whose squares f32 holds exactly: what
/// is left is the f32 additions' rounding, about 1e-7 for any order of adding.
pub fn squared_norm_vs_reference<B: KernelBackend>(
    device: &B::Device,
    len: usize,
    seed: u64,
    dtype: DType,
) -> f64 {
    let cpu = seeded_cpu(seed);
    let mut exact = 0.0f64;
    let tensors = super::case_lengths(len)
        .into_iter()
        .map(|n| {
            let t = draw_rounded([n], Distribution::Uniform(-4.0, 4.0), DType::BF16, &cpu);
            let values: Vec<f32> = t.to_data().to_vec().unwrap();
            exact += values
                .iter()
                .map(|&v| f64::from(v) * f64::from(v))
                .sum::<f64>();
            on_device::<B, 1>(&t, device, dtype)
                .into_primitive()
                .tensor()
        })
        .collect();
    let got = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(B::squared_norm_f32(tensors)));
    if got.dtype() != DType::F32 || got.dims() != [1] {
        return f64::INFINITY;
    }
    let got: Vec<f32> = got.to_data().to_vec().unwrap();
    (f64::from(got[0]) - exact).abs() / exact
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::cast_to;
    use crate::reference::sum::sum_f32_primitive;
    use burn::backend::Flex;
    use burn::tensor::TensorPrimitive;

    #[test]
    fn the_twin_sums_in_f32_whatever_the_operands() {
        let device = Default::default();
        let a = Tensor::<Flex, 2>::from_floats([[1.0, 2.5], [3.0, -4.0]], &device);
        let b = cast_to(
            Tensor::<Flex, 2>::from_floats([[0.5, 0.25], [-3.0, 1.0]], &device),
            DType::BF16,
        );
        let out = sum_f32_primitive::<Flex>(vec![[
            a.into_primitive().tensor(),
            b.into_primitive().tensor(),
        ]]);
        let sum = Tensor::<Flex, 2>::from_primitive(TensorPrimitive::Float(
            out.into_iter().next().unwrap(),
        ));
        assert_eq!(sum.dtype(), DType::F32);
        assert_eq!(sum.dims(), [2, 2]);
        assert_eq!(
            sum.into_data().to_vec::<f32>().unwrap(),
            vec![1.5, 2.75, 0.0, -3.0]
        );
        for grads in [DType::BF16, DType::F32] {
            assert_eq!(engine_vs_reference::<Flex>(&device, 300, 5, grads), 0.0);
        }
    }

    #[test]
    fn the_squared_norm_twin_is_the_sum_of_every_square() {
        let device = Default::default();
        let a = Tensor::<Flex, 2>::from_floats([[1.0, 2.5], [3.0, -4.0]], &device);
        let b = cast_to(
            Tensor::<Flex, 1>::from_floats([0.5, -2.0], &device),
            DType::BF16,
        );
        let out = crate::reference::sum::squared_norm_f32_primitive::<Flex>(vec![
            a.into_primitive().tensor(),
            b.into_primitive().tensor(),
        ]);
        let norm = Tensor::<Flex, 1>::from_primitive(TensorPrimitive::Float(out));
        assert_eq!(norm.dtype(), DType::F32);
        assert_eq!(norm.into_data().to_vec::<f32>().unwrap(), vec![36.5]);
        for dtype in [DType::BF16, DType::F32] {
            assert!(squared_norm_vs_reference::<Flex>(&device, 300, 5, dtype) < 1e-6);
        }
    }
}
