//! GroupNorm's fusion operations: the kernels of [`super`] registered on burn's fused CubeCL
//! backends (one operation per pass, of one input or of two parts), the plain-op twins where
//! they do not run.

use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Shape, TensorMetadata};
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeRuntime, FloatElement, IntElement};
use burn_ir::OperationOutput;

use crate::compute::{Layout, NormEngine};
use crate::reference::norm::{
    backward_primitive, forward_primitive, GroupNormGrads, GroupNormOutput, GroupNormSpec,
    NormInput,
};
use crate::{norm, register, Fused, Kernel};

/// The GroupNorm forward as a fusion operation: inputs `x, gamma, beta` and the input's second
/// tensor last where it has one (the shift, or with `parts` the second part); outputs `y,
/// mean, rstd`. Or, `backward`, its backward: inputs `x, gamma, beta, mean, rstd, dy` and the
/// second tensor last; outputs the gradients of `x, gamma, beta` and of the second tensor.
#[derive(Debug)]
struct GroupNorm {
    spec: GroupNormSpec,
    backward: bool,
    parts: bool,
}

impl<R: CubeRuntime> Kernel<R> for GroupNorm {
    fn run(&self, inputs: Vec<CubeTensor<R>>) -> Vec<CubeTensor<R>> {
        let mut inputs = inputs.into_iter();
        let mut next = || inputs.next().expect("the inputs registered");
        let (x, gamma, beta) = (next(), next(), next());
        if !self.backward {
            let input = NormInput::from_pair(x, inputs.next(), self.parts);
            let (y, mean, rstd) = norm::forward(input, gamma, beta, &self.spec);
            return vec![y, mean, rstd];
        }
        let (mean, rstd, dy) = (next(), next(), next());
        let input = NormInput::from_pair(x, inputs.next(), self.parts);
        let g = norm::backward(input, gamma, beta, mean, rstd, dy, &self.spec);
        let (dx, second) = g.input.into_pair();
        [dx, g.gamma, g.beta].into_iter().chain(second).collect()
    }
}

/// Whether the CubeCL kernels compute `spec` of `input`: when asked for, not for f64 (the
/// kernels keep their statistics in f32; f64 stays on the plain-op reference), and two parts
/// only channels-last (else the plain-op twin, which joins them).
fn runs_on<T: TensorMetadata>(spec: &GroupNormSpec, input: &NormInput<T>) -> bool {
    let (NormInput::Shifted(x, _) | NormInput::Parts(x, _)) = input;
    spec.engine == NormEngine::Kernel
        && matches!(x.dtype(), DType::F32 | DType::F16 | DType::BF16)
        && (!input.is_parts() || spec.layout == Layout::Ndhwc)
}

/// [`crate::KernelBackend::group_norm_forward`] on burn's fused CubeCL backends: the CubeCL
/// kernels as a fusion custom operation when `spec` asks for them ([`runs_on`]), the plain-op
/// twin otherwise (and for f64). Of two parts the output is their join's shape.
pub fn group_norm_forward<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    input: NormInput<FloatTensor<Fused<R, F, I, BT>>>,
    gamma: FloatTensor<Fused<R, F, I, BT>>,
    beta: FloatTensor<Fused<R, F, I, BT>>,
    spec: GroupNormSpec,
) -> GroupNormOutput<Fused<R, F, I, BT>> {
    if !runs_on(&spec, &input) {
        return forward_primitive::<Fused<R, F, I, BT>>(input, gamma, beta, &spec);
    }
    let parts = input.is_parts();
    let (x, second) = input.into_pair();
    let mut y = x.shape.clone();
    if let (true, Some(b)) = (parts, &second) {
        let last = y.num_dims() - 1;
        y[last] += b.shape[last];
    }
    let stats = Shape::new([x.shape[0], spec.num_groups]);
    let outputs = vec![
        (y, x.dtype),
        (stats.clone(), DType::F32),
        (stats, DType::F32),
    ];
    let mut inputs = vec![x, gamma, beta];
    inputs.extend(second);
    let [y, mean, rstd] = register::<R, F, I, BT, _>(
        "medddpm_group_norm_forward",
        inputs,
        outputs,
        GroupNorm {
            spec,
            backward: false,
            parts,
        },
    )
    .outputs();
    GroupNormOutput { y, mean, rstd }
}

/// [`crate::KernelBackend::group_norm_backward`] on burn's fused CubeCL backends (see
/// [`group_norm_forward`]): the fusion operation's inputs `x, gamma, beta, mean, rstd, dy` and
/// the input's second tensor last where it has one; its outputs the gradients of `x, gamma,
/// beta` and of the second tensor.
#[allow(clippy::too_many_arguments)]
pub fn group_norm_backward<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    input: NormInput<FloatTensor<Fused<R, F, I, BT>>>,
    gamma: FloatTensor<Fused<R, F, I, BT>>,
    beta: FloatTensor<Fused<R, F, I, BT>>,
    mean: FloatTensor<Fused<R, F, I, BT>>,
    rstd: FloatTensor<Fused<R, F, I, BT>>,
    grad: FloatTensor<Fused<R, F, I, BT>>,
    spec: GroupNormSpec,
) -> GroupNormGrads<Fused<R, F, I, BT>> {
    if !runs_on(&spec, &input) {
        return backward_primitive::<Fused<R, F, I, BT>>(
            input, gamma, beta, mean, rstd, grad, &spec,
        );
    }
    let parts = input.is_parts();
    let (x, second) = input.into_pair();
    let shape = |t: &FloatTensor<Fused<R, F, I, BT>>| (t.shape.clone(), t.dtype);
    let mut outputs = vec![shape(&x), shape(&gamma), shape(&beta)];
    outputs.extend(second.as_ref().map(shape));
    let mut inputs = vec![x, gamma, beta, mean, rstd, grad];
    inputs.extend(second);
    let mut grads = register::<R, F, I, BT, _>(
        "medddpm_group_norm_backward",
        inputs,
        outputs,
        GroupNorm {
            spec,
            backward: true,
            parts,
        },
    )
    .into_iter();
    let mut next = || grads.next().expect("the outputs registered");
    let (dx, gamma, beta) = (next(), next(), next());
    GroupNormGrads {
        input: NormInput::from_pair(dx, grads.next(), parts),
        gamma,
        beta,
    }
}
