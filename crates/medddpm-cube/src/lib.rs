//! Our portable CubeCL kernels for every CubeCL backend (CUDA and wgpu/Vulkan alike),
//! registered as burn-fusion custom operations so they run in order with the fused stream
//! around them (as burn-vision registers its kernels): the 3-D convolutions and their gradients
//! (`conv`), GroupNorm + SiLU (`norm`), trilinear x2 upsampling, the channel join / split /
//! padding, Adam and the f32 gradient sum. Each has its plain-op reference twin in
//! `medddpm_ops::reference`, which the tests compare it to; `medddpm-kernels` calls them from
//! its backend trait.
#![warn(missing_docs)]
// Empty without a GPU backend (see the crate's features).
#![cfg(feature = "kernels")]

pub mod adam;
pub mod channels;
pub mod conv;
mod lists;
pub mod norm;
pub mod sum;
pub mod upsample;

use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Shape};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, OperationOutput, TensorIr};
use cubecl::{CubeCount, CubeDim};

// The layers below, under the paths the kernels were written with.
pub(crate) use medddpm_ops::{compute, primitive, reference};

use crate::compute::NormEngine;
use crate::reference::adam::{adam_steps_primitive, AdamOutput, AdamStep, AdamTensors};
use crate::reference::norm::{
    backward_primitive, forward_primitive, GroupNormGrads, GroupNormOutput, GroupNormSpec,
};
use crate::reference::upsample::{upsample_trilinear_x2_backward_in, upsample_trilinear_x2_in};

type Cube<R, F, I, BT> = CubeBackend<R, F, I, BT>;
type Fused<R, F, I, BT> = Fusion<Cube<R, F, I, BT>>;
type Handles<R, F, I, BT> = HandleContainer<
    <<Cube<R, F, I, BT> as FusionBackend>::FusionRuntime as FusionRuntime>::FusionHandle,
>;

/// Whether the CubeCL GroupNorm computes `spec` on activations of `dtype`: when asked for, and
/// not for f64 (the kernels keep their statistics in f32; f64 stays on the plain-op reference).
fn group_norm_runs(spec: &GroupNormSpec, dtype: DType) -> bool {
    spec.engine == NormEngine::Kernel && matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
}

/// A custom operation's float inputs, in order.
fn float_inputs<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    desc: &CustomOpIr,
    handles: &mut Handles<R, F, I, BT>,
) -> std::vec::IntoIter<CubeTensor<R>> {
    desc.inputs
        .iter()
        .map(|ir| handles.get_float_tensor::<Cube<R, F, I, BT>>(ir))
        .collect::<Vec<_>>()
        .into_iter()
}

