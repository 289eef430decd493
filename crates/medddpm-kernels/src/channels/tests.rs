//! The join and its backward on the CPU: the twins, and gradients through autodiff against
//! burn's `cat`.

use super::*;
use burn::backend::{Autodiff, Flex};
use burn::tensor::{Distribution, Tolerance};

#[test]
fn join_and_split_match_burns_cat_and_narrow() {
    let device = Default::default();
    let a = Tensor::<Flex, 5>::random([2, 3, 2, 2, 5], Distribution::Default, &device);
    let b = Tensor::<Flex, 5>::random([2, 3, 2, 2, 3], Distribution::Default, &device);
    let joined = cat_last(a.clone(), b.clone());
    joined
        .to_data()
        .assert_eq(&Tensor::cat(vec![a.clone(), b.clone()], 4).to_data(), true);
    let [ga, gb] = split_last(joined, 5);
    ga.to_data().assert_eq(&a.to_data(), true);
    gb.to_data().assert_eq(&b.to_data(), true);
}

#[test]
fn padding_keeps_the_channels_and_adds_zeros() {
    let device = Default::default();
    let x = Tensor::<Flex, 3>::random([2, 4, 3], Distribution::Default, &device);
    let padded = pad_last(x.clone(), 8);
    assert_eq!(padded.dims(), [2, 4, 8]);
    padded
        .clone()
        .narrow(2, 0, 3)
        .to_data()
        .assert_eq(&x.to_data(), true);
    let rest = padded.narrow(2, 3, 5).abs().max().into_scalar();
    assert_eq!(rest, 0.0);
}

#[test]
fn gradients_of_the_join_are_the_parts_of_the_outputs_gradient() {
    type A = Autodiff<Flex>;
    let device = Default::default();
    let a = Tensor::<A, 5>::random([1, 2, 3, 2, 4], Distribution::Default, &device).require_grad();
    let b = Tensor::<A, 5>::random([1, 2, 3, 2, 6], Distribution::Default, &device).require_grad();
    let probe = Tensor::<A, 5>::random([1, 2, 3, 2, 10], Distribution::Default, &device);
    let got = cat_last(a.clone(), b.clone())
        .mul(probe.clone())
        .sum()
        .backward();
    let want = Tensor::cat(vec![a.clone(), b.clone()], 4)
        .mul(probe)
        .sum()
        .backward();
    let tol = Tolerance::<f32>::absolute(1e-7);
    for t in [&a, &b] {
        t.grad(&got)
            .unwrap()
            .to_data()
            .assert_approx_eq::<f32>(&t.grad(&want).unwrap().to_data(), tol);
    }
}

#[test]
fn the_flex_engine_agrees_with_the_twins() {
    let errs =
        engine_vs_reference::<Flex>(&Default::default(), 7, 16, 8, burn::tensor::DType::F32, 3);
    assert_eq!(errs, [0.0, 0.0, 0.0], "[join, split, pad]");
}
