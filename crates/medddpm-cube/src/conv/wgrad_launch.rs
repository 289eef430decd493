//! Launching the weight gradient's partial products ([`launch_partial`]): the FMA kernel, or
//! for 16-bit operands on tensor cores the vector kernel where the input's channels allow it,
//! else the scalar one.

use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;
use cubecl::prelude::*;
use cubecl::{CubeCount, CubeDim};

use super::super::launch::{channel_width, widest_vector};
use super::kernel::{wgrad_partial, SIDE};
use super::{mma, mma_vec, narrow, WgradPlan, WgradShape};
use crate::conv::MAX_NARROW_CHANNELS;
use crate::reference::conv_spec::Conv3dSpec;

/// Elements per vector the tensor-core kernel can load from `x` and from `grad_out`, `(x,
/// grad_out)` ([`widest_dividing`] of each one's channel count and other strides; `m` is
/// `grad_out`'s channel count).
fn vector_widths<R: CubeRuntime>(
    x: &CubeTensor<R>,
    grad_out: &CubeTensor<R>,
    m: usize,
) -> (usize, usize) {
    let widest = widest_vector(x);
    (
        channel_width(widest, x.meta.strides(), x.meta.shape()[1]),
        channel_width(widest, grad_out.meta.strides(), m),
    )
}

/// Which kernel computes the partial products.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PartialKernel {
    /// FMA units (f32, or operands of two dtypes, or no tensor cores for the dtype).
    Fma,
    /// Tensor cores, one element per load.
    TensorCores,
    /// Tensor cores, `x` loaded as vectors of `x` channels and `grad_out` of `dy` (planned by
    /// [`plan_tensor_cores`](super::plan_tensor_cores)).
    Vectors { x: usize, dy: usize },
    /// At most [`MAX_NARROW_CHANNELS`] output channels, `x` loaded as vectors of `x` channels,
    /// on the FMA units in any dtypes (planned by [`plan_narrow`](super::plan_narrow)).
    Narrow { x: usize },
}

/// The kernel for these operands: the narrow kernel for at most [`MAX_NARROW_CHANNELS`]
/// output channels where `x` loads as vectors of at least 4 channels ([`vector_widths`]; `m`
/// is `grad_out`'s channel count); tensor cores where both are of one 16-bit dtype the
/// runtime multiplies on them, as vectors where `x` loads as vectors of at least 4 channels.
pub(super) fn choose_kernel<R: CubeRuntime>(
    x: &CubeTensor<R>,
    grad_out: &CubeTensor<R>,
    m: usize,
) -> PartialKernel {
    let widths = vector_widths(x, grad_out, m);
    if m <= MAX_NARROW_CHANNELS && widths.0 >= 4 {
        return PartialKernel::Narrow { x: widths.0 };
    }
    if x.dtype != grad_out.dtype || !super::super::launch::tensor_cores(x) {
        return PartialKernel::Fma;
    }
    match widths {
        (width, dy) if width >= 4 => PartialKernel::Vectors { x: width, dy },
        _ => PartialKernel::TensorCores,
    }
}

/// The scalar arguments every partial-product kernel takes: the GEMM's sizes and slice, the
/// kernel's height and width, stride and padding.
type Scalars = (
    (usize, usize, usize, usize, usize),
    (usize, usize),
    (i32, i32, i32),
    (i32, i32, i32),
);

/// The partial products' launch on `which` kernel ([`choose_kernel`]): cubes `(N tiles, M
/// tiles, slices)` of 16 x 16 units.
#[allow(clippy::too_many_arguments)]
pub(super) fn launch_partial<R: CubeRuntime>(
    x: CubeTensor<R>,
    grad_out: CubeTensor<R>,
    ws: &CubeTensor<R>,
    shape: WgradShape,
    plan: WgradPlan,
    which: PartialKernel,
    kernel: [usize; 3],
    spec: &Conv3dSpec,
    channels_last: bool,
) {
    let (tiles_n, tiles_m) = plan.tiles(shape);
    let count = CubeCount::Static(tiles_n as u32, tiles_m as u32, plan.slices as u32);
    let c_in = x.meta.shape()[1];
    let [sd, sh, sw] = spec.stride.map(|s| s as i32);
    let [pd, ph, pw] = spec.padding.map(|p| p as i32);
    let scalars: Scalars = (
        (shape.m, shape.n, c_in, shape.k, plan.slice_len),
        (kernel[1], kernel[2]),
        (sd, sh, sw),
        (pd, ph, pw),
    );
    match which {
        PartialKernel::Narrow { x: width } => launch_narrow(x, grad_out, ws, count, scalars, width),
        PartialKernel::Vectors { x: width, dy } => {
            launch_vectors(x, grad_out, ws, count, scalars, plan, (width, dy))
        }
        PartialKernel::Fma | PartialKernel::TensorCores => {
            let tensor_cores = which == PartialKernel::TensorCores;
            launch_scalar(
                x,
                grad_out,
                ws,
                count,
                scalars,
                plan,
                channels_last,
                tensor_cores,
            )
        }
    }
}

