//! The 3-D convolution's weight gradient as a CubeCL implicit GEMM with split-K, for every
//! CubeCL runtime (wgpu/Vulkan, CUDA): strict FP32 arithmetic on any GPU, f32, f16 or bf16
//! storage, f32 accumulation.
//!
//! `dL/dw[co, ci, kd, kh, kw] = sum over (n, od, oh, ow) of dL/dy[n, co, od, oh, ow] *
//! x[n, ci, od s - p + kd, oh s - p + kh, ow s - p + kw]` (zero padding) is a GEMM with
//! `M = C_out`, `N = C_in KD KH KW` and the long `K = N_batch OD OH OW`. Its output is small
//! (at most a few hundred tiles) while K reaches millions at the U-Net's top level, so one cube
//! per output tile would leave most of a GPU idle (burn 0.21's GEMM: about 14 tiles for 132
//! SMs). Here K is cut into `S` slices: cube `(tile, slice)` writes its tile's partial sums
//! over its slice to an f32 workspace `[S, M, N]`, and a second small kernel adds the slices
//! in order and writes `dL/dw` in the weight's dtype.
//!
//! The reduction is that second pass rather than atomics: f32 atomic addition is an optional
//! Vulkan feature (`VK_EXT_shader_atomic_float`), atomics would need a zeroing pass and a cast
//! pass anyway, and the sum would depend on the cubes' timing; two passes give the same bits
//! on every run, for a workspace of a few MiB and a pass reading it once.
//!
//! Choice of `S` ([`plan`]): at most [`CUBES_PER_UNIT`] cubes per SM (whole waves), the SM
//! count from the client (CUDA; wgpu: [`FALLBACK_UNITS`], a guess that costs a small GPU only
//! a bigger workspace), no slice under [`MIN_SLICE_K`] (the partial write and the reduction
//! stay small beside the multiply), a workspace of at most [`MAX_WORKSPACE_BYTES`].

#[path = "wgrad_fused.rs"]
mod fused;
#[path = "wgrad_kernel.rs"]
mod kernel;
#[path = "wgrad_launch.rs"]
mod launch;
#[path = "wgrad_mma.rs"]
mod mma;
#[path = "wgrad_mma_vec.rs"]
mod mma_vec;
#[path = "wgrad_narrow.rs"]
mod narrow;
#[path = "wgrad_walk.rs"]
mod walk;

use burn::tensor::{DType, Shape};
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;
use cubecl::prelude::*;
use cubecl::{calculate_cube_count_elemwise, CubeDim};

use super::launch::manual_mma;
use super::tuning::{conv_tuning, ConvTuning};
use crate::empty;
use crate::reference::conv_spec::Conv3dSpec;
pub use fused::conv3d_weight_grad_fused;
pub(crate) use fused::{weight_grad_check, weight_grad_checked};
use kernel::{staged_stride_a, staged_stride_b, wgrad_reduce, BK, SIDE, VEC};
use launch::{choose_kernel, launch_partial, PartialKernel};
use mma_vec::BK_VEC;

/// Cubes aimed for per SM: whole waves of the two to four cubes an SM holds at once.
pub const CUBES_PER_UNIT: usize = 8;
/// Compute units assumed where the runtime does not say (wgpu; an H100 has 132).
pub const FALLBACK_UNITS: usize = 128;
/// Shortest K slice: its multiply is then at least 256 times its tile's partial write.
pub const MIN_SLICE_K: usize = 256;
/// Largest f32 workspace the split may take.
pub const MAX_WORKSPACE_BYTES: usize = 64 << 20;

/// An output gradient whose shape does not follow from the input's and the convolution's.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "grad_out has shape {grad_out:?}, but x {x:?} with kernel {kernel:?}, stride {stride:?} \
     and padding {padding:?} gives [{batch}, c_out, {out:?}]"
)]
pub struct ShapeMismatch {
    /// The input's shape.
    pub x: Vec<usize>,
    /// The output gradient's shape.
    pub grad_out: Vec<usize>,
    /// Kernel size.
    pub kernel: [usize; 3],
    /// Stride.
    pub stride: [usize; 3],
    /// Padding.
    pub padding: [usize; 3],
    /// Batch of `x`.
    pub batch: usize,
    /// The spatial size `grad_out` should have (empty when the kernel does not fit).
    pub out: Vec<usize>,
}

