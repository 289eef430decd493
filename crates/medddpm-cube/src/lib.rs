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

pub use norm::fused::{group_norm_backward, group_norm_forward};

use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Shape};
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use burn_fusion::stream::Operation;
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer, OperationOutput};
use cubecl::{CubeCount, CubeDim};

// The layers below, under the paths the kernels were written with.
pub(crate) use medddpm_ops::{compute, primitive, reference};

use crate::reference::adam::{adam_steps_primitive, AdamOutput, AdamStep, AdamTensors};
use crate::reference::upsample::{upsample_trilinear_x2_backward_in, upsample_trilinear_x2_in};

type Cube<R, F, I, BT> = CubeBackend<R, F, I, BT>;
type Fused<R, F, I, BT> = Fusion<Cube<R, F, I, BT>>;
type Handles<R, F, I, BT> = HandleContainer<
    <<Cube<R, F, I, BT> as FusionBackend>::FusionRuntime as FusionRuntime>::FusionHandle,
>;

/// What one of our fusion operations computes: its outputs, in the order they were registered,
/// from its float inputs in theirs. [`CustomOp`] runs any of them.
trait Kernel<R: CubeRuntime>: core::fmt::Debug + Send + Sync + 'static {
    fn run(&self, inputs: Vec<CubeTensor<R>>) -> Vec<CubeTensor<R>>;
}

/// A [`Kernel`] registered as a burn-fusion custom operation ([`register`]).
#[derive(Debug)]
struct CustomOp<B, K> {
    desc: CustomOpIr,
    kernel: K,
    _b: core::marker::PhantomData<B>,
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement, K: Kernel<R>>
    Operation<<Cube<R, F, I, BT> as FusionBackend>::FusionRuntime>
    for CustomOp<Cube<R, F, I, BT>, K>
{
    fn execute(&self, handles: &mut Handles<R, F, I, BT>) {
        let inputs = self
            .desc
            .inputs
            .iter()
            .map(|ir| handles.get_float_tensor::<Cube<R, F, I, BT>>(ir))
            .collect();
        let outputs = self.kernel.run(inputs);
        for (ir, t) in self.desc.outputs.iter().zip(outputs) {
            handles.register_float_tensor::<Cube<R, F, I, BT>>(&ir.id, t);
        }
    }
}

/// A fixed number of inputs, as registered.
fn fixed<const N: usize, T>(inputs: Vec<T>) -> [T; N] {
    let got = inputs.len();
    inputs
        .try_into()
        .unwrap_or_else(|_| panic!("{N} inputs registered, {got} given"))
}

/// A new contiguous tensor of `shape` and `dtype` on `like`'s device.
pub(crate) fn empty<R: CubeRuntime>(
    like: &CubeTensor<R>,
    shape: Shape,
    dtype: DType,
) -> CubeTensor<R> {
    empty_device_contiguous_dtype::<R>(like.client.clone(), like.device.clone(), shape, dtype)
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

/// Registers `kernel` as a fusion operation named `name` on `inputs`, giving tensors of
/// `outputs`.
fn register<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement, K: Kernel<R>>(
    name: &'static str,
    inputs: Vec<FloatTensor<Fused<R, F, I, BT>>>,
    outputs: Vec<(Shape, DType)>,
    kernel: K,
) -> Vec<FloatTensor<Fused<R, F, I, BT>>> {
    let client = inputs[0].client.clone();
    let op = |desc| CustomOp::<Cube<R, F, I, BT>, K> {
        desc,
        kernel,
        _b: core::marker::PhantomData,
    };
    medddpm_ops::fusion::register_custom(&client, name, inputs, outputs, op)
}

/// The upsampling (or, `backward`, its backward) as a fusion operation.
#[derive(Debug)]
struct Upsample {
    layout: crate::compute::Layout,
    backward: bool,
}

impl<R: CubeRuntime> Kernel<R> for Upsample {
    fn run(&self, inputs: Vec<CubeTensor<R>>) -> Vec<CubeTensor<R>> {
        let [input] = fixed(inputs);
        vec![upsample::run(input, self.layout, self.backward)]
    }
}

/// [`crate::KernelBackend::upsample_trilinear_x2`] on burn's fused CubeCL backends: the CubeCL
/// kernel, or the plain ops for f64.
pub fn upsample_trilinear_x2<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    x: FloatTensor<Fused<R, F, I, BT>>,
    layout: crate::compute::Layout,
) -> FloatTensor<Fused<R, F, I, BT>> {
    upsample_fused::<R, F, I, BT>(x, layout, false)
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
    upsample_fused::<R, F, I, BT>(grad, layout, true)
}

/// The upsampling kernel (or, `backward`, its backward) as a fusion custom operation; f64 on
/// the plain ops.
fn upsample_fused<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    x: FloatTensor<Fused<R, F, I, BT>>,
    layout: crate::compute::Layout,
    backward: bool,
) -> FloatTensor<Fused<R, F, I, BT>> {
    if !matches!(x.dtype, DType::F32 | DType::F16 | DType::BF16) {
        let plain = if backward {
            upsample_trilinear_x2_backward_in::<Fused<R, F, I, BT>>
        } else {
            upsample_trilinear_x2_in::<Fused<R, F, I, BT>>
        };
        return primitive::float(plain(primitive::tensor(x), layout));
    }
    let out_shape = upsample::output_shape(&x.shape, layout, backward);
    let name = if backward {
        "medddpm_upsample_trilinear_x2_backward"
    } else {
        "medddpm_upsample_trilinear_x2"
    };
    let dtype = x.dtype;
    let [y] = register::<R, F, I, BT, _>(
        name,
        vec![x],
        vec![(out_shape, dtype)],
        Upsample { layout, backward },
    )
    .outputs();
    y
}

/// The Adam update of a list of tensors as one fusion operation: per item `param, grad,
/// moment_1, moment_2` and, where `recycled`, a copy to recycle; outputs as [`adam::run`] gives
/// them.
#[derive(Debug)]
struct AdamOp<F, I, BT> {
    step: AdamStep,
    copy: Option<DType>,
    /// Per item, whether a copy to recycle follows its four inputs.
    recycled: Vec<bool>,
    /// The backend's element types, which name the items' type.
    _elements: core::marker::PhantomData<(F, I, BT)>,
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> Kernel<R>
    for AdamOp<F, I, BT>
{
    fn run(&self, inputs: Vec<CubeTensor<R>>) -> Vec<CubeTensor<R>> {
        let mut inputs = inputs.into_iter();
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
        results.into_iter().flatten().collect()
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
    let outputs = register::<R, F, I, BT, _>(
        "medddpm_adam_steps",
        inputs,
        outputs,
        AdamOp::<F, I, BT> {
            step,
            copy,
            recycled,
            _elements: core::marker::PhantomData,
        },
    );
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
