//! burn's CUDA tensors as cuDNN sees them: shapes and strides, operands packed (and outputs
//! allocated) in the memory order of the activations' layout.

use burn::tensor::{DType, Shape};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::ops::permute;
use burn_cubecl::tensor::CubeTensor;
use cubecl_cuda::CudaRuntime;

use crate::compute::Layout;

/// A tensor of burn's CUDA backend.
pub(super) type Tensor = CubeTensor<CudaRuntime>;

/// `t` (logically `[b, c, d, h, w]`) with memory packed in `layout`'s order.
pub(super) fn packed(t: Tensor, layout: Layout) -> Tensor {
    match layout {
        Layout::Ncdhw => {
            if t.is_contiguous() {
                t
            } else {
                into_contiguous(t)
            }
        }
        Layout::Ndhwc => {
            let cl = permute(t, &[0, 2, 3, 4, 1]);
            let cl = if cl.is_contiguous() {
                cl
            } else {
                into_contiguous(cl)
            };
            permute(cl, &[0, 4, 1, 2, 3])
        }
    }
}

/// A new `[b, c, d, h, w]` tensor with memory in `layout`'s order.
pub(super) fn empty_like_layout(
    template: &Tensor,
    dims: [usize; 5],
    layout: Layout,
    dtype: DType,
) -> Tensor {
    let [b, c, d, h, w] = dims;
    match layout {
        Layout::Ncdhw => empty_device_contiguous_dtype(
            template.client.clone(),
            template.device.clone(),
            Shape::new(dims),
            dtype,
        ),
        Layout::Ndhwc => permute(
            empty_device_contiguous_dtype(
                template.client.clone(),
                template.device.clone(),
                Shape::new([b, d, h, w, c]),
                dtype,
            ),
            &[0, 4, 1, 2, 3],
        ),
    }
}

/// The five dimensions of `t`.
pub(super) fn dims5(t: &Tensor) -> [usize; 5] {
    let s = t.meta.shape();
    [s[0], s[1], s[2], s[3], s[4]]
}

/// The five strides of `t`, in elements, as cuDNN takes them.
pub(super) fn strides5(t: &Tensor) -> [i32; 5] {
    let s = t.meta.strides();
    [
        s[0] as i32,
        s[1] as i32,
        s[2] as i32,
        s[3] as i32,
        s[4] as i32,
    ]
}