/// Why the weight gradient refused its operands.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WgradError {
    /// An operand is not `[batch, channels, d, h, w]`.
    #[error("{operand} must be 5-D [batch, channels, d, h, w], got shape {shape:?}")]
    Rank {
        /// `x` or `grad_out`.
        operand: &'static str,
        /// Its shape.
        shape: Vec<usize>,
    },
    /// The output gradient's shape does not follow from the input's and the convolution's.
    #[error("{0}")]
    Shape(Box<ShapeMismatch>),
    /// A dtype the kernels do not compute in (they take f32, f16 and bf16).
    #[error("{operand} has dtype {dtype:?}; the CubeCL weight gradient takes f32, f16 or bf16")]
    DType {
        /// `x`, `grad_out` or the output.
        operand: &'static str,
        /// The dtype refused.
        dtype: DType,
    },
    /// The weight (whose gradient is asked for) is not `[c_out, c_in, kd, kh, kw]` of the
    /// operands.
    #[error("the weight has shape {weight:?}; x and grad_out give {expected:?}")]
    Weight {
        /// The weight's shape.
        weight: Vec<usize>,
        /// `[c_out, c_in, kd, kh, kw]` from the operands.
        expected: Vec<usize>,
    },
    /// An operand reaches past the 2^31 elements the kernel's 32-bit offsets address.
    #[error("{operand} spans {elements} elements, past the kernel's 2^31 limit")]
    TooLarge {
        /// `x` or `grad_out`.
        operand: &'static str,
        /// Elements it spans.
        elements: usize,
    },
}

/// The GEMM's sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WgradShape {
    /// `M`: output channels.
    pub m: usize,
    /// `N`: input channels times kernel taps.
    pub n: usize,
    /// `K`: batch times output voxels.
    pub k: usize,
}

/// How one weight gradient is cut up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WgradPlan {
    /// Rows per unit (tile height `16 tm`).
    pub tm: usize,
    /// Columns per unit (tile width `16 tn`).
    pub tn: usize,
    /// K slices `S`.
    pub slices: usize,
    /// K positions per slice (a multiple of 16; the last slice may be shorter).
    pub slice_len: usize,
    /// Shared-memory stages (2 only for the tensor-core vector kernel, see
    /// [`plan_tensor_cores`]).
    pub stages: usize,
    /// Register cap per unit on CUDA (the tensor-core vector kernel's; 0: none).
    pub max_registers: u32,
    /// The tensor-core vector kernel's products through `ldmatrix` and `mma.sync` (set where
    /// the runtime has them, see `conv3d_weight_grad_split`).
    pub ldmatrix: bool,
    /// The tensor-core vector kernel's staged K rows rotated over its units (`ConvTuning`'s
    /// `rotate`).
    pub rotate_rows: bool,
}

impl WgradPlan {
    /// Output tiles `(along N, along M)`.
    pub fn tiles(&self, shape: WgradShape) -> (usize, usize) {
        (
            shape.n.div_ceil(SIDE * self.tn),
            shape.m.div_ceil(SIDE * self.tm),
        )
    }
}

/// Rows per unit for `m` output channels: the smallest tile that holds them up to 64, then 8
/// (128-row tiles) unless 64-row tiles pad less.
fn rows_per_unit(m: usize) -> usize {
    match m {
        0..=16 => 1,
        17..=32 => 2,
        33..=64 => 4,
        _ if m.div_ceil(128) * 128 <= m.div_ceil(64) * 64 => 8,
        _ => 4,
    }
}

/// What [`plan`] needs to know of the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WgradDevice {
    /// Streaming multiprocessors (compute units), where the runtime reports them (CUDA does,
    /// wgpu does not: then [`FALLBACK_UNITS`]).
    pub units: Option<usize>,
    /// Shared memory one cube may take, in bytes.
    pub shared_bytes: usize,
}

