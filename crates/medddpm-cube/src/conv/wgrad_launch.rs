//! Launching the weight gradient's partial products ([`launch_partial`]): the FMA kernel, or
//! for 16-bit operands on tensor cores the vector kernel where the input's channels allow it,
//! else the scalar one.

use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;
use cubecl::prelude::*;
use cubecl::{CubeCount, CubeDim};

use super::super::launch::{channel_width, widest_vector};
use super::kernel::{wgrad_partial, Scalars, SIDE};
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
    let launch = Partial {
        x,
        grad_out,
        ws,
        count,
        scalars,
    };
    match which {
        PartialKernel::Narrow { x: width } => launch_narrow(launch, width),
        PartialKernel::Vectors { x: width, dy } => launch_vectors(launch, plan, (width, dy)),
        PartialKernel::Fma | PartialKernel::TensorCores => {
            let tensor_cores = which == PartialKernel::TensorCores;
            launch_scalar(launch, plan, channels_last, tensor_cores)
        }
    }
}

/// What every partial-product launch takes: both operands, the workspace, the cubes and the
/// kernels' [`Scalars`].
struct Partial<'a, R: CubeRuntime> {
    x: CubeTensor<R>,
    grad_out: CubeTensor<R>,
    ws: &'a CubeTensor<R>,
    count: CubeCount,
    scalars: Scalars,
}

/// `x`, `grad_out` and the workspace as kernel arguments.
type Tensors<R> = (TensorArg<R>, TensorArg<R>, TensorArg<R>);

impl<R: CubeRuntime> Partial<'_, R> {
    /// The operands' dtypes, and the client and the three tensors as kernel arguments.
    fn arguments(&self) -> ([StorageType; 2], ComputeClient<R>, Tensors<R>) {
        let dtypes = [self.x.dtype.into(), self.grad_out.dtype.into()];
        let client = self.x.client.clone();
        let tensors = (
            self.x.clone().into_tensor_arg(),
            self.grad_out.clone().into_tensor_arg(),
            self.ws.clone().into_tensor_arg(),
        );
        (dtypes, client, tensors)
    }
}

/// [`launch_partial`] on the tensor-core vector kernel, `x` loaded in vectors of
/// `widths.0` channels and `grad_out` of `widths.1`.
fn launch_vectors<R: CubeRuntime>(launch: Partial<'_, R>, plan: WgradPlan, widths: (usize, usize)) {
    let ([x_dtype, dy_dtype], client, (x, grad_out, ws)) = launch.arguments();
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
            &client,
            launch.count,
            CubeDim::new_2d(SIDE as u32, SIDE as u32),
            widths.1,
            widths.0,
            x,
            grad_out,
            ws,
            launch.scalars,
            pipe,
            [x_dtype, dy_dtype, x_dtype],
        );
    }
}

/// [`launch_partial`] on the kernels that load one element at a time: the FMA units'
/// ([`wgrad_partial`]) or, `tensor_cores`, the tensor cores' ([`mma::wgrad_partial_mma`]),
/// which take the same operands.
fn launch_scalar<R: CubeRuntime>(
    launch: Partial<'_, R>,
    plan: WgradPlan,
    channels_last: bool,
    tensor_cores: bool,
) {
    let (dtypes, client, operands) = launch.arguments();
    let dim = CubeDim::new_2d(SIDE as u32, SIDE as u32);
    macro_rules! launch {
        ($launch:path, $dtypes:expr) => {
            $launch(
                &client,
                launch.count,
                dim,
                operands.0,
                operands.1,
                operands.2,
                launch.scalars,
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
fn launch_narrow<R: CubeRuntime>(launch: Partial<'_, R>, width: usize) {
    let m = launch.scalars.0 .0;
    let (dtypes, client, (x, grad_out, ws)) = launch.arguments();
    // SAFETY: `check` bounded both operands' spans below 2^31 elements; a unit reads `x` only
    // at a voxel inside the input grid, at a vector `vector_widths` checked lies whole inside
    // its channels, and `grad_out` at positions of its slice (below K) and channels below
    // `m`; it writes its own columns (below N) of the `m` rows of slice `z` of the `[slices,
    // M, N]` workspace.
    unsafe {
        narrow::wgrad_partial_narrow::launch_unchecked::<R>(
            &client,
            launch.count,
            CubeDim::new_1d(narrow::UNITS as u32),
            width,
            x,
            grad_out,
            ws,
            launch.scalars,
            m,
            dtypes,
        );
    }
}
