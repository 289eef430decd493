//! The micro-batches' gradients summed in f32 (see [`crate::adam::sum`]): a launch takes up to
//! [`PAIRS_PER_LAUNCH`] pairs of tensors, its threads stride through each in turn (as the
//! Adam kernel's, through [`super::lists`]).

use burn::tensor::ops::FloatTensor;
use burn::tensor::DType;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeRuntime, FloatElement, IntElement};
use cubecl::prelude::*;

use super::{lists, register, Fused, Kernel};
use crate::reference::sum::sum_f32_primitive;

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
