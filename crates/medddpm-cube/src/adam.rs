//! Adam updates of many parameter tensors in few kernels (see [`crate::adam`]): a launch takes
//! up to [`TENSORS_PER_LAUNCH`] tensors, its threads stride through each in turn, and each
//! thread reads a parameter, its gradient and both moments and writes the updated values.
//! Arithmetic in f32, in the order of [`crate::adam::adam_step_reference`].
//!
//! One launch per parameter tensor made the optimizer hundreds of launches per training step,
//! each costing the host more than the GPU its arithmetic; the tensor lists are CubeCL
//! `Sequence`s, unrolled when the kernel is compiled (one compiled kernel per list length).

use burn::tensor::DType;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use cubecl::prelude::*;

use super::lists;
use crate::empty;
use crate::reference::adam::{AdamStep, AdamTensors};

/// One parameter tensor's inputs, as CubeCL tensors.
type Item<R, F, I, BT> = AdamTensors<CubeBackend<R, F, I, BT>>;

/// The most tensors one launch updates (each brings seven or eight bindings).
pub const TENSORS_PER_LAUNCH: usize = 32;

/// The scalars every element's update uses.
#[derive(CubeType, CubeLaunch)]
struct Scalars {
    beta_1: f32,
    one_minus_beta_1: f32,
    beta_2: f32,
    one_minus_beta_2: f32,
    combined: f32,
    eps_hat: f32,
    lr: f32,
    /// Threads in the launch: each thread's step through a tensor.
    stride: u32,
}

/// Parameters and moments in `F`, gradients in `G` (a bf16 forward pass gives bf16 gradients
/// for the f32 master weights), and with `with_copy` the updated parameters also written in
/// `W` (the next forward pass's working copies, so no cast runs between the optimizer and the
/// network; without it `copies` is empty). With `in_place` the updated values overwrite the
/// inputs (each thread reads an element before it writes it, and no other thread touches it)
/// and the `*_out` lists are empty.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn adam_update<F: Float, G: Float, W: Float>(
    params: &mut Sequence<Tensor<F>>,
    grads: &Sequence<Tensor<G>>,
    moments_1: &mut Sequence<Tensor<F>>,
    moments_2: &mut Sequence<Tensor<F>>,
    params_out: &mut Sequence<Tensor<F>>,
    moments_1_out: &mut Sequence<Tensor<F>>,
    moments_2_out: &mut Sequence<Tensor<F>>,
    copies: &mut Sequence<Tensor<W>>,
    s: Scalars,
    #[comptime] in_place: bool,
    #[comptime] with_copy: bool,
    #[define(F, G, W)] _dtypes: [StorageType; 3],
) {
    let count = comptime!(params.len());
    #[unroll]
    for k in 0..count {
        let param = params.index_mut(k);
        let grad = grads.index(k);
        let moment_1 = moments_1.index_mut(k);
        let moment_2 = moments_2.index_mut(k);
        let len = param.len();
        let mut i = ABSOLUTE_POS;
        while i < len {
            let g = f32::cast_from(grad[i]);
            let m = f32::cast_from(moment_1[i]) * s.beta_1 + g * s.one_minus_beta_1;
            let v = f32::cast_from(moment_2[i]) * s.beta_2 + (g * g) * s.one_minus_beta_2;
            let update = (m * s.combined) / (f32::sqrt(v) + s.eps_hat);
            // The master value rounded to F first, so that the copy is exactly the cast of the
            // parameter the optimizer keeps (what casting it again would give).
            let p = F::cast_from(f32::cast_from(param[i]) - update * s.lr);
            if comptime!(in_place) {
                param[i] = p;
                moment_1[i] = F::cast_from(m);
                moment_2[i] = F::cast_from(v);
            } else {
                let param_out = params_out.index_mut(k);
                let moment_1_out = moments_1_out.index_mut(k);
                let moment_2_out = moments_2_out.index_mut(k);
                param_out[i] = p;
                moment_1_out[i] = F::cast_from(m);
                moment_2_out[i] = F::cast_from(v);
            }
            if comptime!(with_copy) {
                let copy = copies.index_mut(k);
                copy[i] = W::cast_from(p);
            }
            i += s.stride as usize;
        }
    }
}

/// Per item, in order: `[param, moment_1, moment_2]` after one update (parameter and moments
/// of one shape and dtype, the gradient of that shape in any float dtype), and with `copy` the
/// updated parameter in that dtype as a fourth tensor (the inputs' buffers where the update
/// may overwrite them, see [`in_place`]). A launch takes consecutive items of one parameter and
/// gradient dtype (the optimizer passes one dtype pair per call), all updated in place or none.
pub fn run<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    items: Vec<Item<R, F, I, BT>>,
    step: AdamStep,
    copy: Option<DType>,
) -> Vec<Vec<CubeTensor<R>>> {
    let Some(first) = items.first() else {
        return Vec::new();
    };
    let per_launch = lists::per_launch(&first.param.client, 8, TENSORS_PER_LAUNCH);
    let items: Vec<Item<R, F, I, BT>> = items.into_iter().map(contiguous).collect();
    lists::in_launches(
        items,
        per_launch,
        |t| (t.param.dtype, t.grad.dtype, in_place(t)),
        |group| launch(group, step, copy),
    )
}