impl WgradDevice {
    /// What `client` reports.
    pub fn of<R: CubeRuntime>(client: &ComputeClient<R>) -> Self {
        let hardware = &client.properties().hardware;
        WgradDevice {
            units: hardware.num_streaming_multiprocessors.map(|n| n as usize),
            shared_bytes: hardware.max_shared_memory_size,
        }
    }
}

/// Shared memory a cube of `tm x tn` register tiles stages, with the padding of either layout.
fn shared_bytes(tm: usize, tn: usize) -> usize {
    let a = staged_stride_a(SIDE * tm, true).max(staged_stride_a(SIDE * tm, false));
    4 * BK * (a + VEC * staged_stride_b(SIDE * tn))
}

/// The tiles and the split of K for `shape` on `device`; `slices` forces the number of slices
/// (clamped to `1..=K / 16`). Tiles: 8 columns per unit (128-column tiles) where N passes 64,
/// rows per unit to fit M (see `rows_per_unit`), halved while the cube's shared memory would
/// pass the device's.
pub fn plan(shape: WgradShape, device: WgradDevice, slices: Option<usize>) -> WgradPlan {
    let mut tm = rows_per_unit(shape.m);
    let mut tn = if shape.n > 64 { 8 } else { 4 };
    while shared_bytes(tm, tn) > device.shared_bytes && (tm > 1 || tn > VEC) {
        if tm >= tn / VEC * 2 && tm > 1 {
            tm /= 2;
        } else {
            tn = VEC;
        }
    }
    split(shape, device, slices, (tm, tn, 1), CUBES_PER_UNIT)
}

/// Shared memory a cube of the tensor-core vector kernel takes: its stages of 16-bit `[k, m]`
/// and `[k, n]` rows ([`BK_VEC`] of each, 8 elements of padding) and the 16 x 16 f32 scratch
/// of each of its 8 planes.
fn vector_shared_bytes(tm: usize, tn: usize, stages: usize) -> usize {
    2 * stages * BK_VEC * (SIDE * tm + 8 + SIDE * tn + 8) + 4 * 8 * 256
}

/// [`plan`] for the tensor-core vector kernel (16-bit, channels-last operands), with
/// `tuning`'s tile width and stages where the device's shared memory holds them: 256-column
/// tiles (`wgrad_tn = 16`) where `N` passes 128 and `M` fits 64 rows; two stages; each dropped
/// (the stages first) where the memory would not hold it.
pub fn plan_tensor_cores(
    shape: WgradShape,
    device: WgradDevice,
    slices: Option<usize>,
    tuning: &ConvTuning,
) -> WgradPlan {
    let mut tm = rows_per_unit(shape.m);
    let mut tn = match shape.n {
        0..=64 => 4,
        65..=128 => 8,
        _ if tm <= 4 && tuning.wgrad_tn == 16 => 16,
        _ => 8,
    };
    let mut stages = tuning.wgrad_stages.clamp(1, 2) as usize;
    while vector_shared_bytes(tm, tn, stages) > device.shared_bytes {
        if stages > 1 {
            stages = 1;
        } else if tn > 8 {
            tn = 8;
        } else if tm > 1 {
            tm /= 2;
        } else {
            break;
        }
    }
    let cubes = (tuning.wgrad_cubes as usize).max(1);
    WgradPlan {
        max_registers: tuning.wgrad_max_registers,
        rotate_rows: tuning.rotate,
        ..split(shape, device, slices, (tm, tn, stages), cubes)
    }
}

/// [`plan`] for the narrow kernel (at most four output channels, channels-last input in
/// vectors of `width`): a tile is all rows by `256 width` columns (`tn = 16 width`).
pub fn plan_narrow(
    shape: WgradShape,
    device: WgradDevice,
    slices: Option<usize>,
    width: usize,
    tuning: &ConvTuning,
) -> WgradPlan {
    let cubes = (tuning.wgrad_cubes as usize).max(1);
    split(shape, device, slices, (1, SIDE * width.max(1), 1), cubes)
}

