//! CUDA graphs of a step (`medddpm-kernels`' `graph`) on burn's fused CUDA backend: the step runs on a
//! cubecl stream kept for graphs, captured there by the vendored cubecl-cuda
//! (`CudaServer::begin_capture` / `end_capture`), and replayed by a burn-fusion custom operation
//! that copies the inputs in, launches the graph and copies the outputs out, in the order of the
//! caller's stream.

use std::sync::{Arc, Mutex};

use burn::tensor::ops::FloatTensor;
use burn::tensor::Shape;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, FloatElement, IntElement};
use burn_fusion::stream::Operation;
use burn_fusion::FusionBackend;
use burn_ir::{CustomOpIr, OperationOutput};
use cubecl::stream_id::StreamId;
use cubecl_cuda::{CudaDevice, CudaGraph, CudaRuntime};

use crate::capture::{Captured, GraphError, StepFn};
use crate::cuda::{device_thread, Cube, CudaServer, DeviceThread, Fused};
use crate::custom::{register, Handles};
use crate::error::{cubecl, EngineError};

mod copies;
use copies::{copy_in_and_launch, copy_out, memcpy};

/// The cubecl stream graphs run on: the last of cubecl's 128 (the vendored cubecl-common never
/// gives a thread a stream id that lands there), so only graphs use its memory pool.
const GRAPH_STREAM: StreamId = StreamId {
    value: cubecl_common::stream_id::GRAPH_STREAM,
};

/// A captured graph and where it replays; released on the device thread when dropped.
struct CudaStepGraph {
    graph: Mutex<Option<CudaGraph>>,
    thread: DeviceThread,
    /// Device addresses of the graph's input and output buffers (fixed while it lives: the
    /// graph stream's pool frees nothing and the buffers are held), with their sizes in bytes.
    inputs: Vec<(u64, usize)>,
    outputs: Vec<(u64, usize)>,
}

impl std::fmt::Debug for CudaStepGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaStepGraph").finish_non_exhaustive()
    }
}

impl Drop for CudaStepGraph {
    fn drop(&mut self) {
        let graph = self.graph.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(graph) = graph {
            self.thread
                .submit(move |server: &mut CudaServer| server.release_graph(graph, GRAPH_STREAM));
        }
    }
}

/// Why graphs cannot run with cubecl's configuration, if they cannot.
fn unsupported() -> Option<String> {
    use cubecl::config::RuntimeConfig as _;
    let streams = cubecl::config::CubeClRuntimeConfig::get()
        .streaming
        .max_streams;
    (streams != 128).then(|| {
        format!("cubecl's streaming.max_streams is {streams}; CUDA graphs need the default 128")
    })
}

/// Runs every operation queued on the current stream of burn-fusion (without waiting for the
/// GPU), so that their launches precede what is handed to the device thread next.
fn drain<F: FloatElement, I: IntElement, BT: BoolElement>(t: &FloatTensor<Fused<F, I, BT>>) {
    t.client.sync(|| ());
}

/// Runs `step` on the graphs' stream with copies of `inputs`, so that everything the captured
/// step will use (kernels, algorithm choices, pool buffers) exists before capture begins.
pub fn warm_up<F: FloatElement, I: IntElement, BT: BoolElement>(
    inputs: Vec<FloatTensor<Fused<F, I, BT>>>,
    step: &mut StepFn<'_, Fused<F, I, BT>>,
) -> Vec<FloatTensor<Fused<F, I, BT>>> {
    if unsupported().is_some() {
        return step(inputs);
    }
    GRAPH_STREAM.executes(|| {
        let copies = inputs
            .iter()
            .map(|t| copy::<F, I, BT>(t.clone(), None))
            .collect();
        step(copies)
    })
}