/// Whether the update may overwrite `t`'s parameter and moments (made contiguous by
/// [`run`]): it holds their only references (burn-fusion hands over a tensor's buffer at its
/// last use), so nothing reads the old values again. Saves three allocations per parameter
/// tensor, each a blocking round trip from burn-fusion's thread to the device's.
fn in_place<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    t: &Item<R, F, I, BT>,
) -> bool {
    [&t.param, &t.moment_1, &t.moment_2]
        .iter()
        .all(|x| x.can_mut())
}

/// One launch over contiguous items of one parameter and gradient dtype, all updated in place
/// or none.
fn launch<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    items: Vec<Item<R, F, I, BT>>,
    step: AdamStep,
    copy: Option<DType>,
) -> Vec<Vec<CubeTensor<R>>> {
    let client = items[0].param.client.clone();
    let dtype = items[0].param.dtype;
    let grad_dtype = items[0].grad.dtype;
    let overwrite = in_place(&items[0]);
    let outputs: Vec<Vec<CubeTensor<R>>> = items
        .iter()
        .map(|t| outputs_of(t, dtype, copy, overwrite))
        .collect();
    let longest = items
        .iter()
        .map(|t| t.param.meta.num_elements())
        .max()
        .unwrap_or(0);
    let (cubes, threads, stride) = lists::grid(longest);
    let (combined, eps_hat) = step.factors();
    let scalars = ScalarsLaunch::new(
        step.beta_1,
        1.0 - step.beta_1,
        step.beta_2,
        1.0 - step.beta_2,
        combined,
        eps_hat,
        step.lr as f32,
        stride,
    );
    let args = |f: &dyn Fn(usize) -> CubeTensor<R>| -> Vec<TensorArg<R>> {
        (0..items.len()).map(|k| f(k).into_tensor_arg()).collect()
    };
    // In place, the outputs are the inputs: no second binding of a buffer.
    let outs = |j: usize| match overwrite {
        true => Vec::new(),
        false => args(&|k| outputs[k][j].clone()),
    };
    let params = args(&|k| items[k].param.clone());
    let grads = args(&|k| items[k].grad.clone());
    let moments_1 = args(&|k| items[k].moment_1.clone());
    let moments_2 = args(&|k| items[k].moment_2.clone());
    let copies = match copy {
        Some(_) => args(&|k| outputs[k][3].clone()),
        None => Vec::new(),
    };
    let copy_dtype = copy.unwrap_or(dtype);
    adam_update::launch::<R>(
        &client,
        cubes,
        threads,
        params.into_iter().collect(),
        grads.into_iter().collect(),
        moments_1.into_iter().collect(),
        moments_2.into_iter().collect(),
        outs(0).into_iter().collect(),
        outs(1).into_iter().collect(),
        outs(2).into_iter().collect(),
        copies.into_iter().collect(),
        scalars,
        overwrite,
        copy.is_some(),
        [dtype.into(), grad_dtype.into(), copy_dtype.into()],
    );
    outputs
}

/// `t` with every tensor contiguous (the kernel indexes them as flat arrays).
fn contiguous<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    t: Item<R, F, I, BT>,
) -> Item<R, F, I, BT> {
    Item {
        param: into_contiguous(t.param),
        grad: into_contiguous(t.grad),
        moment_1: into_contiguous(t.moment_1),
        moment_2: into_contiguous(t.moment_2),
        recycle: t.recycle,
    }
}

/// The buffers one item's update writes: `[param, moment_1, moment_2]` in `dtype` (the
/// inputs' own with `overwrite`), and with `copy` the working copy in that dtype.
fn outputs_of<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    t: &Item<R, F, I, BT>,
    dtype: DType,
    copy: Option<DType>,
    overwrite: bool,
) -> Vec<CubeTensor<R>> {
    let out = |like: &CubeTensor<R>, dtype: DType| empty(like, like.meta.shape().clone(), dtype);
    let mut o = match overwrite {
        true => vec![t.param.clone(), t.moment_1.clone(), t.moment_2.clone()],
        false => vec![
            out(&t.param, dtype),
            out(&t.param, dtype),
            out(&t.param, dtype),
        ],
    };
    if let Some(c) = copy {
        // The old copy's buffer when this update is its only holder (nothing reads it
        // again), a new one otherwise.
        let reuse = t.recycle.as_ref().filter(|r| {
            r.dtype == c
                && r.meta.shape() == t.param.meta.shape()
                && r.is_contiguous()
                && r.can_mut()
        });
        o.push(match reuse {
            Some(r) => r.clone(),
            None => out(&t.param, c),
        });
    }
    o
}
