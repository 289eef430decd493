//! burn-fusion custom operations on burn's CUDA backend (cuDNN's convolutions, cuBLAS's
//! products, the graph replays): registering one in the fused stream, and the tensors its
//! execution gets.

use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Shape};
use burn_cubecl::{BoolElement, FloatElement, IntElement};
use burn_fusion::stream::Operation;
use burn_fusion::{FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer};

use crate::cuda::{Cube, Fused};

/// The tensors a custom operation executes on.
pub type Handles<F, I, BT> = HandleContainer<
    <<Cube<F, I, BT> as FusionBackend>::FusionRuntime as FusionRuntime>::FusionHandle,
>;

/// [`medddpm_ops::fusion::register_custom`] on burn's CUDA backend: registers `name` on
/// `inputs` with outputs of the given shapes and dtypes, executed by the operation `op` makes
/// of its description; `client` is the one of the inputs' device.
pub fn register<F, I, BT, O>(
    client: &burn_fusion::Client<<Cube<F, I, BT> as FusionBackend>::FusionRuntime>,
    name: &'static str,
    inputs: Vec<FloatTensor<Fused<F, I, BT>>>,
    outputs: impl IntoIterator<Item = (Shape, DType)>,
    op: impl FnOnce(CustomOpIr) -> O,
) -> Vec<FloatTensor<Fused<F, I, BT>>>
where
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
    O: Operation<<Cube<F, I, BT> as FusionBackend>::FusionRuntime> + 'static,
{
    medddpm_ops::fusion::register_custom(client, name, inputs, outputs, op)
}
