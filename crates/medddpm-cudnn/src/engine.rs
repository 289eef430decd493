//! One convolution from end to end: [`run`] finds the engine of the operands' device, packs
//! the operands, finds the shape's descriptors and algorithm, and either hands the call to the
//! device thread or runs it here, waiting.

use std::sync::Arc;

use burn::tensor::DType;
use cubecl_cuda::CudaRuntime;
use cudarc::cudnn::sys;

use super::algorithms::{find, Choice};
use super::calls::{launch, workspace_size};
use super::descriptors::{data_type, Descriptors};
use super::device_thread::{enqueue, legacy_requested, Graph, OperandHandles};
pub use super::devices::warn_fallback;
use super::devices::{engine, DeviceState};
use super::graph::Geometry;
use super::layout::{dims5, empty_like_layout, packed, strides5, Tensor};
use super::library::check;
use super::operands::{ConvOp, Ptrs};
use crate::compute::Precision;
use crate::error::{cubecl, driver, EngineError};
use crate::reference::conv_spec::Conv3dSpec;

/// The operands of one call, packed for cuDNN: `(x, w, y_or_dy)` where the last is the output
/// for the forward pass and the incoming gradient otherwise.
pub struct Operands {
    /// The input.
    pub x: Tensor,
    /// The weight.
    pub w: Tensor,
    /// The incoming gradient (for the data and weight gradients).
    pub dy: Option<Tensor>,
}

/// Runs `op` with cuDNN on the device of the operands. `Err` means cuDNN refused this call (the
/// caller falls back).
pub fn run(op: ConvOp, operands: Operands, spec: &Conv3dSpec) -> Result<Tensor, EngineError> {
    let engine = engine(operands.x.device.index)?;
    let call = Call::new(op, operands, spec)?;
    let mut s = engine.lock();
    let key = call.key(engine.version, spec);
    let desc = s.descriptors_for(&key, &call, spec)?;
    if let Some(choice) = s.proven.get(&key).copied() {
        let graph = match desc.geometry.is_some() && !legacy_requested() {
            true => s.graph_for(&key),
            false => Graph::Legacy,
        };
        drop(s);
        let bytes = match &graph {
            Graph::Plan(plan) => plan.workspace.max(choice.workspace),
            _ => choice.workspace,
        };
        let workspace = (bytes > 0).then(|| call.x.client.empty(bytes));
        let handles = call.handles(workspace);
        let side = engine.side(&call.x.device)?;
        enqueue(side, (op, desc, choice, bytes), handles, key, graph);
        return Ok(call.out);
    }
    let result = run_waiting(engine.ctx, &mut s, &call, &desc, &key);
    drop(s);
    result?;
    Ok(call.out)
}

impl DeviceState {
    /// How a device-thread call of `key` runs: the device's own copy of a known plan, else
    /// what the model's plan table says (a search for a shape not seen yet).
    fn graph_for(&mut self, key: &str) -> Graph {
        if let Some(plan) = self.planned.get(key) {
            return Graph::Plan(plan.clone());
        }
        match self.algos.plans.claim(key) {
            Some(Some(plan)) => {
                let plan = Arc::new(plan);
                self.planned.insert(key.to_string(), plan.clone());
                Graph::Plan(plan)
            }
            Some(None) => Graph::Legacy,
            None => Graph::Search(self.algos.clone()),
        }
    }

    /// The descriptors of `key`'s shape, made on its first call on this device.
    fn descriptors_for(
        &mut self,
        key: &str,
        call: &Call,
        spec: &Conv3dSpec,
    ) -> Result<Arc<Descriptors>, EngineError> {
        if let Some(d) = self.descriptors.get(key) {
            return Ok(d.clone());
        }
        let y_like = call.y_like()?;
        let mut d = Descriptors::new(&call.x, y_like, call.w_dims, spec, call.cudnn_dtype)?;
        if matches!(
            spec.compute.precision,
            Precision::Bf16 | Precision::F16 | Precision::Tf32
        ) {
            d.geometry = Some(call.geometry(spec)?);
        }
        let d = Arc::new(d);
        self.descriptors.insert(key.to_string(), d.clone());
        Ok(d)
    }
}

/// The waiting path, for the first calls of a shape on a device: the buffers resolved through the device thread, the algorithm
/// searched (and shared with the devices of the same model) when none is known, and cuDNN
/// called from this thread, so that a refusal can still fall back. A choice from the cache
/// that cuDNN refuses here (timed by another run, perhaps another GPU or cuDNN build) is
/// searched again once before giving up. A success marks the shape proven on this device.
fn run_waiting(
    ctx: cudarc::driver::sys::CUcontext,
    s: &mut DeviceState,
    call: &Call,
    desc: &Descriptors,
    key: &str,
) -> Result<(), EngineError> {
    // SAFETY: the primary context was retained in `init`; cubecl uses the same one.
    unsafe { cudarc::driver::result::ctx::set_current(ctx) }.map_err(driver("CUDA context"))?;
    let cached = s.proven.get(key).copied().or_else(|| s.algos.get(key));
    let choice = match cached {
        Some(c) => c,
        None => {
            let c = search(s, call, desc, key)?;
            s.algos.insert(key, c)
        }
    };
    let result = match (attempt(s, (call, desc, key), choice), cached) {
        (Err(refused), Some(_)) => {
            let fresh = search(s, call, desc, key)
                .map_err(|e| e.context(format!("{refused}; searched again")))?;
            s.algos.replace(key, fresh);
            attempt(s, (call, desc, key), fresh).map_err(|e| {
                e.context(format!(
                    "{refused}; searched again, algorithm {}",
                    fresh.algo
                ))
            })
        }
        (result, _) => result,
    };
    result.map_err(|e| e.context(key))
}

