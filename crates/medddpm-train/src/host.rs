//! Reading tensors back to the host.

use burn::tensor::{backend::Backend, Tensor};

/// `t`'s values as f32, in row-major order (whatever the tensor's dtype).
pub(crate) fn f32_values<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .expect("f32 data")
}
