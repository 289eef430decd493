//! The three convolution calls (forward, data gradient, weight gradient) on raw device
//! pointers, with a chosen algorithm and workspace.

use cudarc::cudnn::sys;

use super::descriptors::Descriptors;
use super::library::check;
use super::operands::{vp, ConvOp, Ptrs};
use crate::error::EngineError;

/// The workspace `op` needs with algorithm `algo` on these descriptors, as this cuDNN and GPU
/// see it (a choice read from the cache was timed by another run, perhaps on another GPU, and
/// cuDNN refuses a call given less than it needs with `CUDNN_STATUS_BAD_PARAM`).
pub(super) fn workspace_size(
    op: ConvOp,
    handle: sys::cudnnHandle_t,
    d: &Descriptors,
    algo: u32,
) -> Result<usize, EngineError> {
    if algo >= op.algo_count() {
        return Err(EngineError::Unsupported(format!(
            "cached algorithm {algo} out of range"
        )));
    }
    let mut bytes = 0usize;
    // SAFETY: plain queries on live descriptors; the algorithm is in range (checked above).
    let status = unsafe {
        match op {
            ConvOp::Forward => sys::cudnnGetConvolutionForwardWorkspaceSize(
                handle,
                d.x,
                d.w,
                d.conv,
                d.y,
                std::mem::transmute::<u32, sys::cudnnConvolutionFwdAlgo_t>(algo),
                &mut bytes,
            ),
            ConvOp::DataGrad => sys::cudnnGetConvolutionBackwardDataWorkspaceSize(
                handle,
                d.w,
                d.y,
                d.conv,
                d.x,
                std::mem::transmute::<u32, sys::cudnnConvolutionBwdDataAlgo_t>(algo),
                &mut bytes,
            ),
            ConvOp::WeightGrad => sys::cudnnGetConvolutionBackwardFilterWorkspaceSize(
                handle,
                d.x,
                d.y,
                d.conv,
                d.w,
                std::mem::transmute::<u32, sys::cudnnConvolutionBwdFilterAlgo_t>(algo),
                &mut bytes,
            ),
        }
    };
    check(status, "workspace size")?;
    Ok(bytes)
}

/// Enqueues `op` with algorithm `algo` on `handle`'s stream.
pub(super) fn launch(
    op: ConvOp,
    handle: sys::cudnnHandle_t,
    d: &Descriptors,
    p: &Ptrs,
    algo: u32,
    ws: u64,
    ws_size: usize,
) -> Result<(), EngineError> {
    if algo >= op.algo_count() {
        return Err(EngineError::Unsupported(format!(
            "cached algorithm {algo} out of range"
        )));
    }
    let (alpha, beta) = (1.0f32, 0.0f32);
    let a = &alpha as *const f32 as *const std::ffi::c_void;
    let b = &beta as *const f32 as *const std::ffi::c_void;
    // SAFETY: pointers are live buffers of the right sizes (descriptors built from the same
    // tensors); algorithm values are in range (checked above), so the enum transmutes are valid.
    let status = unsafe {
        match op {
            ConvOp::Forward => sys::cudnnConvolutionForward(
                handle,
                a,
                d.x,
                vp(p.x),
                d.w,
                vp(p.w),
                d.conv,
                std::mem::transmute::<u32, sys::cudnnConvolutionFwdAlgo_t>(algo),
                vp(ws),
                ws_size,
                b,
                d.y,
                vp(p.out),
            ),
            ConvOp::DataGrad => sys::cudnnConvolutionBackwardData(
                handle,
                a,
                d.w,
                vp(p.w),
                d.y,
                vp(p.dy),
                d.conv,
                std::mem::transmute::<u32, sys::cudnnConvolutionBwdDataAlgo_t>(algo),
                vp(ws),
                ws_size,
                b,
                d.x,
                vp(p.out),
            ),
            ConvOp::WeightGrad => sys::cudnnConvolutionBackwardFilter(
                handle,
                a,
                d.x,
                vp(p.x),
                d.y,
                vp(p.dy),
                d.conv,
                std::mem::transmute::<u32, sys::cudnnConvolutionBwdFilterAlgo_t>(algo),
                vp(ws),
                ws_size,
                b,
                d.w,
                vp(p.out),
            ),
        }
    };
    check(status, op.name())
}