/// The plan of `tile = (tm, tn, stages)`: K cut into enough slices for `cubes` cubes per
/// compute unit (see the module's documentation), or `slices` where given. The slices are
/// rounded down, so that the cubes fill whole waves: one cube past them (76 slices of 14
/// tiles, 1064 cubes for 1056 places) runs a wave of its own, a fifth of the kernel's time at
/// the U-Net's top level (Nsight Compute).
fn split(
    shape: WgradShape,
    device: WgradDevice,
    slices: Option<usize>,
    tile: (usize, usize, usize),
    cubes: usize,
) -> WgradPlan {
    let (tm, tn, stages) = tile;
    let tiles = shape.n.div_ceil(SIDE * tn) * shape.m.div_ceil(SIDE * tm);
    let steps = shape.k.div_ceil(BK).max(1);
    let wanted = slices.unwrap_or_else(|| {
        let target = device.units.unwrap_or(FALLBACK_UNITS).max(1) * cubes;
        let by_length = (shape.k / MIN_SLICE_K).max(1);
        let by_memory = (MAX_WORKSPACE_BYTES / (4 * shape.m * shape.n).max(1)).max(1);
        (target / tiles.max(1)).min(by_length).min(by_memory)
    });
    let wanted = wanted.clamp(1, steps.min(u16::MAX as usize));
    let slice_len = steps.div_ceil(wanted) * BK;
    WgradPlan {
        tm,
        tn,
        slices: shape.k.div_ceil(slice_len).max(1),
        slice_len,
        stages,
        max_registers: 0,
        ldmatrix: false,
        rotate_rows: false,
    }
}

fn float_dtype(operand: &'static str, dtype: DType) -> Result<(), WgradError> {
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 => Ok(()),
        dtype => Err(WgradError::DType { operand, dtype }),
    }
}

/// Elements between the first and one past the last addressed by `t`'s shape and strides.
fn span<R: CubeRuntime>(operand: &'static str, t: &CubeTensor<R>) -> Result<(), WgradError> {
    let (shape, strides) = (t.meta.shape(), t.meta.strides());
    let elements = 1 + shape
        .iter()
        .zip(strides.iter())
        .map(|(&n, &s)| n.saturating_sub(1) * s)
        .sum::<usize>();
    if elements >= 1 << 31 {
        return Err(WgradError::TooLarge { operand, elements });
    }
    Ok(())
}

/// `shape` as five sizes.
fn five(operand: &'static str, shape: &Shape) -> Result<[usize; 5], WgradError> {
    let s: Vec<usize> = shape.iter().copied().collect();
    s.clone()
        .try_into()
        .map_err(|_| WgradError::Rank { operand, shape: s })
}

/// Checks the operands' shapes and dtypes and returns the GEMM's sizes.
fn check_shapes(
    x: (&Shape, DType),
    grad_out: (&Shape, DType),
    kernel: [usize; 3],
    spec: &Conv3dSpec,
    out_dtype: DType,
) -> Result<WgradShape, WgradError> {
    let xs = five("x", x.0)?;
    let gs = five("grad_out", grad_out.0)?;
    float_dtype("x", x.1)?;
    float_dtype("grad_out", grad_out.1)?;
    float_dtype("the output", out_dtype)?;
    let fits = (0..3).all(|i| {
        kernel[i] >= 1 && spec.stride[i] >= 1 && xs[2 + i] + 2 * spec.padding[i] >= kernel[i]
    });
    let out: Vec<usize> = if fits {
        spec.output_size([xs[2], xs[3], xs[4]], kernel).to_vec()
    } else {
        Vec::new()
    };
    if !fits || gs[0] != xs[0] || gs[2..] != out[..] {
        return Err(WgradError::Shape(Box::new(ShapeMismatch {
            x: xs.to_vec(),
            grad_out: gs.to_vec(),
            kernel,
            stride: spec.stride,
            padding: spec.padding,
            batch: xs[0],
            out,
        })));
    }
    for (operand, dims) in [("x", xs), ("grad_out", gs)] {
        let elements = dims.iter().product::<usize>();
        if elements >= 1 << 31 {
            return Err(WgradError::TooLarge { operand, elements });
        }
    }
    Ok(WgradShape {
        m: gs[1],
        n: xs[1] * kernel.iter().product::<usize>(),
        k: gs[0] * gs[2] * gs[3] * gs[4],
    })
}

