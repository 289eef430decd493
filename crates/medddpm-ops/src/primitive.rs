//! Between burn's `Tensor` and the backend primitives that the methods of
//! `KernelBackend` take and return (used by the trait, its reference
//! twins and the engines alike, so it sits below all of them).

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorPrimitive};

/// A float tensor's primitive.
pub fn float<B: Backend, const D: usize>(t: Tensor<B, D>) -> FloatTensor<B> {
    t.into_primitive().tensor()
}

/// A float primitive as a tensor of rank `D`.
pub fn tensor<B: Backend, const D: usize>(t: FloatTensor<B>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(t))
}

/// Writes public functions that call a backend method on tensors instead of primitives: each
/// entry gives the signature and the call (its operands through [`float`]), and the macro wraps
/// the call's result in [`tensor`]. The extension's calls for the layers and the plain-op twins
/// are all this one lift, so it is written once.
#[macro_export]
macro_rules! on_tensors {
    ($(
        $(#[$meta:meta])*
        fn $name:ident<$b:ident: $bound:path>($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty = $call:expr;
    )*) => {$(
        $(#[$meta])*
        pub fn $name<$b: $bound>($($arg: $ty),*) -> $ret {
            $crate::primitive::tensor($call)
        }
    )*};
}
