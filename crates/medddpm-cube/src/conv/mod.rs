//! Our portable 3-D convolutions: CubeCL kernels that run the same on every CubeCL runtime
//! (wgpu/Vulkan, CUDA), for strict-FP32 and 16-bit activations alike (f32 accumulation).
//!
//! One implicit-GEMM kernel (`gemm`) computes every product: rows are output voxels
//! (`batch * od * oh * ow`), columns output channels, the reduction the kernel taps times the
//! input channels. A cube of 256 units computes a block of rows and channels (128 x 64 for the
//! U-Net's 64 to 256 channels, see [`Tile::choose`]), each unit a register tile of 8 x 4
//! fused multiply-adds per step, with the input patch (gathered on the fly, zero padding
//! included: an implicit im2col) and the weight chunk staged through shared memory as f32.
//! Addresses come from strides, so channels-first and channels-last activations (burn tensors
//! with permuted strides) go through the same code; only which index runs fastest across
//! threads changes with the layout, so that loads and stores stay coalesced.
//!
//! - [`conv3d_forward`] (`forward`): one launch, the weight permuted to
//!   `[kd, kh, kw, c_in, c_out]` first (a small copy) so weight loads are contiguous.
//! - [`conv3d_data_grad`] (`dgrad`): the same kernel on `dL/dy` with the weight walked flipped
//!   and channels swapped; a strided convolution by phase decomposition, one launch per phase
//!   of `dL/dx` (8 at stride 2), each a stride-1 correlation with that phase's sub-kernel.
//! - `fused`: both as burn-fusion custom operations on burn's fused CubeCL backends (what
//!   `burn::backend::Wgpu` and `burn::backend::Cuda` are), like the other kernels in
//!   [`crate`].
//!
//! The weight gradient (split-K over the voxels) lives in its own module.
//!
//! **Tensor cores.** Where the operands are f16 or bf16 and the runtime lists 16 x 16 x 16
//! cooperative matrices of that type with f32 accumulators on 32-unit planes (CUDA's WMMA;
//! Vulkan's `VK_KHR_cooperative_matrix` when wgpu compiles to SPIR-V, feature `vulkan`; never
//! burn's WGSL), the operands are staged in their 16-bit type and the product runs on tensor
//! cores (`mma`, `Tile::choose_tensor_cores`; the weight gradient's `wgrad_mma`), the next
//! step's operands loaded into registers while this step's products run. Channels-last
//! operands whose channel counts and strides allow it are read and staged as vectors of up to
//! 8 channels (`launch::vector_widths`; 4 on wgpu). How they pipeline the reduction (shared-
//! memory stages, channels per step, a register cap on CUDA, the weight gradient's stages and
//! tile width) is [`ConvTuning`], defaults measured on an H100. Elsewhere the register-tiled
//! FMA kernel runs. Both accumulate in f32 from the same operands, so they differ only in the
//! order of the sums.
//!
//! Limits: dilation 1, one group (all the U-Net uses); every tensor under 2^31 elements (the
//! kernel's offsets are 32-bit).

mod dgrad;
pub mod engine;
mod forward;
mod fused;
mod gemm;
mod launch;
mod mma;
pub(crate) mod mma_ldm;
mod mma_parts;
mod narrow;
mod tile;
mod tuning;
pub mod wgrad;

pub use dgrad::conv3d_data_grad;
pub use forward::conv3d_forward;
pub use fused::{conv3d_data_grad_fused, conv3d_forward_fused};
pub use narrow::MAX_NARROW_CHANNELS;
pub use tile::Tile;
pub use tuning::{conv_tuning, set_conv_tuning, ConvTuning, TuningError};

use burn::tensor::{DType, Shape};
use burn_cubecl::ops::permute;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;

use crate::compute::Layout;
use crate::empty;

