//! Registering our own operations in burn-fusion's streams, where they run in order with the
//! fused operations around them: medddpm-cube's kernels and the CUDA libraries' calls alike.

use burn::tensor::{DType, Shape};
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::{Client, FusionRuntime, FusionTensor};
use burn_ir::{CustomOpIr, OperationIr, TensorIr};

/// Registers `name` on `inputs` with outputs of the given shapes and dtypes, executed by the
/// operation `op` makes of its description; `client` is the one of the inputs' device.
pub fn register_custom<R, O>(
    client: &Client<R>,
    name: &'static str,
    inputs: Vec<FusionTensor<R>>,
    outputs: impl IntoIterator<Item = (Shape, DType)>,
    op: impl FnOnce(CustomOpIr) -> O,
) -> Vec<FusionTensor<R>>
where
    R: FusionRuntime + 'static,
    O: Operation<R> + 'static,
{
    let streams = OperationStreams::with_inputs(inputs.iter());
    let outputs: Vec<TensorIr> = outputs
        .into_iter()
        .map(|(shape, dtype)| TensorIr::uninit(client.create_empty_handle(), shape, dtype))
        .collect();
    let irs: Vec<TensorIr> = inputs.into_iter().map(|t| t.into_ir()).collect();
    let desc = CustomOpIr::new(name, &irs, &outputs);
    client.register(streams, OperationIr::Custom(desc.clone()), op(desc))
}
