//! The micro-batches' gradients summed in f32 (see [`crate::adam::sum`]), and the gradients'
//! squared norm: a launch takes up to [`PAIRS_PER_LAUNCH`] pairs of tensors (or tensors), its
//! threads stride through each in turn (as the Adam kernel's, through [`super::lists`]).

use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Shape};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeRuntime, FloatElement, IntElement};
use cubecl::prelude::*;

use super::{lists, register, Fused, Kernel};
use crate::norm::cube_total;
use crate::reference::sum::{squared_norm_f32_primitive, sum_f32_primitive};

/// The most pairs one launch sums (three bindings each).
pub const PAIRS_PER_LAUNCH: usize = 32;

/// `out[k] = f32(a[k]) + f32(b[k])` for each tensor `k` of the lists.
#[cube(launch)]
fn sum_pairs<A: Float, G: Float>(
    a: &Sequence<Tensor<A>>,
    b: &Sequence<Tensor<G>>,
    out: &mut Sequence<Tensor<f32>>,
    stride: u32,
    #[define(A, G)] _dtypes: [StorageType; 2],
) {
    let count = comptime!(a.len());
    #[unroll]
    for k in 0..count {
        let x = a.index(k);
        let y = b.index(k);
        let o = out.index_mut(k);
        let len = x.len();
        let mut i = ABSOLUTE_POS;
        while i < len {
            o[i] = f32::cast_from(x[i]) + f32::cast_from(y[i]);
            i += stride as usize;
        }
    }
}

/// Per pair, the f32 sum; a launch takes consecutive pairs of one dtype pair.
pub fn run<R: CubeRuntime>(pairs: Vec<[CubeTensor<R>; 2]>) -> Vec<CubeTensor<R>> {
    let Some(first) = pairs.first() else {
        return Vec::new();
    };
    let per_launch = lists::per_launch(&first[0].client, 3, PAIRS_PER_LAUNCH);
    lists::in_launches(pairs, per_launch, |p| (p[0].dtype, p[1].dtype), launch)
}

/// One launch over pairs of one dtype pair.
fn launch<R: CubeRuntime>(pairs: Vec<[CubeTensor<R>; 2]>) -> Vec<CubeTensor<R>> {
    let client = pairs[0][0].client.clone();
    let device = pairs[0][0].device.clone();
    let (a_dtype, b_dtype) = (pairs[0][0].dtype, pairs[0][1].dtype);
    let pairs: Vec<[CubeTensor<R>; 2]> =
        pairs.into_iter().map(|p| p.map(into_contiguous)).collect();
    let outputs: Vec<CubeTensor<R>> = pairs
        .iter()
        .map(|[a, _]| {
            empty_device_contiguous_dtype::<R>(
                client.clone(),
                device.clone(),
                a.meta.shape().clone(),
                DType::F32,
            )
        })
        .collect();
    let longest = pairs
        .iter()
        .map(|[a, _]| a.meta.num_elements())
        .max()
        .unwrap_or(0);
    let (cubes, threads, stride) = lists::grid(longest);
    let side = |k: usize| -> Vec<TensorArg<R>> {
        pairs
            .iter()
            .map(|p| p[k].clone().into_tensor_arg())
            .collect()
    };
    let outs: Vec<TensorArg<R>> = outputs
        .iter()
        .map(|t| t.clone().into_tensor_arg())
        .collect();
    sum_pairs::launch::<R>(
        &client,
        cubes,
        threads,
        side(0).into_iter().collect(),
        side(1).into_iter().collect(),
        outs.into_iter().collect(),
        stride,
        [a_dtype.into(), b_dtype.into()],
    );
    outputs
}

/// The f32 sums of a list of pairs as one fusion operation: inputs the pairs' tensors in
/// turn, outputs one sum per pair.
#[derive(Debug)]
struct SumOp;

impl<R: CubeRuntime> Kernel<R> for SumOp {
    fn run(&self, inputs: Vec<CubeTensor<R>>) -> Vec<CubeTensor<R>> {
        let mut inputs = inputs.into_iter();
        let mut pairs = Vec::with_capacity(inputs.len() / 2);
        while let (Some(a), Some(b)) = (inputs.next(), inputs.next()) {
            pairs.push([a, b]);
        }
        run(pairs)
    }
}

/// A pair of tensors to sum, on burn's fused CubeCL backend.
type Pair<R, F, I, BT> = [FloatTensor<Fused<R, F, I, BT>>; 2];

/// [`crate::KernelBackend::sum_f32`] on burn's fused CubeCL backends: one fusion operation for
/// the whole list when every dtype is f32, f16 or bf16; the plain-op twin otherwise (f64).
pub fn sum_f32<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    pairs: Vec<Pair<R, F, I, BT>>,
) -> Vec<FloatTensor<Fused<R, F, I, BT>>> {
    let float = |d: DType| matches!(d, DType::F32 | DType::F16 | DType::BF16);
    let runs =
        |p: &Pair<R, F, I, BT>| float(p[0].dtype) && float(p[1].dtype) && p[0].shape == p[1].shape;
    if pairs.is_empty() || !pairs.iter().all(runs) {
        return sum_f32_primitive::<Fused<R, F, I, BT>>(pairs);
    }
    let outputs = pairs
        .iter()
        .map(|[a, _]| (a.shape.clone(), DType::F32))
        .collect();
    let inputs = pairs.into_iter().flatten().collect();
    register::<R, F, I, BT, _>("medddpm_sum_f32", inputs, outputs, SumOp)
}

