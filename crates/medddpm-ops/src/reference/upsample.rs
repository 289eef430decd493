//! The plain-burn-op upsampling and its adjoint: the forward (autodiff differentiates it) and
//! backward that every backend gets as `KernelBackend`'s provided
//! bodies, and that the kernels are checked against.
//! It never uses the trait (only burn and the crate's ground modules), so the trait can use it.

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
