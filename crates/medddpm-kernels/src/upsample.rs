//! Trilinear x2 upsampling of 5-D volumes (burn 0.21's `interpolate` is 2-D only).

use burn::tensor::{backend::Backend, Tensor};

use crate::compute::Layout;

/// [`upsample_trilinear_x2`] or its channels-last version, as `layout` says.
pub fn upsample_trilinear_x2_in<B: Backend>(x: Tensor<B, 5>, layout: Layout) -> Tensor<B, 5> {
    match layout {
        Layout::Ncdhw => upsample_trilinear_x2(x),
        Layout::Ndhwc => upsample_trilinear_x2_channels_last(x),
    }
}

/// [`upsample_trilinear_x2_backward`] or its channels-last version, as `layout` says.
pub fn upsample_trilinear_x2_backward_in<B: Backend>(
    grad: Tensor<B, 5>,
    layout: Layout,
) -> Tensor<B, 5> {
    match layout {
        Layout::Ncdhw => upsample_trilinear_x2_backward(grad),
        Layout::Ndhwc => upsample_trilinear_x2_channels_last_backward(grad),
    }
}

/// Doubles every spatial size of a (B, C, D, H, W) tensor by trilinear interpolation with
/// `align_corners = False`.
///
/// With a factor of exactly 2 the source coordinate of output o is (o + 0.5) / 2 - 0.5, so output
/// 2i mixes inputs i and i-1 with weights 0.75 / 0.25 and output 2i+1 mixes i and i+1 the same
/// way; at the borders the missing neighbour is the edge voxel itself (PyTorch clamps). Trilinear
/// interpolation is separable, so three 1-D passes give the exact result. Built from
/// differentiable burn ops, so autodiff provides the backward pass (the adjoint: every input voxel
/// spreads its gradient over the outputs with the same weights).
///
/// # Shapes
/// - input: `[batch, channels, d, h, w]`
/// - output: `[batch, channels, 2d, 2h, 2w]`
pub fn upsample_trilinear_x2<B: Backend>(x: Tensor<B, 5>) -> Tensor<B, 5> {
    let x = upsample_linear_x2_along(x, 4);
    let x = upsample_linear_x2_along(x, 3);
    upsample_linear_x2_along(x, 2)
}

/// [`upsample_trilinear_x2`] for channels-last activations.
///
/// # Shapes
/// - input: `[batch, d, h, w, channels]`
/// - output: `[batch, 2d, 2h, 2w, channels]`
pub fn upsample_trilinear_x2_channels_last<B: Backend>(x: Tensor<B, 5>) -> Tensor<B, 5> {
    let x = upsample_linear_x2_along(x, 3);
    let x = upsample_linear_x2_along(x, 2);
    upsample_linear_x2_along(x, 1)
}

/// One separable pass: linear x2 interpolation along axis `dim` (align_corners = False).
pub fn upsample_linear_x2_along<B: Backend>(x: Tensor<B, 5>, dim: usize) -> Tensor<B, 5> {
    let mut dims = x.dims();
    let n = dims[dim];
    // Neighbours below and above each voxel, with the edge voxel repeated at the borders.
    let (prev, next) = if n == 1 {
        (x.clone(), x.clone())
    } else {
        (
            Tensor::cat(
                vec![x.clone().narrow(dim, 0, 1), x.clone().narrow(dim, 0, n - 1)],
                dim,
            ),
            Tensor::cat(
                vec![
                    x.clone().narrow(dim, 1, n - 1),
                    x.clone().narrow(dim, n - 1, 1),
                ],
                dim,
            ),
        )
    };
    let centre = x.mul_scalar(0.75);
    let even = centre.clone() + prev.mul_scalar(0.25);
    let odd = centre + next.mul_scalar(0.25);
    // Interleave even and odd outputs: stack on a new axis right after `dim`, then merge the two.
    let interleaved: Tensor<B, 6> = Tensor::stack(vec![even, odd], dim + 1);
    dims[dim] = 2 * n;
    interleaved.reshape(dims)
}

/// The backward pass of [`upsample_trilinear_x2`] (its adjoint) in plain ops: `dL/dx` of a
/// `[b, c, d, h, w]` input from `dL/dy` `[b, c, 2d, 2h, 2w]`. The reference twin of the
/// kernels' backward.
pub fn upsample_trilinear_x2_backward<B: Backend>(grad: Tensor<B, 5>) -> Tensor<B, 5> {
    let g = upsample_linear_x2_adjoint_along(grad, 2);
    let g = upsample_linear_x2_adjoint_along(g, 3);
    upsample_linear_x2_adjoint_along(g, 4)
}

/// [`upsample_trilinear_x2_backward`] for channels-last gradients `[b, 2d, 2h, 2w, c]`.
pub fn upsample_trilinear_x2_channels_last_backward<B: Backend>(
    grad: Tensor<B, 5>,
) -> Tensor<B, 5> {
    let g = upsample_linear_x2_adjoint_along(grad, 1);
    let g = upsample_linear_x2_adjoint_along(g, 2);
    upsample_linear_x2_adjoint_along(g, 3)
}