/// [`launch_partial`] on the tensor-core vector kernel, `x` loaded in vectors of
/// `widths.0` channels and `grad_out` of `widths.1`.
fn launch_vectors<R: CubeRuntime>(
    x: CubeTensor<R>,
    grad_out: CubeTensor<R>,
    ws: &CubeTensor<R>,
    count: CubeCount,
    scalars: Scalars,
    plan: WgradPlan,
    widths: (usize, usize),
) {
    let (sizes, taps, stride, pad) = scalars;
    let dtypes = [x.dtype.into(), grad_out.dtype.into(), x.dtype.into()];
    let pipe = mma_vec::VectorPipe {
        tm: plan.tm,
        tn: plan.tn,
        stages: plan.stages,
        max_registers: plan.max_registers,
        ldmatrix: plan.ldmatrix,
        rotate_rows: plan.rotate_rows,
    };
    // SAFETY: as in `launch_scalar`; the staged type is both operands' 16-bit type, which
    // `choose_kernel` checked the runtime multiplies on tensor cores, and `vector_widths`
    // checked that every vector load lies whole inside one position's channels at an
    // offset that is a multiple of its width.
    unsafe {
        mma_vec::wgrad_partial_mma_vec::launch_unchecked::<R>(
            &x.client.clone(),
            count,
            CubeDim::new_2d(SIDE as u32, SIDE as u32),
            widths.1,
            widths.0,
            x.into_tensor_arg(),
            grad_out.into_tensor_arg(),
            ws.clone().into_tensor_arg(),
            sizes,
            taps,
            stride,
            pad,
            pipe,
            dtypes,
        );
    }
}

/// [`launch_partial`] on the kernels that load one element at a time: the FMA units'
/// ([`wgrad_partial`]) or, `tensor_cores`, the tensor cores' ([`mma::wgrad_partial_mma`]),
/// which take the same operands.
#[allow(clippy::too_many_arguments)]
fn launch_scalar<R: CubeRuntime>(
    x: CubeTensor<R>,
    grad_out: CubeTensor<R>,
    ws: &CubeTensor<R>,
    count: CubeCount,
    scalars: Scalars,
    plan: WgradPlan,
    channels_last: bool,
    tensor_cores: bool,
) {
    let (sizes, taps, stride, pad) = scalars;
    let dtypes: [StorageType; 2] = [x.dtype.into(), grad_out.dtype.into()];
    let client = x.client.clone();
    let dim = CubeDim::new_2d(SIDE as u32, SIDE as u32);
    let operands = (
        x.into_tensor_arg(),
        grad_out.into_tensor_arg(),
        ws.clone().into_tensor_arg(),
    );
    macro_rules! launch {
        ($launch:path, $dtypes:expr) => {
            $launch(
                &client,
                count,
                dim,
                operands.0,
                operands.1,
                operands.2,
                sizes,
                taps,
                stride,
                pad,
                plan.tm,
                plan.tn,
                channels_last,
                $dtypes,
            )
        };
    }
    // SAFETY: `check` bounded both operands' spans below 2^31 elements; every load is guarded
    // by its row's and column's bounds and every store by `m < M`, `n < N` in slice `z` of
    // the `[slices, M, N]` workspace. On tensor cores the staged type is both operands' 16-bit
    // type, which `choose_kernel` checked the runtime multiplies on them.
    unsafe {
        if tensor_cores {
            let [x_dtype, dy_dtype] = dtypes;
            let staged = [x_dtype, dy_dtype, x_dtype];
            launch!(mma::wgrad_partial_mma::launch_unchecked::<R>, staged)
        } else {
            launch!(wgrad_partial::launch_unchecked::<R>, dtypes)
        }
    }
}

/// [`launch_partial`] on the narrow kernel ([`narrow::wgrad_partial_narrow`]): `count`'s x
/// axis over tiles of 256 vectors of `width` columns, its z axis over the slices.
fn launch_narrow<R: CubeRuntime>(
    x: CubeTensor<R>,
    grad_out: CubeTensor<R>,
    ws: &CubeTensor<R>,
    count: CubeCount,
    scalars: Scalars,
    width: usize,
) {
    let (sizes, taps, stride, pad) = scalars;
    let m = sizes.0;
    let dtypes: [StorageType; 2] = [x.dtype.into(), grad_out.dtype.into()];
    // SAFETY: `check` bounded both operands' spans below 2^31 elements; a unit reads `x` only
    // at a voxel inside the input grid, at a vector `vector_widths` checked lies whole inside
    // its channels, and `grad_out` at positions of its slice (below K) and channels below
    // `m`; it writes its own columns (below N) of the `m` rows of slice `z` of the `[slices,
    // M, N]` workspace.
    unsafe {
        narrow::wgrad_partial_narrow::launch_unchecked::<R>(
            &x.client.clone(),
            count,
            CubeDim::new_1d(narrow::UNITS as u32),
            width,
            x.into_tensor_arg(),
            grad_out.into_tensor_arg(),
            ws.clone().into_tensor_arg(),
            sizes,
            taps,
            stride,
            pad,
            m,
            dtypes,
        );
    }
}