/// Captures one run of `step` on the graphs' stream as a CUDA graph with buffers of its own.
pub fn capture<F: FloatElement, I: IntElement, BT: BoolElement>(
    device: &CudaDevice,
    inputs: Vec<FloatTensor<Fused<F, I, BT>>>,
    step: &mut StepFn<'_, Fused<F, I, BT>>,
) -> Result<Captured<Fused<F, I, BT>>, GraphError> {
    if let Some(why) = unsupported() {
        return Err(GraphError::Unsupported(why));
    }
    let Some(first) = inputs.first().cloned() else {
        return Err(GraphError::Capture("a step without inputs".into()));
    };
    let thread = device_thread(device);
    let capture_error = |e: &dyn std::fmt::Debug| GraphError::Capture(format!("{e:?}"));
    let in_slots = Addresses::new(inputs.len());
    let (buffers, outputs, graph, out_slots) = GRAPH_STREAM.executes(|| {
        let buffers: Vec<_> = inputs
            .iter()
            .enumerate()
            .map(|(i, t)| copy::<F, I, BT>(t.clone(), Some((in_slots.clone(), i))))
            .collect();
        drain::<F, I, BT>(&first);
        thread
            .submit_blocking(|server: &mut CudaServer| server.begin_capture(GRAPH_STREAM))
            .map_err(|e| capture_error(&e))?
            .map_err(|e| capture_error(&e))?;
        let stepped = step(buffers.clone());
        // The outputs made contiguous inside the graph (a strided view copied by a kernel, a
        // contiguous tensor kept as it is): a replay hands out plain copies of them.
        let out_slots = Addresses::new(stepped.len());
        let outputs: Vec<_> = stepped
            .into_iter()
            .enumerate()
            .map(|(i, t)| contiguous::<F, I, BT>(t, (out_slots.clone(), i)))
            .collect();
        drain::<F, I, BT>(&first);
        let graph = thread
            .submit_blocking(|server: &mut CudaServer| server.end_capture(GRAPH_STREAM))
            .map_err(|e| capture_error(&e))?
            .map_err(|e| capture_error(&e))?;
        Ok::<_, GraphError>((buffers, outputs, graph, out_slots))
    })?;
    if outputs.is_empty() {
        return Err(GraphError::Capture("a step without outputs".into()));
    }
    let nodes = graph.nodes();
    let kinds = graph
        .kinds()
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    let exec = CudaStepGraph {
        graph: Mutex::new(Some(graph)),
        thread,
        inputs: in_slots
            .take()
            .map_err(|e| GraphError::Capture(e.to_string()))?,
        outputs: out_slots
            .take()
            .map_err(|e| GraphError::Capture(e.to_string()))?,
    };
    Ok(Captured::new(
        buffers,
        outputs,
        Box::new(Arc::new(exec)),
        (nodes, kinds),
    ))
}

/// Device addresses and sizes of buffers, filled in by [`Copy`] operations on the device
/// thread (all written once the device thread has run past them).
#[derive(Debug, Clone)]
struct Addresses(Arc<Mutex<Vec<Option<Address>>>>);

/// A buffer's device address and size in bytes.
type Address = (u64, usize);

impl Addresses {
    fn new(n: usize) -> Self {
        Self(Arc::new(Mutex::new(vec![None; n])))
    }

    fn set(&self, i: usize, value: Address) {
        self.0.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(value);
    }

    fn take(&self) -> Result<Vec<Address>, EngineError> {
        let slots = self.0.lock().unwrap_or_else(|e| e.into_inner());
        slots
            .iter()
            .map(|s| {
                s.ok_or_else(|| EngineError::Cubecl {
                    what: "buffer copy",
                    message: "it did not run".into(),
                })
            })
            .collect()
    }
}

/// Copies `inputs` into the captured graph's buffers, launches it and returns copies of its
/// outputs, in the order of the caller's stream.
pub fn replay<F: FloatElement, I: IntElement, BT: BoolElement>(
    captured: &Captured<Fused<F, I, BT>>,
    inputs: Vec<FloatTensor<Fused<F, I, BT>>>,
) -> Vec<FloatTensor<Fused<F, I, BT>>> {
    let exec = captured
        .exec
        .downcast_ref::<Arc<CudaStepGraph>>()
        .expect("a graph captured by the CUDA backend")
        .clone();
    let client = captured.outputs[0].client.clone();
    let outputs = captured.outputs.iter().map(|t| (t.shape.clone(), t.dtype));
    let outputs = register::<F, I, BT, _>(
        &client,
        "medddpm_cuda_graph_replay",
        inputs,
        outputs,
        |desc| Replay::<Cube<F, I, BT>> {
            desc,
            exec,
            _b: core::marker::PhantomData,
        },
    );
    // The replay goes to the device thread now, not when burn-fusion next runs its queue:
    // the graph starts while the caller enqueues what follows it.
    drain::<F, I, BT>(&outputs[0]);
    outputs
}

