//! GroupNorm's fusion operations: the kernels of [`super`] registered on burn's fused CubeCL
//! backends (one operation per pass, of one input or of two parts), the plain-op twins where
//! they do not run.

use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Shape};
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeRuntime, FloatElement, IntElement};
use burn_ir::OperationOutput;

use crate::compute::{Layout, NormEngine};
use crate::reference::norm::{
    backward_primitive, forward_primitive, parts_backward_primitive, parts_forward_primitive,
    GroupNormGrads, GroupNormOutput, GroupNormPartsGrads, GroupNormSpec, NormInput,
};
use crate::{norm, register, Fused, Kernel};

/// Whether the CubeCL GroupNorm computes `spec` on activations of `dtype`: when asked for, and
/// not for f64 (the kernels keep their statistics in f32; f64 stays on the plain-op reference).
fn group_norm_runs(spec: &GroupNormSpec, dtype: DType) -> bool {
    spec.engine == NormEngine::Kernel && matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
}

/// The GroupNorm forward as a fusion operation: inputs `x, gamma, beta` and the shift last
/// when there is one (or, `parts`, `a, b, gamma, beta`); outputs `y, mean, rstd`. Or,
/// `backward`, its backward: inputs `x, gamma, beta, mean, rstd, dy` and the shift last when
/// there is one (or `a, b, gamma, ...`); outputs the gradients of `x` (or of `a` and `b`),
/// `gamma`, `beta` and of the shift.
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
        let (x, second) = match self.parts {
            true => (next(), Some(next())),
            false => (next(), None),
        };
        let (gamma, beta) = (next(), next());
        if !self.backward {
            let (y, mean, rstd) = match second {
                Some(b) => norm::forward_parts(x, b, gamma, beta, &self.spec),
                None => norm::forward(x, inputs.next(), gamma, beta, &self.spec),
            };
            return vec![y, mean, rstd];
        }
        let (mean, rstd, dy) = (next(), next(), next());
        let input = match second {
            Some(b) => NormInput::Parts(x, b),
            None => NormInput::Shifted(x, inputs.next()),
        };
        let g = norm::backward(input, gamma, beta, mean, rstd, dy, &self.spec);
        g.x.into_iter()
            .chain([g.gamma, g.beta])
            .chain(g.shift)
            .collect()
    }
}

/// [`crate::KernelBackend::group_norm_forward`] on burn's fused CubeCL backends: the CubeCL
/// kernels as a fusion custom operation when `spec` asks for them, the plain-op twin otherwise
/// (and for f64).
pub fn group_norm_forward<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    x: FloatTensor<Fused<R, F, I, BT>>,
    shift: Option<FloatTensor<Fused<R, F, I, BT>>>,
    gamma: FloatTensor<Fused<R, F, I, BT>>,
    beta: FloatTensor<Fused<R, F, I, BT>>,
    spec: GroupNormSpec,
) -> GroupNormOutput<Fused<R, F, I, BT>> {
    if !group_norm_runs(&spec, x.dtype) {
        return forward_primitive::<Fused<R, F, I, BT>>(x, shift, gamma, beta, &spec);
    }
    let stats = Shape::new([x.shape[0], spec.num_groups]);
    let outputs = vec![
        (x.shape.clone(), x.dtype),
        (stats.clone(), DType::F32),
        (stats, DType::F32),
    ];
    let mut inputs = vec![x, gamma, beta];
    inputs.extend(shift);
    let [y, mean, rstd] = register::<R, F, I, BT, _>(
        "medddpm_group_norm_forward",
        inputs,
        outputs,
        GroupNorm {
            spec,
            backward: false,
            parts: false,
        },
    )
    .outputs();
    GroupNormOutput { y, mean, rstd }
}