/// The GroupNorm forward as a fusion operation: inputs `x, gamma, beta` and the shift last
/// when there is one; outputs `y, mean, rstd`.
#[derive(Debug, Clone)]
struct GroupNormForward<B> {
    desc: CustomOpIr,
    spec: GroupNormSpec,
    _b: core::marker::PhantomData<B>,
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>
    Operation<<Cube<R, F, I, BT> as FusionBackend>::FusionRuntime>
    for GroupNormForward<Cube<R, F, I, BT>>
{
    fn execute(&self, handles: &mut Handles<R, F, I, BT>) {
        let mut inputs = float_inputs::<R, F, I, BT>(&self.desc, handles);
        let mut next = || inputs.next().expect("the inputs registered");
        let (x, gamma, beta) = (next(), next(), next());
        let shift = inputs.next();
        let (y, mean, rstd) = norm::forward(x, shift, gamma, beta, &self.spec);
        let [y_ir, mean_ir, rstd_ir] = [0, 1, 2].map(|i| &self.desc.outputs[i]);
        handles.register_float_tensor::<Cube<R, F, I, BT>>(&y_ir.id, y);
        handles.register_float_tensor::<Cube<R, F, I, BT>>(&mean_ir.id, mean);
        handles.register_float_tensor::<Cube<R, F, I, BT>>(&rstd_ir.id, rstd);
    }
}

#[derive(Debug, Clone)]
struct GroupNormBackward<B> {
    desc: CustomOpIr,
    spec: GroupNormSpec,
    _b: core::marker::PhantomData<B>,
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>
    Operation<<Cube<R, F, I, BT> as FusionBackend>::FusionRuntime>
    for GroupNormBackward<Cube<R, F, I, BT>>
{
    fn execute(&self, handles: &mut Handles<R, F, I, BT>) {
        let mut inputs = float_inputs::<R, F, I, BT>(&self.desc, handles);
        let mut next = || inputs.next().expect("the inputs registered");
        let (x, gamma, beta, mean, rstd, dy) = (next(), next(), next(), next(), next(), next());
        let shift = inputs.next();
        let (dx, dgamma, dbeta, dshift) =
            group_norm_backward_cube::<R>(x, shift, gamma, beta, mean, rstd, dy, &self.spec);
        let outputs = &self.desc.outputs;
        handles.register_float_tensor::<Cube<R, F, I, BT>>(&outputs[0].id, dx);
        handles.register_float_tensor::<Cube<R, F, I, BT>>(&outputs[1].id, dgamma);
        handles.register_float_tensor::<Cube<R, F, I, BT>>(&outputs[2].id, dbeta);
        if let Some(dshift) = dshift {
            handles.register_float_tensor::<Cube<R, F, I, BT>>(&outputs[3].id, dshift);
        }
    }
}

/// What the backward pass gives on CubeCL tensors: `(dx, d_gamma, d_beta, d_shift)`.
type CubeNormGrads<R> = (
    CubeTensor<R>,
    CubeTensor<R>,
    CubeTensor<R>,
    Option<CubeTensor<R>>,
);

/// The backward pass on CubeCL tensors: the one reduction over the activation, the
/// `[b, c]`-sized arithmetic and the input gradient, four kernel launches in all.
#[allow(clippy::too_many_arguments)]
fn group_norm_backward_cube<R: CubeRuntime>(
    x: CubeTensor<R>,
    shift: Option<CubeTensor<R>>,
    gamma: CubeTensor<R>,
    beta: CubeTensor<R>,
    mean: CubeTensor<R>,
    rstd: CubeTensor<R>,
    dy: CubeTensor<R>,
    spec: &GroupNormSpec,
) -> CubeNormGrads<R> {
    let x = into_contiguous(x);
    let shift = shift.map(into_contiguous);
    let dy = into_contiguous(dy);
    let gamma = into_contiguous(gamma);
    let beta = into_contiguous(beta);
    let mean = into_contiguous(mean);
    let rstd = into_contiguous(rstd);
    let shift = shift.as_ref();
    let sums = norm::backward_channel_sums(&x, shift, &gamma, &beta, &mean, &rstd, &dy, spec);
    let b = x.meta.shape()[0];
    let values_per_group = x.meta.num_elements() / b / spec.num_groups;
    let ([m1, m2, d_gamma, d_beta], d_shift) =
        norm::backward_param_grads(&sums, shift, &gamma, &rstd, spec, values_per_group);
    let dx = norm::backward_input_grad(x, shift, gamma, beta, mean, rstd, dy, m1, m2, spec);
    (dx, d_gamma, d_beta, d_shift)
}

/// The launch of one thread per each of `n` items, in cubes of 256 threads (the elementwise
/// passes of GroupNorm, the upsampling and the channel copies).
pub(crate) fn elementwise<R: CubeRuntime>(t: &CubeTensor<R>, n: usize) -> (CubeCount, CubeDim) {
    let dim = CubeDim::new_1d(256);
    (
        cubecl::calculate_cube_count_elemwise(&t.client, n, dim),
        dim,
    )
}

/// The widest vector of neighbouring elements the device loads at once (16 bytes on CUDA) that
/// divides every count in `counts`: what the copy-like kernels give a thread along the last
/// axis.
pub(crate) fn widest_vector<R: CubeRuntime>(t: &CubeTensor<R>, counts: &[usize]) -> usize {
    t.client
        .io_optimized_vector_sizes(t.dtype.size())
        .find(|v| counts.iter().all(|c| c.is_multiple_of(*v)))
        .unwrap_or(1)
}

fn register<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement, O>(
    name: &'static str,
    inputs: Vec<FloatTensor<Fused<R, F, I, BT>>>,
    outputs: Vec<(Shape, DType)>,
    make: impl FnOnce(CustomOpIr) -> O,
) -> Vec<FloatTensor<Fused<R, F, I, BT>>>
where
    O: Operation<<Cube<R, F, I, BT> as FusionBackend>::FusionRuntime> + 'static,
{
    let client = inputs[0].client.clone();
    let streams = OperationStreams::with_inputs(inputs.iter());
    let outs: Vec<TensorIr> = outputs
        .into_iter()
        .map(|(shape, dtype)| TensorIr::uninit(client.create_empty_handle(), shape, dtype))
        .collect();
    let irs: Vec<TensorIr> = inputs.into_iter().map(|t| t.into_ir()).collect();
    let desc = CustomOpIr::new(name, &irs, &outs);
    client.register(streams, OperationIr::Custom(desc.clone()), make(desc))
}

#[derive(Debug, Clone)]
struct Upsample<B> {
    desc: CustomOpIr,
    layout: crate::compute::Layout,
    backward: bool,
    _b: core::marker::PhantomData<B>,
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>
    Operation<<Cube<R, F, I, BT> as FusionBackend>::FusionRuntime> for Upsample<Cube<R, F, I, BT>>
{
    fn execute(&self, handles: &mut Handles<R, F, I, BT>) {
        let ([input], [out_ir]) = self.desc.as_fixed();
        let input = handles.get_float_tensor::<Cube<R, F, I, BT>>(input);
        let out = upsample::run(input, self.layout, self.backward);
        handles.register_float_tensor::<Cube<R, F, I, BT>>(&out_ir.id, out);
    }
}

/// Whether the CubeCL upsampling handles `dtype` (f64 stays on the plain ops).
fn upsample_runs(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
}

/// [`crate::KernelBackend::upsample_trilinear_x2`] on burn's fused CubeCL backends: the CubeCL
/// kernel, or the plain ops for f64.
pub fn upsample_trilinear_x2<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    x: FloatTensor<Fused<R, F, I, BT>>,
    layout: crate::compute::Layout,
) -> FloatTensor<Fused<R, F, I, BT>> {
    if upsample_runs(x.dtype) {
        upsample_fused::<R, F, I, BT>(x, layout, false)
    } else {
        primitive::float(upsample_trilinear_x2_in::<Fused<R, F, I, BT>>(
            primitive::tensor(x),
            layout,
        ))
    }
}

/// [`crate::KernelBackend::upsample_trilinear_x2_backward`] on burn's fused CubeCL backends.
pub fn upsample_trilinear_x2_backward<
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
>(
    grad: FloatTensor<Fused<R, F, I, BT>>,
    layout: crate::compute::Layout,
) -> FloatTensor<Fused<R, F, I, BT>> {
    if upsample_runs(grad.dtype) {
        upsample_fused::<R, F, I, BT>(grad, layout, true)
    } else {
        primitive::float(upsample_trilinear_x2_backward_in::<Fused<R, F, I, BT>>(
            primitive::tensor(grad),
            layout,
        ))
    }
}

/// The upsampling kernel (or, `backward`, its backward) as a fusion custom operation.
fn upsample_fused<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    x: FloatTensor<Fused<R, F, I, BT>>,
    layout: crate::compute::Layout,
    backward: bool,
) -> FloatTensor<Fused<R, F, I, BT>> {
    let out_shape = upsample::output_shape(&x.shape, layout, backward);
    let name = if backward {
        "medddpm_upsample_trilinear_x2_backward"
    } else {
        "medddpm_upsample_trilinear_x2"
    };
    let dtype = x.dtype;
    let [y] =
        register::<R, F, I, BT, _>(name, vec![x], vec![(out_shape, dtype)], |desc| Upsample::<
            Cube<R, F, I, BT>,
        > {
            desc,
            layout,
            backward,
            _b: core::marker::PhantomData,
        })
        .outputs();
    y
}

/// [`crate::KernelBackend::group_norm_forward`] on burn's fused CubeCL backends: the CubeCL
/// kernels when `spec` asks for them, the plain-op twin otherwise (and for f64).
pub fn group_norm_forward<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    x: FloatTensor<Fused<R, F, I, BT>>,
    shift: Option<FloatTensor<Fused<R, F, I, BT>>>,
    gamma: FloatTensor<Fused<R, F, I, BT>>,
    beta: FloatTensor<Fused<R, F, I, BT>>,
    spec: GroupNormSpec,
) -> GroupNormOutput<Fused<R, F, I, BT>> {
    if group_norm_runs(&spec, x.dtype) {
        group_norm_forward_fused(x, shift, gamma, beta, spec)
    } else {
        forward_primitive::<Fused<R, F, I, BT>>(x, shift, gamma, beta, &spec)
    }
}

