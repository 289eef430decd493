//! cuDNN's descriptors of one convolution (input, output, filter, the convolution itself),
//! with the data and math types that precision asks for.

use burn::tensor::DType;
use cudarc::cudnn::sys;

use super::layout::{dims5, strides5, Tensor};
use super::library::check;
use crate::compute::{Layout, Precision};
use crate::error::EngineError;
use crate::reference::conv_spec::Conv3dSpec;

/// cuDNN's data type for `dtype`, if it has one.
pub(super) fn data_type(dtype: DType) -> Option<sys::cudnnDataType_t> {
    match dtype {
        DType::F32 => Some(sys::cudnnDataType_t::CUDNN_DATA_FLOAT),
        DType::BF16 => Some(sys::cudnnDataType_t::CUDNN_DATA_BFLOAT16),
        DType::F16 => Some(sys::cudnnDataType_t::CUDNN_DATA_HALF),
        _ => None,
    }
}

fn math_type(precision: Precision) -> sys::cudnnMathType_t {
    match precision {
        // No tensor cores, so no TF32 rounding: IEEE f32 fused multiply-adds.
        Precision::Fp32 => sys::cudnnMathType_t::CUDNN_FMA_MATH,
        // What PyTorch uses for f32 with TF32 allowed: tensor cores with TF32 operands.
        Precision::Tf32 => sys::cudnnMathType_t::CUDNN_DEFAULT_MATH,
        Precision::Bf16 | Precision::F16 => sys::cudnnMathType_t::CUDNN_TENSOR_OP_MATH,
    }
}

/// Descriptors of one convolution, destroyed on drop.
pub(super) struct Descriptors {
    pub x: sys::cudnnTensorDescriptor_t,
    pub y: sys::cudnnTensorDescriptor_t,
    pub w: sys::cudnnFilterDescriptor_t,
    pub conv: sys::cudnnConvolutionDescriptor_t,
    /// The same shape for the graph API's plans (16-bit precisions only).
    pub geometry: Option<super::graph::Geometry>,
}

// Never changed after `Descriptors::new`; cuDNN only reads them.
unsafe impl Send for Descriptors {}
unsafe impl Sync for Descriptors {}

impl Drop for Descriptors {
    fn drop(&mut self) {
        // SAFETY: created by `Descriptors::new` and not used after this.
        unsafe {
            sys::cudnnDestroyTensorDescriptor(self.x);
            sys::cudnnDestroyTensorDescriptor(self.y);
            sys::cudnnDestroyFilterDescriptor(self.w);
            sys::cudnnDestroyConvolutionDescriptor(self.conv);
        }
    }
}

impl Descriptors {
    /// `x` and `y` as they lie in memory; the filter `[k, c, kd, kh, kw]` in `layout`'s format.
    pub(super) fn new(
        x: &Tensor,
        y: &Tensor,
        w_dims: [usize; 5],
        spec: &Conv3dSpec,
        dtype: sys::cudnnDataType_t,
    ) -> Result<Self, EngineError> {
        let mut d = Descriptors {
            x: std::ptr::null_mut(),
            y: std::ptr::null_mut(),
            w: std::ptr::null_mut(),
            conv: std::ptr::null_mut(),
            geometry: None,
        };
        let i32s = |a: [usize; 5]| a.map(|v| v as i32);
        let i3 = |a: [usize; 3]| a.map(|v| v as i32);
        // SAFETY: plain descriptor calls on locals; arrays outlive the calls.
        unsafe {
            check(sys::cudnnCreateTensorDescriptor(&mut d.x), "create x")?;
            check(sys::cudnnCreateTensorDescriptor(&mut d.y), "create y")?;
            check(sys::cudnnCreateFilterDescriptor(&mut d.w), "create w")?;
            check(
                sys::cudnnCreateConvolutionDescriptor(&mut d.conv),
                "create conv",
            )?;
            let (xd, xs) = (i32s(dims5(x)), strides5(x));
            check(
                sys::cudnnSetTensorNdDescriptor(d.x, dtype, 5, xd.as_ptr(), xs.as_ptr()),
                "x descriptor",
            )?;
            let (yd, ys) = (i32s(dims5(y)), strides5(y));
            check(
                sys::cudnnSetTensorNdDescriptor(d.y, dtype, 5, yd.as_ptr(), ys.as_ptr()),
                "y descriptor",
            )?;
            let format = match spec.compute.layout {
                Layout::Ncdhw => sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
                Layout::Ndhwc => sys::cudnnTensorFormat_t::CUDNN_TENSOR_NHWC,
            };
            let wd = i32s(w_dims);
            check(
                sys::cudnnSetFilterNdDescriptor(d.w, dtype, format, 5, wd.as_ptr()),
                "filter descriptor",
            )?;
            let (pad, stride, dil) = (i3(spec.padding), i3(spec.stride), [1i32; 3]);
            check(
                sys::cudnnSetConvolutionNdDescriptor(
                    d.conv,
                    3,
                    pad.as_ptr(),
                    stride.as_ptr(),
                    dil.as_ptr(),
                    sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                    sys::cudnnDataType_t::CUDNN_DATA_FLOAT,
                ),
                "convolution descriptor",
            )?;
            check(
                sys::cudnnSetConvolutionMathType(d.conv, math_type(spec.compute.precision)),
                "math type",
            )?;
        }
        Ok(d)
    }
}