/// The adjoint of [`upsample_linear_x2_along`]: axis `dim` of `grad` (size 2n) back to n.
///
/// Output 2i (E_i) gave 0.75 to input i and 0.25 to input max(i - 1, 0); output 2i + 1 (O_i)
/// 0.75 to i and 0.25 to min(i + 1, n - 1). So `dx = 0.75 (E + O) + 0.25 (A + B)` with
/// `A = [E_0 + E_1, E_2, .., E_{n-1}, 0]` and `B = [0, O_0, .., O_{n-3}, O_{n-2} + O_{n-1}]`.
pub fn upsample_linear_x2_adjoint_along<B: Backend>(
    grad: Tensor<B, 5>,
    dim: usize,
) -> Tensor<B, 5> {
    let dims = grad.dims();
    let n = dims[dim] / 2;
    let mut split = [0usize; 6];
    split[..=dim].copy_from_slice(&dims[..=dim]);
    split[dim] = n;
    split[dim + 1] = 2;
    split[dim + 2..].copy_from_slice(&dims[dim + 1..]);
    let pairs: Tensor<B, 6> = grad.reshape(split);
    let mut half = dims;
    half[dim] = n;
    let even: Tensor<B, 5> = pairs.clone().narrow(dim + 1, 0, 1).reshape(half);
    let odd: Tensor<B, 5> = pairs.narrow(dim + 1, 1, 1).reshape(half);
    if n == 1 {
        return even + odd;
    }
    let mut one = dims;
    one[dim] = 1;
    let zeros = Tensor::<B, 5>::zeros(one, (&even.device(), even.dtype()));
    let e = |i, len| even.clone().narrow(dim, i, len);
    let o = |i, len| odd.clone().narrow(dim, i, len);
    let mut a = vec![e(0, 1) + e(1, 1)];
    if n > 2 {
        a.push(e(2, n - 2));
    }
    a.push(zeros.clone());
    let mut b = vec![zeros];
    if n > 2 {
        b.push(o(0, n - 2));
    }
    b.push(o(n - 2, 1) + o(n - 1, 1));
    let a = Tensor::cat(a, dim);
    let b = Tensor::cat(b, dim);
    (even + odd).mul_scalar(0.75) + (a + b).mul_scalar(0.25)
}

/// Relative L2 differences of backend `B`'s upsampling and its backward (as
/// [`crate::KernelBackend`] computes them) against the plain-op twins in f32 on the CPU, for a
/// `[b, c, d, h, w]` volume in `layout` with values in `dtype`: `[forward, backward]`. The
/// operands are drawn on the CPU and rounded to `dtype` first.
pub fn engine_vs_reference<B: crate::KernelBackend>(
    device: &B::Device,
    size: [usize; 5],
    layout: Layout,
    dtype: burn::tensor::DType,
    seed: u64,
) -> [f64; 2] {
    use crate::norm::cast_to;
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
        crate::conv::float(cast_to(
            Tensor::<B, 5>::from_data(t.to_data(), device),
            dtype,
        ))
    };
    let back = |t| {
        let t: Tensor<B, 5> = crate::conv::tensor(t);
        Tensor::<Flex, 5>::from_data(cast_to(t, DType::F32).to_data(), &cpu)
    };
    let y = back(B::upsample_trilinear_x2(on(&x), layout));
    let dx = back(B::upsample_trilinear_x2_backward(on(&dy), layout));
    [
        crate::conv::rel_l2(y, want_y),
        crate::conv::rel_l2(dx, want_dx),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, Flex};
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
        let got = upsample_trilinear_x2_channels_last(x.permute([0, 2, 3, 4, 1]))
            .permute([0, 4, 1, 2, 3]);
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
            let got_cl = upsample_trilinear_x2_channels_last_backward(
                weights.inner().permute([0, 2, 3, 4, 1]),
            )
            .permute([0, 4, 1, 2, 3]);
            got_cl.into_data().assert_approx_eq::<f32>(
                &want.into_data(),
                burn::tensor::Tolerance::absolute(1e-5),
            );
        }
    }

    #[test]
    fn backward_is_the_adjoint() {
        type A = Autodiff<B>;
        let device = Default::default();
        let x =
            Tensor::<A, 5>::random([1, 2, 2, 3, 4], Distribution::Default, &device).require_grad();
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
        // Every input voxel's weights sum to 2 per axis, so a gradient of ones sums to 8.
        let grads = upsample_trilinear_x2(x.clone()).sum().backward();
        for g in x.grad(&grads).unwrap().into_data().to_vec::<f32>().unwrap() {
            assert!((g - 8.0).abs() < 1e-5);
        }
    }
}