/// [`crate::KernelBackend::group_norm_backward`] on burn's fused CubeCL backends (see
/// [`group_norm_forward`]).
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
    if group_norm_runs(&spec, x.dtype) {
        group_norm_backward_fused(x, shift, gamma, beta, mean, rstd, grad, spec)
    } else {
        backward_primitive::<Fused<R, F, I, BT>>(x, shift, gamma, beta, mean, rstd, grad, &spec)
    }
}

/// The GroupNorm forward kernels as a fusion custom operation.
fn group_norm_forward_fused<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    x: FloatTensor<Fused<R, F, I, BT>>,
    shift: Option<FloatTensor<Fused<R, F, I, BT>>>,
    gamma: FloatTensor<Fused<R, F, I, BT>>,
    beta: FloatTensor<Fused<R, F, I, BT>>,
    spec: GroupNormSpec,
) -> GroupNormOutput<Fused<R, F, I, BT>> {
    let stats = Shape::new([x.shape[0], spec.num_groups]);
    let outputs = vec![
        (x.shape.clone(), x.dtype),
        (stats.clone(), DType::F32),
        (stats, DType::F32),
    ];
    let mut inputs = vec![x, gamma, beta];
    inputs.extend(shift);
    let [y, mean, rstd] =
        register::<R, F, I, BT, _>("medddpm_group_norm_forward", inputs, outputs, |desc| {
            GroupNormForward::<Cube<R, F, I, BT>> {
                desc,
                spec,
                _b: core::marker::PhantomData,
            }
        })
        .outputs();
    GroupNormOutput { y, mean, rstd }
}