/// [`crate::KernelBackend::group_norm_backward`] on burn's fused CubeCL backends (see
/// [`group_norm_forward`]): the fusion operation's inputs `x, gamma, beta, mean, rstd, dy` and
/// the shift last when there is one; its outputs the gradients of `x, gamma, beta` and of the
/// shift.
#[allow(clippy::too_many_arguments)]
pub fn group_norm_backward<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    x: FloatTensor<Fused<R, F, I, BT>>,
    shift: Option<FloatTensor<Fused<R, F, I, BT>>>,
    gamma: FloatTensor<Fused<R, F, I, BT>>,
    beta: FloatTensor<Fused<R, F, I, BT>>,
    mean: FloatTensor<Fused<R, F, I, BT>>,
    rstd: FloatTensor<Fused<R, F, I, BT>>,
    grad: FloatTensor<Fused<R, F, I, BT>>,
    spec: GroupNormSpec,
) -> GroupNormGrads<Fused<R, F, I, BT>> {
    if !group_norm_runs(&spec, x.dtype) {
        return backward_primitive::<Fused<R, F, I, BT>>(
            x, shift, gamma, beta, mean, rstd, grad, &spec,
        );
    }
    let mut outputs = vec![
        (x.shape.clone(), x.dtype),
        (gamma.shape.clone(), gamma.dtype),
        (beta.shape.clone(), beta.dtype),
    ];
    outputs.extend(shift.as_ref().map(|s| (s.shape.clone(), s.dtype)));
    let mut inputs = vec![x, gamma, beta, mean, rstd, grad];
    inputs.extend(shift);
    let mut grads = register::<R, F, I, BT, _>(
        "medddpm_group_norm_backward",
        inputs,
        outputs,
        GroupNorm {
            spec,
            backward: true,
            parts: false,
        },
    )
    .into_iter();
    let mut next = || grads.next().expect("the outputs registered");
    let (x, gamma, beta) = (next(), next(), next());
    GroupNormGrads {
        x,
        shift: grads.next(),
        gamma,
        beta,
    }
}

/// Whether the kernels normalise two parts of `dtype` as `spec` says (channels-last, see
/// [`norm::parts_run`]); else the plain-op twin, which joins them.
fn group_norm_parts_run(spec: &GroupNormSpec, dtype: DType) -> bool {
    group_norm_runs(spec, dtype) && spec.layout == Layout::Ndhwc
}

/// [`crate::KernelBackend::group_norm_parts_forward`] on burn's fused CubeCL backends: the
/// fusion operation's inputs `a, b, gamma, beta`, its outputs the joined `y`, `mean`, `rstd`;
/// the plain-op twin where the kernels do not run.
pub fn group_norm_parts_forward<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    a: FloatTensor<Fused<R, F, I, BT>>,
    b: FloatTensor<Fused<R, F, I, BT>>,
    gamma: FloatTensor<Fused<R, F, I, BT>>,
    beta: FloatTensor<Fused<R, F, I, BT>>,
    spec: GroupNormSpec,
) -> GroupNormOutput<Fused<R, F, I, BT>> {
    if !group_norm_parts_run(&spec, a.dtype) {
        return parts_forward_primitive::<Fused<R, F, I, BT>>(a, b, gamma, beta, &spec);
    }
    let mut joined = a.shape.clone();
    let last = joined.num_dims() - 1;
    joined[last] += b.shape[last];
    let stats = Shape::new([a.shape[0], spec.num_groups]);
    let outputs = vec![
        (joined, a.dtype),
        (stats.clone(), DType::F32),
        (stats, DType::F32),
    ];
    let [y, mean, rstd] = register::<R, F, I, BT, _>(
        "medddpm_group_norm_parts_forward",
        vec![a, b, gamma, beta],
        outputs,
        GroupNorm {
            spec,
            backward: false,
            parts: true,
        },
    )
    .outputs();
    GroupNormOutput { y, mean, rstd }
}

/// [`crate::KernelBackend::group_norm_parts_backward`] on burn's fused CubeCL backends (see
/// [`group_norm_parts_forward`]): the fusion operation's inputs `a, b, gamma, beta, mean,
/// rstd, dy`, its outputs the gradients of `a, b, gamma, beta`.
#[allow(clippy::too_many_arguments)]
pub fn group_norm_parts_backward<
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
>(
    a: FloatTensor<Fused<R, F, I, BT>>,
    b: FloatTensor<Fused<R, F, I, BT>>,
    gamma: FloatTensor<Fused<R, F, I, BT>>,
    beta: FloatTensor<Fused<R, F, I, BT>>,
    mean: FloatTensor<Fused<R, F, I, BT>>,
    rstd: FloatTensor<Fused<R, F, I, BT>>,
    grad: FloatTensor<Fused<R, F, I, BT>>,
    spec: GroupNormSpec,
) -> GroupNormPartsGrads<Fused<R, F, I, BT>> {
    if !group_norm_parts_run(&spec, a.dtype) {
        return parts_backward_primitive::<Fused<R, F, I, BT>>(
            a, b, gamma, beta, mean, rstd, grad, &spec,
        );
    }
    let outputs = [&a, &b, &gamma, &beta]
        .map(|t| (t.shape.clone(), t.dtype))
        .to_vec();
    let [da, db, gamma, beta] = register::<R, F, I, BT, _>(
        "medddpm_group_norm_parts_backward",
        vec![a, b, gamma, beta, mean, rstd, grad],
        outputs,
        GroupNorm {
            spec,
            backward: true,
            parts: true,
        },
    )
    .outputs();
    GroupNormPartsGrads {
        parts: [da, db],
        gamma,
        beta,
    }
}