/// A copy of `t` in a buffer of its own, allocated on the current stream.
fn copy<F: FloatElement, I: IntElement, BT: BoolElement>(
    t: FloatTensor<Fused<F, I, BT>>,
    record: Option<(Addresses, usize)>,
) -> FloatTensor<Fused<F, I, BT>> {
    unary::<F, I, BT, _>(
        t,
        "medddpm_cuda_graph_copy",
        |desc| Copy::<Cube<F, I, BT>> {
            desc,
            record,
            _b: core::marker::PhantomData,
        },
    )
}

/// `t` made contiguous (itself when it is), its address and size recorded in `record`.
fn contiguous<F: FloatElement, I: IntElement, BT: BoolElement>(
    t: FloatTensor<Fused<F, I, BT>>,
    record: (Addresses, usize),
) -> FloatTensor<Fused<F, I, BT>> {
    unary::<F, I, BT, _>(t, "medddpm_cuda_graph_contiguous", |desc| Contiguous::<
        Cube<F, I, BT>,
    > {
        desc,
        record,
        _b: core::marker::PhantomData,
    })
}

/// `t` through the custom operation `op` makes of its description: one output shaped as `t`.
fn unary<F, I, BT, O>(
    t: FloatTensor<Fused<F, I, BT>>,
    name: &'static str,
    op: impl FnOnce(CustomOpIr) -> O,
) -> FloatTensor<Fused<F, I, BT>>
where
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
    O: Operation<<Cube<F, I, BT> as FusionBackend>::FusionRuntime> + 'static,
{
    let client = t.client.clone();
    let output = (t.shape.clone(), t.dtype);
    register::<F, I, BT, _>(&client, name, vec![t], [output], op).output()
}

#[derive(Debug, Clone)]
struct Contiguous<B> {
    desc: CustomOpIr,
    record: (Addresses, usize),
    _b: core::marker::PhantomData<B>,
}

impl<F: FloatElement, I: IntElement, BT: BoolElement>
    Operation<<Cube<F, I, BT> as FusionBackend>::FusionRuntime> for Contiguous<Cube<F, I, BT>>
{
    fn execute(&self, handles: &mut Handles<F, I, BT>) {
        let ([src], [out]) = self.desc.as_fixed();
        let t = into_contiguous(handles.get_float_tensor::<Cube<F, I, BT>>(src));
        let (h, len) = (t.handle.clone(), bytes(&t));
        let stream = StreamId::current();
        let (slots, i) = self.record.clone();
        device_thread(&t.device).submit(move |server: &mut CudaServer| {
            match address(server, &h, stream) {
                Ok(at) => slots.set(i, (at, len)),
                Err(e) => {
                    crate::device_error::record_device_error(format!("CUDA graph output: {e}"))
                }
            }
        });
        handles.register_float_tensor::<Cube<F, I, BT>>(&out.id, t);
    }
}

#[derive(Debug, Clone)]
struct Copy<B> {
    desc: CustomOpIr,
    /// Where to write the copy's address and size (a graph's buffer).
    record: Option<(Addresses, usize)>,
    _b: core::marker::PhantomData<B>,
}

#[derive(Debug, Clone)]
struct Replay<B> {
    desc: CustomOpIr,
    exec: Arc<CudaStepGraph>,
    _b: core::marker::PhantomData<B>,
}

/// A fresh contiguous tensor shaped as `like`, on the current stream.
fn empty_like(like: &CubeTensor<CudaRuntime>) -> CubeTensor<CudaRuntime> {
    empty_device_contiguous_dtype(
        like.client.clone(),
        like.device.clone(),
        Shape::from(like.meta.shape().to_vec()),
        like.dtype,
    )
}

