//! The join of two activations along the last axis, the split of a gradient back and the
//! zero-padding of channels (see [`crate::channels`]), one launch each: a thread copies a vector of up to 8 channels (the
//! largest the device loads at once that divides both parts' channel counts).

use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Shape};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeRuntime, FloatElement, IntElement};
use burn_ir::OperationOutput;
use cubecl::prelude::*;

use super::{elementwise, fixed, register, widest_vector, Fused, Kernel};
use crate::empty;
use crate::reference::channels::{cat_last_primitive, pad_last_primitive, split_last_primitive};

/// `out[r, 0..qa] = a[r]`, `out[r, qa..] = b[r]` (sizes in vectors).
#[cube(launch)]
fn join_last<F: Float, N: Size>(
    a: &Tensor<Vector<F, N>>,
    b: &Tensor<Vector<F, N>>,
    out: &mut Tensor<Vector<F, N>>,
    qa: usize,
    qb: usize,
    #[define(F)] _dtype: StorageType,
) {
    let pos = ABSOLUTE_POS;
    if pos >= out.len() {
        terminate!();
    }
    let q = qa + qb;
    let row = pos / q;
    let col = pos % q;
    if col < qa {
        out[pos] = a[row * qa + col];
    } else {
        out[pos] = b[row * qb + col - qa];
    }
}

/// The adjoint of [`join_last`]: `a[r] = x[r, 0..qa]`, `b[r] = x[r, qa..]`.
#[cube(launch)]
fn split_last_kernel<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    a: &mut Tensor<Vector<F, N>>,
    b: &mut Tensor<Vector<F, N>>,
    qa: usize,
    qb: usize,
    #[define(F)] _dtype: StorageType,
) {
    let pos = ABSOLUTE_POS;
    if pos >= x.len() {
        terminate!();
    }
    let q = qa + qb;
    let row = pos / q;
    let col = pos % q;
    if col < qa {
        a[row * qa + col] = x[pos];
    } else {
        b[row * qb + col - qa] = x[pos];
    }
}

/// `out[r, 0..c] = x[r]`, the other `q * N - c` channels zero (`q` in vectors of `N`).
#[cube(launch)]
fn pad_last_kernel<F: Float, N: Size>(
    x: &Tensor<F>,
    out: &mut Tensor<Vector<F, N>>,
    c: usize,
    q: usize,
    #[define(F)] _dtype: StorageType,
) {
    let n = out.vector_size();
    let pos = ABSOLUTE_POS;
    if pos >= out.len() {
        terminate!();
    }
    let row = pos / q;
    let first = (pos % q) * n;
    let mut v = Vector::<F, N>::empty();
    #[unroll]
    for i in 0..n {
        let ch = first + i;
        let mut value = F::from_int(0);
        if ch < c {
            value = x[row * c + ch];
        }
        v[i] = value;
    }
    out[pos] = v;
}

/// The zero-padding on CubeCL tensors: `x` `[.., c]` to `[.., channels]`.
pub fn pad<R: CubeRuntime>(x: CubeTensor<R>, channels: usize) -> CubeTensor<R> {
    let x = into_contiguous(x);
    let c = last(x.meta.shape());
    let out = empty(&x, with_last(x.meta.shape(), channels), x.dtype);
    let vector = widest_vector(&x, &[channels]);
    let (count, dim) = elementwise(&x, out.meta.num_elements() / vector);
    let client = x.client.clone();
    let dtype: StorageType = x.dtype.into();
    pad_last_kernel::launch::<R>(
        &client,
        count,
        dim,
        vector,
        x.into_tensor_arg(),
        out.clone().into_tensor_arg(),
        c,
        channels / vector,
        dtype,
    );
    out
}

fn last(shape: &Shape) -> usize {
    shape[shape.num_dims() - 1]
}

fn with_last(shape: &Shape, c: usize) -> Shape {
    let mut dims: Vec<usize> = shape.iter().copied().collect();
    *dims.last_mut().expect("rank >= 1") = c;
    Shape::from(dims)
}

/// The join on CubeCL tensors.
pub fn join<R: CubeRuntime>(a: CubeTensor<R>, b: CubeTensor<R>) -> CubeTensor<R> {
    let (a, b) = (into_contiguous(a), into_contiguous(b));
    let (ca, cb) = (last(a.meta.shape()), last(b.meta.shape()));
    let out = empty(&a, with_last(a.meta.shape(), ca + cb), a.dtype);
    let vector = widest_vector(&a, &[ca, cb]);
    let (count, dim) = elementwise(&a, out.meta.num_elements() / vector);
    let client = a.client.clone();
    let dtype: StorageType = a.dtype.into();
    join_last::launch::<R>(
        &client,
        count,
        dim,
        vector,
        a.into_tensor_arg(),
        b.into_tensor_arg(),
        out.clone().into_tensor_arg(),
        ca / vector,
        cb / vector,
        dtype,
    );
    out
}

