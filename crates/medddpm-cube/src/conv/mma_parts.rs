//! What the two tensor-core products of the forward kernel ([`super::mma`], cooperative
//! matrices, and [`super::mma_ldm`], CUDA's own instructions) share.

use cubecl::prelude::*;

use super::gemm::{position, Dims, Strides};

/// Units per plane the kernel is written for (NVIDIA's warp).
pub(super) const PLANE: u32 = 32;

/// `count` 16 x 16 f32 accumulators, zero.
#[cube]
pub(super) fn zeroed_accumulators(#[comptime] count: usize) -> Sequence<cmma::Matrix<f32>> {
    let mut acc = Sequence::<cmma::Matrix<f32>>::new();
    #[unroll]
    for _i in 0..count {
        acc.push(cmma::Matrix::<f32>::from_value(
            cmma::MatrixIdent::Accumulator,
            16usize,
            16usize,
            16usize,
            cmma::MatrixLayout::Undefined,
            0.0,
        ));
    }
    acc
}

/// Where output row `m` (a position), channel `co` lies in `y`.
#[cube]
pub(super) fn out_offset(m: u32, co: u32, dims: &Dims, ys: &Strides) -> u32 {
    let (b, od, oh, ow) = position(m, dims);
    ys.base + b * ys.n + od * ys.d + oh * ys.h + ow * ys.w + co * ys.c
}