impl<F: FloatElement, I: IntElement, BT: BoolElement>
    Operation<<Cube<F, I, BT> as FusionBackend>::FusionRuntime> for Copy<Cube<F, I, BT>>
{
    fn execute(&self, handles: &mut Handles<F, I, BT>) {
        let ([src], [out]) = self.desc.as_fixed();
        let src = into_contiguous(handles.get_float_tensor::<Cube<F, I, BT>>(src));
        let dst = empty_like(&src);
        let device = src.device.clone();
        let (src_h, dst_h, len) = (src.handle.clone(), dst.handle.clone(), bytes(&src));
        let stream = StreamId::current();
        let record = self.record.clone();
        device_thread(&device).submit(move |server: &mut CudaServer| {
            let copied = (|| {
                let cuda = server.cuda_stream(stream).map_err(cubecl("stream"))?;
                let (s, d) = (
                    address(server, &src_h, stream)?,
                    address(server, &dst_h, stream)?,
                );
                if let Some((slots, i)) = &record {
                    slots.set(*i, (d, len));
                }
                memcpy(d, s, len, cuda)
            })();
            if let Err(e) = copied {
                crate::device_error::record_device_error(format!("CUDA graph input copy: {e}"));
            }
        });
        handles.register_float_tensor::<Cube<F, I, BT>>(&out.id, dst);
    }
}

/// A tensor's size in bytes (contiguous).
fn bytes(t: &CubeTensor<CudaRuntime>) -> usize {
    t.meta.shape().iter().product::<usize>() * t.dtype.size()
}

/// The device address of `h` as cubecl's `stream` sees it.
fn address(
    server: &mut CudaServer,
    h: &cubecl::server::Handle,
    stream: StreamId,
) -> Result<u64, EngineError> {
    use cubecl::server::ComputeServer as _;
    server
        .get_resource(h.clone().binding(), stream)
        .map(|m| m.resource().ptr)
        .map_err(cubecl("buffer"))
}

/// The device addresses of `bindings` as cubecl's `stream` sees them (one lookup for all).
fn addresses(
    server: &mut CudaServer,
    bindings: Vec<cubecl::server::Binding>,
    stream: StreamId,
) -> Result<Vec<u64>, EngineError> {
    server
        .addresses(bindings, stream)
        .map_err(cubecl("buffers"))
}

impl<F: FloatElement, I: IntElement, BT: BoolElement>
    Operation<<Cube<F, I, BT> as FusionBackend>::FusionRuntime> for Replay<Cube<F, I, BT>>
{
    fn execute(&self, handles: &mut Handles<F, I, BT>) {
        let given: Vec<_> = self
            .desc
            .inputs
            .iter()
            .map(|ir| into_contiguous(handles.get_float_tensor::<Cube<F, I, BT>>(ir)))
            .collect();
        let (client, device) = (given[0].client.clone(), given[0].device.clone());
        let thread = device_thread(&device);
        let given_h: Vec<_> = given.iter().map(|t| t.handle.clone().binding()).collect();
        let exec = self.exec.clone();
        let stream = StreamId::current();
        // The inputs copied in and the graph launched first: the output buffers below are
        // allocated while the GPU runs the graph.
        thread.submit(move |server: &mut CudaServer| {
            if let Err(e) = copy_in_and_launch(server, &exec, given_h, stream) {
                crate::device_error::record_device_error(format!("CUDA graph replay: {e}"));
            }
        });
        let fresh: Vec<_> = self
            .desc
            .outputs
            .iter()
            .map(|ir| {
                empty_device_contiguous_dtype(
                    client.clone(),
                    device.clone(),
                    ir.shape.clone(),
                    ir.dtype,
                )
            })
            .collect();
        let fresh_h: Vec<_> = fresh.iter().map(|t| t.handle.clone().binding()).collect();
        let exec = self.exec.clone();
        thread.submit(move |server: &mut CudaServer| {
            if let Err(e) = copy_out(server, &exec, fresh_h, stream) {
                crate::device_error::record_device_error(format!("CUDA graph replay: {e}"));
            }
        });
        for (ir, t) in self.desc.outputs.iter().zip(fresh) {
            handles.register_float_tensor::<Cube<F, I, BT>>(&ir.id, t);
        }
    }
}