/// [`check_shapes`] on CubeCL tensors, with the spans their strides address.
fn check<R: CubeRuntime>(
    x: &CubeTensor<R>,
    grad_out: &CubeTensor<R>,
    kernel: [usize; 3],
    spec: &Conv3dSpec,
    out_dtype: DType,
) -> Result<WgradShape, WgradError> {
    let shape = check_shapes(
        (x.meta.shape(), x.dtype),
        (grad_out.meta.shape(), grad_out.dtype),
        kernel,
        spec,
        out_dtype,
    )?;
    span("x", x)?;
    span("grad_out", grad_out)?;
    Ok(shape)
}

/// `dL/dw` (`[c_out, c_in, kd, kh, kw]`, contiguous, in `out_dtype`) of the convolution
/// `spec` with kernel size `kernel`, from its input `x` and output gradient `grad_out` (both
/// logically `[b, c, d, h, w]`, any memory order: channels-last views of `[b, d, h, w, c]`
/// buffers are read in place; `spec.compute` is not consulted). The split of K follows
/// [`plan`] for this device.
pub fn conv3d_weight_grad<R: CubeRuntime>(
    x: CubeTensor<R>,
    grad_out: CubeTensor<R>,
    kernel: [usize; 3],
    spec: &Conv3dSpec,
    out_dtype: DType,
) -> Result<CubeTensor<R>, WgradError> {
    conv3d_weight_grad_split(x, grad_out, kernel, spec, out_dtype, None)
}

/// [`conv3d_weight_grad`] with the number of K slices forced (`Some`, for tests and tuning).
pub fn conv3d_weight_grad_split<R: CubeRuntime>(
    x: CubeTensor<R>,
    grad_out: CubeTensor<R>,
    kernel: [usize; 3],
    spec: &Conv3dSpec,
    out_dtype: DType,
    slices: Option<usize>,
) -> Result<CubeTensor<R>, WgradError> {
    let shape = check(&x, &grad_out, kernel, spec, out_dtype)?;
    let c_in = x.meta.shape()[1];
    let out_shape = Shape::new([shape.m, c_in, kernel[0], kernel[1], kernel[2]]);
    let client = x.client.clone();
    let dw = empty(&x, out_shape, out_dtype);
    if shape.m * shape.n == 0 {
        return Ok(dw);
    }
    let device = WgradDevice::of(&client);
    let which = choose_kernel(&x, &grad_out, shape.m);
    let tuning = conv_tuning();
    let plan = match which {
        PartialKernel::Vectors { .. } => WgradPlan {
            ldmatrix: tuning.ldmatrix && manual_mma(&x),
            ..plan_tensor_cores(shape, device, slices, &tuning)
        },
        PartialKernel::Narrow { x: width } => plan_narrow(shape, device, slices, width, &tuning),
        _ => plan(shape, device, slices),
    };
    // Channels-last when the channels are the input's innermost axis.
    let channels_last = x.meta.strides()[1] == 1 && c_in > 1;
    let ws = empty(&x, Shape::new([plan.slices, shape.m, shape.n]), DType::F32);
    launch_partial(
        x,
        grad_out,
        &ws,
        shape,
        plan,
        which,
        kernel,
        spec,
        channels_last,
    );
    let mn = shape.m * shape.n;
    let dim = CubeDim::new_1d(256);
    let count = calculate_cube_count_elemwise(&client, mn, dim);
    // SAFETY: the reduction reads `ws[s * mn + pos]` for `pos < mn`, `s < slices` (its
    // shape) and writes one element of `dw` (`[m, n]` in another order) per `pos`.
    unsafe {
        wgrad_reduce::launch_unchecked::<R>(
            &client,
            count,
            dim,
            ws.into_tensor_arg(),
            dw.clone().into_tensor_arg(),
            mn,
            shape.n,
            c_in,
            plan.slices,
            channels_last,
            out_dtype.into(),
        );
    }
    Ok(dw)
}
