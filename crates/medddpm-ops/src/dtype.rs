//! Casts between float dtypes, shared by the reference twins, the agreement checks and the
//! U-Net.

use burn::tensor::backend::Backend;
use burn::tensor::{DType, FloatDType, Tensor};

/// `x` in the dtype reductions (normalisation statistics, softmax) run in: f64 stays f64,
/// everything else goes to f32.
pub fn to_stats<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    match x.dtype() {
        DType::F64 | DType::F32 => x,
        _ => cast_to(x, DType::F32),
    }
}

/// `x` in `dtype` (a no-op when it already is); `dtype` must be a float type.
pub fn cast_to<B: Backend, const D: usize>(x: Tensor<B, D>, dtype: DType) -> Tensor<B, D> {
    if x.dtype() == dtype {
        return x;
    }
    let target = match dtype {
        DType::F64 => FloatDType::F64,
        DType::F32 => FloatDType::F32,
        DType::F16 => FloatDType::F16,
        DType::BF16 => FloatDType::BF16,
        other => panic!("cast_to: {other:?} is not a float dtype"),
    };
    x.cast(target)
}
