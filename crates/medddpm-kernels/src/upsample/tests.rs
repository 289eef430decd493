//! The plain-op upsampling against PyTorch's formula, and its backward against autodiff.

use crate::reference::upsample::*;
use burn::backend::{Autodiff, Flex};
use burn::tensor::Tensor;
use burn::tensor::{Distribution, TensorData};

type B = Flex;

/// Direct evaluation of PyTorch's formula for one output voxel, as an independent oracle.
fn reference(x: &[f32], dims: [usize; 3], o: [usize; 3]) -> f32 {
    let taps = |o: usize, n: usize| -> [(usize, f32); 2] {
        let src = ((o as f32 + 0.5) / 2.0 - 0.5).max(0.0);
        let i0 = (src.floor() as usize).min(n - 1);
        let i1 = (i0 + 1).min(n - 1);
        let w1 = src - i0 as f32;
        [(i0, 1.0 - w1), (i1, w1)]
    };
    let mut acc = 0.0;
    for (a, wa) in taps(o[0], dims[0]) {
        for (b, wb) in taps(o[1], dims[1]) {
            for (c, wc) in taps(o[2], dims[2]) {
                acc += wa * wb * wc * x[(a * dims[1] + b) * dims[2] + c];
            }
        }
    }
    acc
}

#[test]
fn matches_pytorch_formula_on_a_non_cubic_volume() {
    let device = Default::default();
    let dims = [3usize, 1, 4];
    let x = Tensor::<B, 5>::random(
        [1, 1, dims[0], dims[1], dims[2]],
        Distribution::Default,
        &device,
    );
    let xs = x.clone().into_data().to_vec::<f32>().unwrap();
    let y = upsample_trilinear_x2(x);
    assert_eq!(y.dims(), [1, 1, 6, 2, 8]);
    let ys = y.into_data().to_vec::<f32>().unwrap();
    for a in 0..6 {
        for b in 0..2 {
            for c in 0..8 {
                let got = ys[(a * 2 + b) * 8 + c];
                let want = reference(&xs, dims, [a, b, c]);
                assert!((got - want).abs() < 1e-6, "({a},{b},{c}): {got} vs {want}");
            }
        }
    }
}

#[test]
fn channels_last_matches_channels_first() {
    let device = Default::default();
    let x = Tensor::<B, 5>::random([2, 3, 2, 3, 4], Distribution::Default, &device);
    let want = upsample_trilinear_x2(x.clone());
    let got =
        upsample_trilinear_x2_channels_last(x.permute([0, 2, 3, 4, 1])).permute([0, 4, 1, 2, 3]);
    assert_eq!(got.dims(), [2, 3, 4, 6, 8]);
    got.into_data()
        .assert_approx_eq::<f32>(&want.into_data(), burn::tensor::Tolerance::absolute(1e-6));
}

#[test]
fn keeps_batch_and_channels_apart() {
    let device = Default::default();
    let x = Tensor::<B, 5>::from_data(
        TensorData::new(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2, 1, 1, 1]),
        &device,
    );
    let y = upsample_trilinear_x2(x)
        .into_data()
        .to_vec::<f32>()
        .unwrap();
    for (i, v) in y.iter().enumerate() {
        assert_eq!(*v, (i / 8 + 1) as f32);
    }
}

#[test]
fn plain_op_backward_is_autodiffs_backward() {
    type A = Autodiff<B>;
    let device = Default::default();
    // Axes of 1, 2, 3 and 5 voxels: every edge case of the adjoint.
    for shape in [[2, 3, 1, 2, 5], [1, 2, 3, 1, 2], [1, 1, 5, 3, 2]] {
        let x = Tensor::<A, 5>::random(shape, Distribution::Default, &device).require_grad();
        let [b, c, d, h, w] = shape;
        let weights =
            Tensor::<A, 5>::random([b, c, 2 * d, 2 * h, 2 * w], Distribution::Default, &device);
        let grads = (upsample_trilinear_x2(x.clone()) * weights.clone())
            .sum()
            .backward();
        let want = x.grad(&grads).unwrap();
        let got = upsample_trilinear_x2_backward(weights.clone().inner());
        got.clone().into_data().assert_approx_eq::<f32>(
            &want.clone().into_data(),
            burn::tensor::Tolerance::absolute(1e-5),
        );
        let got_cl =
            upsample_trilinear_x2_channels_last_backward(weights.inner().permute([0, 2, 3, 4, 1]))
                .permute([0, 4, 1, 2, 3]);
        got_cl
            .into_data()
            .assert_approx_eq::<f32>(&want.into_data(), burn::tensor::Tolerance::absolute(1e-5));
    }
}

#[test]
fn backward_is_the_adjoint() {
    type A = Autodiff<B>;
    let device = Default::default();
    let x = Tensor::<A, 5>::random([1, 2, 2, 3, 4], Distribution::Default, &device).require_grad();
    let weights = Tensor::<A, 5>::random([1, 2, 4, 6, 8], Distribution::Default, &device);
    let y = upsample_trilinear_x2(x.clone());
    let grads = (y * weights.clone()).sum().backward();
    let grad = x.grad(&grads).unwrap().into_data().to_vec::<f32>().unwrap();
    // For a linear map U, d<U x, w>/dx_i = <U e_i, w>: evaluate it for every i directly.
    let w = weights.inner().into_data().to_vec::<f32>().unwrap();
    for i in 0..grad.len() {
        let mut e = vec![0.0f32; grad.len()];
        e[i] = 1.0;
        let ue = upsample_trilinear_x2(Tensor::<B, 5>::from_data(
            TensorData::new(e, [1, 2, 2, 3, 4]),
            &device,
        ));
        let want: f32 = ue
            .into_data()
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .zip(&w)
            .map(|(a, b)| a * b)
            .sum();
        assert!(
            (grad[i] - want).abs() < 1e-5,
            "voxel {i}: {} vs {want}",
            grad[i]
        );
    }
    // Every input voxel's weights sum to 2 per axis, so a gradient of ones sums to 8. A fresh
    // leaf: burn 0.21 can lose a reused leaf's gradient when another test's backward pass runs
    // at the same moment (tracel-ai/burn#5573).
    let x = Tensor::<A, 5>::from_inner(x.inner()).require_grad();
    let grads = upsample_trilinear_x2(x.clone()).sum().backward();
    for g in x.grad(&grads).unwrap().into_data().to_vec::<f32>().unwrap() {
        assert!((g - 8.0).abs() < 1e-5);
    }
}