/// Why the kernels cannot convolve these operands.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CubeConvError {
    /// An operand is not a rank-5 tensor.
    #[error("the {what} must be a rank-5 tensor, got shape {shape:?}")]
    Rank {
        /// Which operand.
        what: &'static str,
        /// Its shape.
        shape: Vec<usize>,
    },
    /// The weight's input channels differ from the input's channels.
    #[error("the weight {weight:?} expects {} input channels, the input {input:?} has {}", weight[1], input[1])]
    Channels {
        /// Input shape `[b, c, d, h, w]`.
        input: [usize; 5],
        /// Weight shape `[c_out, c_in, kd, kh, kw]`.
        weight: [usize; 5],
    },
    /// A stride of zero, or a kernel larger than the padded input.
    #[error("kernel {kernel:?} with stride {stride:?} and padding {padding:?} does not fit an input of {size:?} voxels")]
    Window {
        /// Input spatial size.
        size: [usize; 3],
        /// Kernel spatial size.
        kernel: [usize; 3],
        /// Stride.
        stride: [usize; 3],
        /// Padding.
        padding: [usize; 3],
    },
    /// The output gradient's shape is not the convolution's output shape.
    #[error("the output gradient has shape {got:?}, the convolution gives {want:?}")]
    GradShape {
        /// Its shape.
        got: [usize; 5],
        /// The convolution's output shape.
        want: [usize; 5],
    },
    /// A dtype the kernels do not take (they read and write f32, f16 and bf16).
    #[error("the convolution kernels take f32, f16 or bf16 tensors, not {dtype:?}")]
    DType {
        /// The operand's dtype.
        dtype: DType,
    },
    /// A tensor too large for the kernel's 32-bit offsets.
    #[error("{elements} elements is more than the convolution kernels address (2^31)")]
    TooLarge {
        /// Elements of the largest tensor.
        elements: usize,
    },
}

/// Whether the kernels read and write `dtype`.
pub fn supports(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
}

/// `Ok` when the kernels take every dtype in `dtypes`.
fn check_dtypes(dtypes: &[DType]) -> Result<(), CubeConvError> {
    match dtypes.iter().find(|d| !supports(**d)) {
        Some(&dtype) => Err(CubeConvError::DType { dtype }),
        None => Ok(()),
    }
}

/// `shape` as five sizes.
fn five(shape: &Shape, what: &'static str) -> Result<[usize; 5], CubeConvError> {
    let dims: Vec<usize> = shape.iter().copied().collect();
    dims.clone()
        .try_into()
        .map_err(|_| CubeConvError::Rank { what, shape: dims })
}

/// The output's spatial size of input `x` `[b, c_in, d, h, w]` and weight `w`
/// `[c_out, c_in, kd, kh, kw]`, after checking that they fit together and the kernel.
fn check(
    x: [usize; 5],
    w: [usize; 5],
    stride: [usize; 3],
    padding: [usize; 3],
) -> Result<[usize; 3], CubeConvError> {
    if x[1] != w[1] {
        return Err(CubeConvError::Channels {
            input: x,
            weight: w,
        });
    }
    let (size, kernel) = ([x[2], x[3], x[4]], [w[2], w[3], w[4]]);
    if (0..3).any(|a| stride[a] == 0 || size[a] + 2 * padding[a] < kernel[a]) {
        return Err(CubeConvError::Window {
            size,
            kernel,
            stride,
            padding,
        });
    }
    let out: [usize; 3] =
        std::array::from_fn(|a| (size[a] + 2 * padding[a] - kernel[a]) / stride[a] + 1);
    let elements = [
        x.iter().product::<usize>(),
        w.iter().product(),
        x[0] * w[0] * out.iter().product::<usize>(),
    ]
    .into_iter()
    .max()
    .unwrap_or(0);
    if elements >= 1 << 31 {
        return Err(CubeConvError::TooLarge { elements });
    }
    Ok(out)
}

/// A new `[b, c, d, h, w]` tensor on `like`'s device in its dtype, in `layout`'s memory order
/// (channels-last: the permuted view of a contiguous `[b, d, h, w, c]` buffer).
fn empty_in_layout<R: CubeRuntime>(
    like: &CubeTensor<R>,
    [b, c, d, h, w]: [usize; 5],
    layout: Layout,
) -> CubeTensor<R> {
    let new = |shape: [usize; 5]| empty(like, Shape::new(shape), like.dtype);
    match layout {
        Layout::Ncdhw => new([b, c, d, h, w]),
        Layout::Ndhwc => permute(new([b, d, h, w, c]), &[0, 4, 1, 2, 3]),
    }
}
