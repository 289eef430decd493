//! The product as one operation of burn-fusion's stream, and its hand-over to cubecl's device
//! thread.

use std::sync::Mutex;

use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Shape};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, FloatElement, IntElement};
use burn_fusion::stream::Operation;
use burn_fusion::FusionBackend;
use burn_ir::{CustomOpIr, OperationOutput};
use cubecl_cuda::CudaRuntime;

use super::library::{compute_type, data_type, library, Types};
use crate::compute::Precision;
use crate::reference::product::plan::{column_major, ColumnMajor, Operand};
use crate::reference::product::product_primitive;
use crate::reference::product::spec::ProductSpec;

use crate::cuda::{device_thread, Cube, CudaServer, Fused};
use crate::custom::{register, Handles};
use crate::error::{cubecl, EngineError};
type Tensor = CubeTensor<CudaRuntime>;

#[derive(Debug, Clone)]
struct CublasProduct<B> {
    desc: CustomOpIr,
    spec: ProductSpec,
    _b: core::marker::PhantomData<B>,
}

impl<F: FloatElement, I: IntElement, BT: BoolElement>
    Operation<<Cube<F, I, BT> as FusionBackend>::FusionRuntime> for CublasProduct<Cube<F, I, BT>>
{
    fn execute(&self, handles: &mut Handles<F, I, BT>) {
        let ([a, b], [c]) = self.desc.as_fixed();
        let a = handles.get_float_tensor::<Cube<F, I, BT>>(a);
        let b = handles.get_float_tensor::<Cube<F, I, BT>>(b);
        let out = run(a.clone(), b.clone(), self.spec).unwrap_or_else(|e| {
            warn_fallback(&e.to_string());
            product_primitive::<Cube<F, I, BT>>(a, b, self.spec)
        });
        handles.register_float_tensor::<Cube<F, I, BT>>(&c.id, out);
    }
}

/// `op(a) · op(b)` as a custom operation of burn-fusion's stream, computed by cuBLAS (burn's
/// `matmul` where cuBLAS cannot).
pub fn register_product<F: FloatElement, I: IntElement, BT: BoolElement>(
    a: FloatTensor<Fused<F, I, BT>>,
    b: FloatTensor<Fused<F, I, BT>>,
    spec: ProductSpec,
) -> FloatTensor<Fused<F, I, BT>> {
    let dims = |s: &Shape| [s[0], s[1], s[2]];
    let (m, _, n) = spec
        .sizes(dims(&a.shape), dims(&b.shape))
        .unwrap_or_else(|e| panic!("product: {e}"));
    let client = a.client.clone();
    let output = (Shape::new([a.shape[0], m, n]), a.dtype);
    register::<F, I, BT, _>(
        &client,
        "medddpm_cublas_product",
        vec![a, b],
        [output],
        |desc| CublasProduct::<Cube<F, I, BT>> {
            desc,
            spec,
            _b: core::marker::PhantomData,
        },
    )
    .output()
}

/// An operand as cuBLAS reads it: in place where [`Operand::in_place`] allows, else made
/// contiguous first.
fn operand(t: Tensor) -> (Tensor, Operand) {
    let layout = |t: &Tensor| {
        let (s, st) = (t.meta.shape(), t.meta.strides());
        Operand {
            dims: [s[0], s[1], s[2]],
            strides: [st[0], st[1], st[2]],
        }
    };
    let op = layout(&t);
    if op.in_place() {
        (t, op)
    } else {
        let t = into_contiguous(t);
        let op = layout(&t);
        (t, op)
    }
}

/// The product on cuBLAS, handed to the device thread; `Err` says why cuBLAS is not used for
/// it (the caller computes it with burn's `matmul`).
fn run(a: Tensor, b: Tensor, spec: ProductSpec) -> Result<Tensor, EngineError> {
    let cublas = library()?;
    let dtype = a.dtype;
    if b.dtype != dtype {
        return Err(EngineError::Unsupported(format!(
            "mixed dtypes ({dtype:?} and {:?})",
            b.dtype
        )));
    }
    let (data, compute) = match (dtype, spec.compute.precision) {
        (DType::BF16, _) => (data_type::R_16BF, compute_type::F32),
        (DType::F16, _) => (data_type::R_16F, compute_type::F32),
        (DType::F32, Precision::Tf32) => (data_type::R_32F, compute_type::F32_FAST_TF32),
        (DType::F32, _) => (data_type::R_32F, compute_type::F32),
        (DType::F64, _) => (data_type::R_64F, compute_type::F64),
        (other, _) => return Err(EngineError::Unsupported(format!("dtype {other:?}"))),
    };
    let (a, a_layout) = operand(a);
    let (b, b_layout) = operand(b);
    let g = column_major(a_layout, b_layout, spec)
        .map_err(|e| EngineError::Unsupported(e.to_string()))?;
    let out = empty_device_contiguous_dtype(
        a.client.clone(),
        a.device.clone(),
        Shape::new([a_layout.dims[0], g.n as usize, g.m as usize]),
        dtype,
    );
    let types = Types { data, compute };
    // cuBLAS's A is `b`'s buffer, its B `a`'s (see `column_major`).
    enqueue(
        cublas,
        (g, types),
        [b.handle.clone(), a.handle.clone(), out.handle.clone()],
        &a.device,
    );
    Ok(out)
}

/// Hands the product to cubecl's device thread of `device`: it runs after the kernels queued
/// before it, resolves the three buffers (cuBLAS's A, B, C) there and enqueues cuBLAS on their
/// stream. A failure is kept for [`crate::device_error`].
fn enqueue(
    cublas: &'static super::library::Cublas,
    (plan, types): (ColumnMajor, Types),
    buffers: [cubecl::server::Handle; 3],
    device: &cubecl_cuda::CudaDevice,
) {
    use cubecl::server::ComputeServer as _;
    let index = device.index;
    let stream_id = cubecl::stream_id::StreamId::current();
    device_thread(device).submit(move |server: &mut CudaServer| {
        let result = (|| {
            let mut ptrs = [0u64; 3];
            let mut stream = 0u64;
            for (i, h) in buffers.iter().enumerate() {
                let managed = server
                    .get_resource(h.clone().binding(), stream_id)
                    .map_err(cubecl("buffer"))?;
                let r = managed.resource();
                ptrs[i] = r.ptr;
                if i == 0 {
                    stream = r.stream as usize as u64;
                }
            }
            let handle = cublas.handle(index)?;
            // SAFETY: the buffers are held (moved into this task) until cuBLAS is enqueued on
            // the stream cubecl orders their work on; `plan` describes them (built from their
            // shapes and strides).
            let since = std::time::Instant::now();
            let enqueued = unsafe { cublas.gemm(handle, stream, &plan, ptrs, types) };
            cubecl_common::busy::IN_CALL[cubecl_common::busy::CUBLAS].add(since);
            enqueued
        })();
        drop(buffers);
        if let Err(e) = result {
            crate::device_error::record_device_error(format!(
                "cuBLAS product (m {}, n {}, k {}, batch {}) failed on CUDA device {index}'s device thread: {e}",
                plan.n, plan.m, plan.k, plan.batch
            ));
        }
    });
}

/// Says once per reason that cuBLAS was not used.
fn warn_fallback(why: &str) {
    static WARNED: Mutex<Option<std::collections::HashSet<String>>> = Mutex::new(None);
    let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    if warned
        .get_or_insert_with(Default::default)
        .insert(why.to_string())
    {
        log::info!("cuBLAS not used for a product ({why}); burn's matmul computes it instead");
    }
}