/// The split on CubeCL tensors.
pub fn split<R: CubeRuntime>(x: CubeTensor<R>, first: usize) -> [CubeTensor<R>; 2] {
    let x = into_contiguous(x);
    let c = last(x.meta.shape());
    let (ca, cb) = (first, c - first);
    let part = |c| empty(&x, with_last(x.meta.shape(), c), x.dtype);
    let (a, b) = (part(ca), part(cb));
    let vector = widest_vector(&x, &[ca, cb]);
    let (count, dim) = elementwise(&x, x.meta.num_elements() / vector);
    let client = x.client.clone();
    let dtype: StorageType = x.dtype.into();
    split_last_kernel::launch::<R>(
        &client,
        count,
        dim,
        vector,
        x.into_tensor_arg(),
        a.clone().into_tensor_arg(),
        b.clone().into_tensor_arg(),
        ca / vector,
        cb / vector,
        dtype,
    );
    [a, b]
}

/// Whether the kernels copy `dtype` (f64 stays on the plain ops) and both parts are non-empty.
fn runs(dtype: DType, ca: usize, cb: usize) -> bool {
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16) && ca > 0 && cb > 0
}

/// Which copy a channel operation makes (the [`Kernel`] it registers).
#[derive(Debug, Clone, Copy)]
enum Kind {
    Join,
    /// The split after this many channels.
    Split(usize),
    /// Zeros up to this many channels.
    Pad(usize),
}

impl<R: CubeRuntime> Kernel<R> for Kind {
    fn run(&self, inputs: Vec<CubeTensor<R>>) -> Vec<CubeTensor<R>> {
        match *self {
            Kind::Join => {
                let [a, b] = fixed(inputs);
                vec![join(a, b)]
            }
            Kind::Split(first) => {
                let [x] = fixed(inputs);
                split(x, first).into()
            }
            Kind::Pad(channels) => {
                let [x] = fixed(inputs);
                vec![pad(x, channels)]
            }
        }
    }
}

/// [`crate::KernelBackend::cat_last`] on burn's fused CubeCL backends.
pub fn cat_last<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    a: FloatTensor<Fused<R, F, I, BT>>,
    b: FloatTensor<Fused<R, F, I, BT>>,
) -> FloatTensor<Fused<R, F, I, BT>> {
    let (ca, cb) = (last(&a.shape), last(&b.shape));
    let leading = |s: &Shape| s.iter().take(s.num_dims() - 1).copied().collect::<Vec<_>>();
    // Parts that do not line up go to burn's `cat`, which says what is wrong with them.
    if !runs(a.dtype, ca, cb) || a.dtype != b.dtype || leading(&a.shape) != leading(&b.shape) {
        return cat_last_primitive::<Fused<R, F, I, BT>>(a, b);
    }
    let shape = with_last(&a.shape, ca + cb);
    let dtype = a.dtype;
    let [out] = register::<R, F, I, BT, _>(
        "medddpm_cat_last",
        vec![a, b],
        vec![(shape, dtype)],
        Kind::Join,
    )
    .outputs();
    out
}

/// [`crate::KernelBackend::split_last`] on burn's fused CubeCL backends.
pub fn split_last<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    x: FloatTensor<Fused<R, F, I, BT>>,
    first: usize,
) -> [FloatTensor<Fused<R, F, I, BT>>; 2] {
    let c = last(&x.shape);
    if !runs(x.dtype, first, c.saturating_sub(first)) {
        return split_last_primitive::<Fused<R, F, I, BT>>(x, first);
    }
    let dtype = x.dtype;
    let shapes = vec![
        (with_last(&x.shape, first), dtype),
        (with_last(&x.shape, c - first), dtype),
    ];
    register::<R, F, I, BT, _>("medddpm_split_last", vec![x], shapes, Kind::Split(first)).outputs()
}

/// [`crate::KernelBackend::pad_last`] on burn's fused CubeCL backends.
pub fn pad_last<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    x: FloatTensor<Fused<R, F, I, BT>>,
    channels: usize,
) -> FloatTensor<Fused<R, F, I, BT>> {
    let c = last(&x.shape);
    if !runs(x.dtype, c, channels.saturating_sub(c)) {
        return pad_last_primitive::<Fused<R, F, I, BT>>(x, channels);
    }
    let dtype = x.dtype;
    let shape = with_last(&x.shape, channels);
    let [out] = register::<R, F, I, BT, _>(
        "medddpm_pad_last",
        vec![x],
        vec![(shape, dtype)],
        Kind::Pad(channels),
    )
    .outputs();
    out
}