/// Times the candidate algorithms for `call` on its own buffers.
fn search(
    s: &DeviceState,
    call: &Call,
    desc: &Descriptors,
    key: &str,
) -> Result<Choice, EngineError> {
    let (ptrs, _, stream) = call.resolve(None)?;
    set_stream(s.handle, stream)?;
    find(call.op, s.handle, desc, &ptrs, &call.x).map_err(|e| e.context(key))
}

/// Calls cuDNN with `choice`, its workspace at least what this cuDNN asks for it; on success
/// the shape is proven on this device with that workspace.
fn attempt(
    s: &mut DeviceState,
    (call, desc, key): (&Call, &Descriptors, &str),
    choice: Choice,
) -> Result<(), EngineError> {
    let needed = workspace_size(call.op, s.handle, desc, choice.algo)?;
    let choice = Choice {
        workspace: choice.workspace.max(needed),
        ..choice
    };
    let workspace = match choice.workspace {
        0 => None,
        bytes => Some(call.x.client.empty(bytes)),
    };
    let (ptrs, ws_ptr, stream) = call.resolve(workspace.as_ref())?;
    set_stream(s.handle, stream)?;
    let result = launch(
        call.op,
        s.handle,
        desc,
        &ptrs,
        choice.algo,
        ws_ptr,
        choice.workspace,
    );
    drop(workspace);
    if result.is_ok() {
        s.proven.insert(key.to_string(), choice);
    }
    result
}

/// Points `handle` at `stream`.
fn set_stream(
    handle: sys::cudnnHandle_t,
    stream: cudarc::driver::sys::CUstream,
) -> Result<(), EngineError> {
    // SAFETY: `stream` is cubecl's live stream for this thread.
    check(
        unsafe { sys::cudnnSetStream(handle, stream as sys::cudaStream_t) },
        "set stream",
    )
}

/// One call's operands packed in the activations' layout, its output allocated, and what
/// cuDNN needs to know of them.
struct Call {
    op: ConvOp,
    dtype: DType,
    cudnn_dtype: sys::cudnnDataType_t,
    x: Tensor,
    w: Tensor,
    dy: Option<Tensor>,
    out: Tensor,
    x_dims: [usize; 5],
    w_dims: [usize; 5],
}

impl Call {
    /// Checks the operands' dtypes and the gradient's shape, packs them and allocates the
    /// output.
    fn new(op: ConvOp, operands: Operands, spec: &Conv3dSpec) -> Result<Self, EngineError> {
        let layout = spec.compute.layout;
        let dtype = operands.x.dtype;
        if operands.w.dtype != dtype || operands.dy.as_ref().is_some_and(|t| t.dtype != dtype) {
            return Err(EngineError::Unsupported(format!(
                "mixed dtypes (x {:?}, weight {:?})",
                dtype, operands.w.dtype
            )));
        }
        let cudnn_dtype =
            data_type(dtype).ok_or_else(|| EngineError::Unsupported(format!("dtype {dtype:?}")))?;
        let x = packed(operands.x, layout);
        let w_dims = dims5(&operands.w);
        // The filter in the same memory order as the activations: [k, kd, kh, kw, c] for
        // channels-last (what cuDNN's NHWC tensor-core kernels read).
        // (The weight gradient only needs the filter's shape.)
        let w = match op {
            ConvOp::WeightGrad => operands.w,
            _ => packed(operands.w, layout),
        };
        let x_dims = dims5(&x);
        let [n, _, d, h, wd] = x_dims;
        let out_sp = spec.output_size([d, h, wd], [w_dims[2], w_dims[3], w_dims[4]]);
        let y_dims = [n, w_dims[0], out_sp[0], out_sp[1], out_sp[2]];
        let dy = operands.dy.map(|t| packed(t, layout));
        if let Some(dy) = &dy {
            if dims5(dy) != y_dims {
                return Err(EngineError::Unsupported(format!(
                    "gradient shape {:?}, expected {y_dims:?}",
                    dims5(dy)
                )));
            }
        }
        let out = match op {
            ConvOp::Forward => empty_like_layout(&x, y_dims, layout, dtype),
            ConvOp::DataGrad => empty_like_layout(&x, x_dims, layout, dtype),
            ConvOp::WeightGrad => empty_like_layout(&x, w_dims, layout, dtype),
        };
        let call = Call {
            op,
            dtype,
            cudnn_dtype,
            x,
            w,
            dy,
            out,
            x_dims,
            w_dims,
        };
        call.y_like()?;
        Ok(call)
    }