/// The GroupNorm backward kernels as a fusion custom operation: inputs `x, gamma, beta, mean,
/// rstd, dy` and the shift last when there is one; outputs the gradients of `x, gamma, beta`
/// and of the shift.
#[allow(clippy::too_many_arguments)]
fn group_norm_backward_fused<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    x: FloatTensor<Fused<R, F, I, BT>>,
    shift: Option<FloatTensor<Fused<R, F, I, BT>>>,
    gamma: FloatTensor<Fused<R, F, I, BT>>,
    beta: FloatTensor<Fused<R, F, I, BT>>,
    mean: FloatTensor<Fused<R, F, I, BT>>,
    rstd: FloatTensor<Fused<R, F, I, BT>>,
    grad: FloatTensor<Fused<R, F, I, BT>>,
    spec: GroupNormSpec,
) -> GroupNormGrads<Fused<R, F, I, BT>> {
    let mut outputs = vec![
        (x.shape.clone(), x.dtype),
        (gamma.shape.clone(), gamma.dtype),
        (beta.shape.clone(), beta.dtype),
    ];
    outputs.extend(shift.as_ref().map(|s| (s.shape.clone(), s.dtype)));
    let mut inputs = vec![x, gamma, beta, mean, rstd, grad];
    inputs.extend(shift);
    let mut grads =
        register::<R, F, I, BT, _>("medddpm_group_norm_backward", inputs, outputs, |desc| {
            GroupNormBackward::<Cube<R, F, I, BT>> {
                desc,
                spec,
                _b: core::marker::PhantomData,
            }
        })
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

#[derive(Debug, Clone)]
struct AdamOp<B> {
    desc: CustomOpIr,
    step: AdamStep,
    copy: Option<DType>,
    /// Per item, whether a copy to recycle follows its four inputs.
    recycled: Vec<bool>,
    _b: core::marker::PhantomData<B>,
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>
    Operation<<Cube<R, F, I, BT> as FusionBackend>::FusionRuntime> for AdamOp<Cube<R, F, I, BT>>
{
    fn execute(&self, handles: &mut Handles<R, F, I, BT>) {
        let mut inputs = float_inputs::<R, F, I, BT>(&self.desc, handles);
        let mut next = || inputs.next().expect("the inputs registered");
        let items = self
            .recycled
            .iter()
            .map(|&recycled| AdamTensors::<Cube<R, F, I, BT>> {
                param: next(),
                grad: next(),
                moment_1: next(),
                moment_2: next(),
                recycle: recycled.then(&mut next),
            })
            .collect();
        let results = adam::run(items, self.step, self.copy);
        for (ir, t) in self.desc.outputs.iter().zip(results.into_iter().flatten()) {
            handles.register_float_tensor::<Cube<R, F, I, BT>>(&ir.id, t);
        }
    }
}

/// [`crate::KernelBackend::adam_steps`] on burn's fused CubeCL backends: one fusion
/// operation for the whole list (a kernel launch per few dozen tensors) when every dtype is
/// f32, f16 or bf16; the plain-op twin otherwise (f64).
pub fn adam_steps<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    items: Vec<AdamTensors<Fused<R, F, I, BT>>>,
    step: AdamStep,
    copy: Option<DType>,
) -> Vec<AdamOutput<Fused<R, F, I, BT>>> {
    let float = |d: DType| matches!(d, DType::F32 | DType::F16 | DType::BF16);
    let runs = |t: &AdamTensors<Fused<R, F, I, BT>>| {
        float(t.param.dtype) && float(t.grad.dtype) && copy.is_none_or(float)
    };
    if items.is_empty() || !items.iter().all(runs) {
        return adam_steps_primitive::<Fused<R, F, I, BT>>(items, step, copy);
    }
    let per_item = 3 + copy.is_some() as usize;
    let mut inputs = Vec::with_capacity(items.len() * 5);
    let mut outputs = Vec::with_capacity(items.len() * per_item);
    let mut recycled = Vec::with_capacity(items.len());
    for t in items {
        let out = (t.param.shape.clone(), t.param.dtype);
        outputs.extend([out.clone(), out.clone(), out.clone()]);
        if let Some(dtype) = copy {
            outputs.push((out.0, dtype));
        }
        inputs.extend([t.param, t.grad, t.moment_1, t.moment_2]);
        recycled.push(t.recycle.is_some());
        inputs.extend(t.recycle);
    }
    let outputs =
        register::<R, F, I, BT, _>("medddpm_adam_steps", inputs, outputs, |desc| AdamOp::<
            Cube<R, F, I, BT>,
        > {
            desc,
            step,
            copy,
            recycled,
            _b: core::marker::PhantomData,
        });
    let mut outputs = outputs.into_iter();
    let mut results = Vec::with_capacity(outputs.len() / per_item);
    while let (Some(param), Some(moment_1), Some(moment_2)) =
        (outputs.next(), outputs.next(), outputs.next())
    {
        let copy = copy.and_then(|_| outputs.next());
        results.push(AdamOutput {
            updated: [param, moment_1, moment_2],
            copy,
        });
    }
    results
}