/// Per cube, the sum of squares (f32) of its threads' strided shares of every tensor of the
/// list, at `partials[offset + CUBE_POS]`: no atomics, so the same gradients give the same
/// norm on every run.
#[cube(launch)]
fn squares_partials<G: Float>(
    x: &Sequence<Tensor<G>>,
    partials: &mut Tensor<f32>,
    offset: u32,
    stride: u32,
    #[comptime] threads: usize,
    #[define(G)] _dtype: StorageType,
) {
    let count = comptime!(x.len());
    let mut acc = 0.0f32;
    #[unroll]
    for k in 0..count {
        let t = x.index(k);
        let len = t.len();
        let mut i = ABSOLUTE_POS;
        while i < len {
            let v = f32::cast_from(t[i]);
            acc += v * v;
            i += stride as usize;
        }
    }
    let mut shared = SharedMemory::<f32>::new(threads);
    let total = cube_total(&mut shared, acc);
    if UNIT_POS == 0 {
        partials[offset as usize + CUBE_POS] = total;
    }
}

/// One cube adds every partial sum into `out[0]`.
#[cube(launch)]
fn partials_total(partials: &Tensor<f32>, out: &mut Tensor<f32>, #[comptime] threads: usize) {
    let mut acc = 0.0f32;
    let mut i = UNIT_POS as usize;
    while i < partials.len() {
        acc += partials[i];
        i += threads;
    }
    let mut shared = SharedMemory::<f32>::new(threads);
    let total = cube_total(&mut shared, acc);
    if UNIT_POS == 0 {
        out[0] = total;
    }
}

/// The sum of squares of every value of `tensors`, as a one-value f32 tensor: a launch per
/// group of consecutive tensors of one dtype (as many as the bindings allow), each cube
/// writing its partial sum, then one cube adding them.
pub fn squared_norm_run<R: CubeRuntime>(tensors: Vec<CubeTensor<R>>) -> CubeTensor<R> {
    let client = tensors[0].client.clone();
    let device = tensors[0].device.clone();
    let per_launch = lists::per_launch(&client, 1, PAIRS_PER_LAUNCH);
    let tensors: Vec<CubeTensor<R>> = tensors.into_iter().map(into_contiguous).collect();
    let groups = lists::in_launches(tensors, per_launch, |t| t.dtype, |g| vec![g]);
    let grids: Vec<_> = groups
        .iter()
        .map(|g| lists::grid(g.iter().map(|t| t.meta.num_elements()).max().unwrap_or(0)))
        .collect();
    let cubes = |count: &CubeCount| match count {
        CubeCount::Static(x, _, _) => *x,
        _ => unreachable!("lists::grid gives a static count"),
    };
    let total_cubes: u32 = grids.iter().map(|(count, ..)| cubes(count)).sum();
    let buffer = |n: usize| {
        empty_device_contiguous_dtype::<R>(client.clone(), device.clone(), [n].into(), DType::F32)
    };
    let partials = buffer(total_cubes as usize);
    let mut offset = 0u32;
    for (group, (count, dim, stride)) in groups.into_iter().zip(grids) {
        let n = cubes(&count);
        let dtype = group[0].dtype;
        let args: Vec<TensorArg<R>> = group.iter().map(|t| t.clone().into_tensor_arg()).collect();
        squares_partials::launch::<R>(
            &client,
            count,
            dim,
            args.into_iter().collect(),
            partials.clone().into_tensor_arg(),
            offset,
            stride,
            dim.x as usize,
            dtype.into(),
        );
        offset += n;
    }
    let out = buffer(1);
    let threads = lists::CUBE_SIZE as usize;
    partials_total::launch::<R>(
        &client,
        CubeCount::Static(1, 1, 1),
        CubeDim::new_1d(threads as u32),
        partials.into_tensor_arg(),
        out.clone().into_tensor_arg(),
        threads,
    );
    out
}

/// The squared norm as one fusion operation: inputs the tensors, output one value.
#[derive(Debug)]
struct SquaredNormOp;

impl<R: CubeRuntime> Kernel<R> for SquaredNormOp {
    fn run(&self, inputs: Vec<CubeTensor<R>>) -> Vec<CubeTensor<R>> {
        vec![squared_norm_run(inputs)]
    }
}

/// [`crate::KernelBackend::squared_norm_f32`] on burn's fused CubeCL backends: one fusion
/// operation for the whole list when every dtype is f32, f16 or bf16; the plain-op twin
/// otherwise (f64).
pub fn squared_norm_f32<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    tensors: Vec<FloatTensor<Fused<R, F, I, BT>>>,
) -> FloatTensor<Fused<R, F, I, BT>> {
    let float = |d: DType| matches!(d, DType::F32 | DType::F16 | DType::BF16);
    if tensors.is_empty() || !tensors.iter().all(|t| float(t.dtype)) {
        return squared_norm_f32_primitive::<Fused<R, F, I, BT>>(tensors);
    }
    let outputs = vec![(Shape::new([1]), DType::F32)];
    let mut out =
        register::<R, F, I, BT, _>("medddpm_squared_norm_f32", tensors, outputs, SquaredNormOp);
    out.remove(0)
}