    /// What cuDNN's `y` descriptor describes: the output of the forward pass, the incoming
    /// gradient of the others.
    fn y_like(&self) -> Result<&Tensor, EngineError> {
        match self.op {
            ConvOp::Forward => Ok(&self.out),
            _ => Ok(self
                .dy
                .as_ref()
                .ok_or_else(|| EngineError::Unsupported("missing gradient".into()))?),
        }
    }

    /// The algorithm cache's key: everything the choice depends on.
    fn key(&self, version: usize, spec: &Conv3dSpec) -> String {
        format!(
            "cudnn{}|{}|{:?}|{}|{}|x{:?}|w{:?}|s{:?}|p{:?}",
            version,
            self.op.name(),
            self.dtype,
            spec.compute.layout,
            spec.compute.precision,
            self.x_dims,
            self.w_dims,
            spec.stride,
            spec.padding
        )
    }

    /// The shape as the graph API's plans describe it: `(x, w, y)` in its terms (for the data
    /// gradient `x` is the output, for the weight gradient `w` is).
    fn geometry(&self, spec: &Conv3dSpec) -> Result<Geometry, EngineError> {
        let of = |t: &Tensor| (dims5(t).map(|v| v as i64), strides5(t).map(|v| v as i64));
        let y_like = of(self.y_like()?);
        let (x, w) = match self.op {
            ConvOp::Forward => (of(&self.x), of(&self.w)),
            ConvOp::DataGrad => (of(&self.out), of(&self.w)),
            ConvOp::WeightGrad => (of(&self.x), of(&self.out)),
        };
        Ok(Geometry {
            op: self.op,
            dtype: self.cudnn_dtype,
            x,
            w,
            y: y_like,
            padding: spec.padding.map(|v| v as i64),
            stride: spec.stride.map(|v| v as i64),
            precision: spec.compute.precision,
        })
    }

    /// The buffers the device thread needs, the weight only where the operation reads it.
    fn handles(&self, workspace: Option<cubecl::server::Handle>) -> OperandHandles {
        OperandHandles {
            x: self.x.handle.clone(),
            w: (self.op != ConvOp::WeightGrad).then(|| self.w.handle.clone()),
            dy: self.dy.as_ref().map(|t| t.handle.clone()),
            out: self.out.handle.clone(),
            workspace,
        }
    }

    /// Every operand's pointer (and the workspace's, once the algorithm is known) in one call
    /// to the device thread: x, out, then w and dy where the operation reads them. Returns the
    /// pointers, the workspace's (0 without one) and the stream.
    fn resolve(
        &self,
        workspace: Option<&cubecl::server::Handle>,
    ) -> Result<(Ptrs, u64, cudarc::driver::sys::CUstream), EngineError> {
        let mut handles = vec![self.x.handle.clone(), self.out.handle.clone()];
        if self.op != ConvOp::WeightGrad {
            handles.push(self.w.handle.clone());
        }
        if let Some(dy) = &self.dy {
            handles.push(dy.handle.clone());
        }
        handles.extend(workspace.cloned());
        let (p, stream) = ptrs_of(&self.x.client, handles)?;
        let mut rest = p[2..].iter().copied();
        let w = if self.op != ConvOp::WeightGrad {
            rest.next().unwrap_or(0)
        } else {
            0
        };
        let dy_ptr = if self.dy.is_some() {
            rest.next().unwrap_or(0)
        } else {
            0
        };
        let ptrs = Ptrs {
            x: p[0],
            w,
            dy: dy_ptr,
            out: p[1],
        };
        Ok((ptrs, rest.next().unwrap_or(0), stream))
    }
}

/// The device pointers of `handles` and the stream of the first (the caller keeps the
/// buffers alive until the work is enqueued). One blocking call to cubecl's device thread for
/// all of them: each `get_resource` from the fusion thread waits until the device thread has
/// launched everything queued before it, so this makes one wait per convolution instead of one
/// per operand (about five). No change in step time was measured (docs/benchmarks).
fn ptrs_of(
    client: &cubecl::client::ComputeClient<CudaRuntime>,
    handles: Vec<cubecl::server::Handle>,
) -> Result<(Vec<u64>, cudarc::driver::sys::CUstream), EngineError> {
    let resolved = client
        .exclusive(|| {
            // On the device thread: these calls run inline, without a round trip each.
            let mut ptrs = Vec::with_capacity(handles.len());
            let mut stream = 0usize;
            for (i, h) in handles.into_iter().enumerate() {
                let managed = client.get_resource(h).map_err(cubecl("buffer"))?;
                let r = managed.resource();
                if i == 0 {
                    stream = r.stream as usize;
                }
                ptrs.push(r.ptr);
            }
            Ok::<_, EngineError>((ptrs, stream))
        })
        .map_err(cubecl("device thread"))??;
    Ok((resolved.0, resolved.1 as cudarc::driver::sys::CUstream))
}
