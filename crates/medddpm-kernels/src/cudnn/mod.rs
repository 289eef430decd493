//! The cuDNN convolution engine on burn's CUDA backend.
//!
//! - **Library.** `libcudnn.so.9` is loaded at run time through `cudarc` (the version
//!   `cubecl-cuda` already uses), so building needs no CUDA toolkit; [`init`] says whether it
//!   loads and why not.
//! - **Stream.** Every call is enqueued on the CUDA stream cubecl runs its own kernels on (the
//!   patched `cubecl-cuda` hands it out with each buffer, see
//!   `vendor/cubecl-cuda/README.medddpm.md`), so cuDNN and burn's kernels stay ordered without
//!   any device synchronisation.
//! - **Memory.** Inputs, outputs and the workspace are buffers of burn's memory pool, borrowed
//!   by raw device pointer for the duration of the enqueue; nothing here frees them.
//! - **Algorithms.** Per shape, the first call times the candidates (`cudnnFind*Ex`, what
//!   PyTorch's `cudnn.benchmark` does) and keeps the winner in a JSON cache file beside the
//!   kernel-tuning cache, so a warm start does not search again.
//! - **Threads.** burn-fusion runs operations on its own thread, which hands kernel launches to
//!   cubecl's device thread without waiting. Once a shape's algorithm is known, a convolution is
//!   handed over the same way: one task on cubecl's device thread resolves the buffers and calls
//!   cuDNN, in order with the kernels queued before it. Waiting for the device thread instead
//!   (one round trip per call) tied the fusion thread to the GPU's progress at every
//!   convolution: on an H100, 132 waits of about 0.4 ms per bf16 training step, 55 ms of the
//!   fusion thread's 123 (docs/benchmarks, eighth session). `MEDDDPM_CUDNN_SYNC=1` restores the
//!   waiting path, for comparisons.
//! - **Failure.** A call cuDNN refuses falls back to burn's kernel for that shape, saying so once.
//!   A shape goes to the device thread only once a call of it succeeded where burn-fusion runs
//!   it (the first call of each shape, where a refusal can still fall back); a later call that
//!   fails there (none was seen to) cannot fall back, and is reported by [`device_error`],
//!   which the trainer (each step), the sampler (each sample) and the bench (each
//!   synchronisation) check.

mod fusion;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use burn::tensor::{DType, Shape};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::ops::permute;
use burn_cubecl::tensor::CubeTensor;
use cubecl_cuda::CudaRuntime;
use cudarc::cudnn::sys;
use serde::{Deserialize, Serialize};

use crate::compute::{Layout, Precision};
use crate::conv::Conv3dSpec;

/// Oldest cuDNN this engine accepts (the legacy convolution API of cuDNN 9).
pub const MIN_CUDNN_VERSION: usize = 90000;

/// Largest workspace an algorithm may use, in bytes. At 128^3 the precomputed-index implicit
/// GEMM that strict FP32 needs in channels-last asks for about 1 GiB for the 64-channel
/// convolutions (with a 1 GiB cap, on an H100, none of those shapes had an algorithm left and
/// they fell back to burn's kernels), while FFT algorithms ask for several GiB.
const MAX_WORKSPACE: usize = 3 << 30;

/// Among candidates whose time is within this factor of the fastest, the one with the smallest
/// workspace wins: burn's pool keeps what it once allocated, so memory matters as much as a few
/// percent of speed.
const NEAR_FASTEST: f32 = 1.05;

/// Why cuDNN cannot be used.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CudnnUnavailable {
    /// The shared library was not found.
    #[error("libcudnn.so.9 was not found on the library path (install cuDNN 9, e.g. Debian/Ubuntu's libcudnn9-cuda-12, or pip's nvidia-cudnn-cu12 with its lib folder on LD_LIBRARY_PATH)")]
    NotFound,
    /// The library is older than [`MIN_CUDNN_VERSION`].
    #[error("cuDNN {found} is too old: the cudnn engine needs cuDNN 9 or newer")]
    TooOld {
        /// Version found, as cuDNN numbers it (e.g. 8907).
        found: usize,
    },
    /// cuDNN loaded but could not start.
    #[error("cuDNN could not start: {0}")]
    Failed(String),
}

/// What [`init`] found.
#[derive(Debug, Clone)]
pub struct CudnnInfo {
    /// cuDNN's version number (e.g. 90100 for 9.1.0).
    pub version: usize,
    /// Algorithms already in it.
    pub cached: usize,
}

impl CudnnInfo {
    /// `9.1.0` for 90100.
    pub fn version_string(&self) -> String {
        let v = self.version;
        format!("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100)
    }
}

/// One chosen algorithm.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Choice {
    algo: u32,
    workspace: usize,
    /// Milliseconds cuDNN measured for it.
    ms: f32,
}

struct State {
    handle: sys::cudnnHandle_t,
    ctx: cudarc::driver::sys::CUcontext,
    version: usize,
    cache_file: Option<PathBuf>,
    algos: BTreeMap<String, Choice>,
    /// Descriptors of each shape seen, shared with the device-thread tasks.
    descriptors: HashMap<String, Arc<Descriptors>>,
    /// Shapes whose call succeeded on the waiting path: only these go to the device thread
    /// (cuDNN 9.14 finds an algorithm for some shapes, e.g. a bf16 data gradient with 8 output
    /// channels, and then refuses to run it, which only the waiting path can fall back from).
    proven: HashSet<String>,
    /// Keys already reported as falling back.
    warned: HashSet<String>,
}

// The handle is only used under the mutex.
unsafe impl Send for State {}

static STATE: OnceLock<Mutex<State>> = OnceLock::new();

type CudaServer = <CudaRuntime as cubecl::Runtime>::Server;

/// What the device-thread tasks use: a cuDNN handle of their own (only that thread calls it,
/// one task at a time, so it needs no lock, and the first-call path's handle can be busy
/// meanwhile) and a handle on cubecl's device thread.
struct DeviceSide {
    handle: sys::cudnnHandle_t,
    ctx: cudarc::driver::sys::CUcontext,
    thread: cubecl::device_handle::DeviceHandle<CudaServer>,
}

// The cuDNN handle is only used on cubecl's device thread.
unsafe impl Send for DeviceSide {}
unsafe impl Sync for DeviceSide {}

static DEVICE_SIDE: OnceLock<Result<DeviceSide, String>> = OnceLock::new();

/// The first convolution that failed on the device thread since [`device_error`] last looked.
static DEVICE_ERROR: Mutex<Option<String>> = Mutex::new(None);

/// The first convolution that failed on cubecl's device thread since the last call, if any.
/// Such a failure leaves that convolution's output unwritten, so whatever step it belonged to
/// is invalid: callers stop with this as the error.
pub fn device_error() -> Option<String> {
    DEVICE_ERROR
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
}

fn sync_requested() -> bool {
    static SYNC: OnceLock<bool> = OnceLock::new();
    *SYNC.get_or_init(|| std::env::var("MEDDDPM_CUDNN_SYNC").is_ok_and(|v| v == "1"))
}

fn device_side(
    device: &cubecl_cuda::CudaDevice,
    ctx: cudarc::driver::sys::CUcontext,
) -> Result<&'static DeviceSide, String> {
    DEVICE_SIDE
        .get_or_init(|| {
            use cubecl::device::Device as _;
            // SAFETY: the primary context, retained in `init`, is made current first.
            unsafe { cudarc::driver::result::ctx::set_current(ctx) }.map_err(|e| e.to_string())?;
            let mut handle = std::ptr::null_mut();
            // SAFETY: plain handle creation with the context current.
            check(unsafe { sys::cudnnCreate(&mut handle) }, "cudnnCreate")?;
            Ok(DeviceSide {
                handle,
                ctx,
                // The device thread of the client that burn already made for this device.
                thread: cubecl::device_handle::DeviceHandle::new(device.to_id()),
            })
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Loads cuDNN for CUDA device `device_index` and reads the algorithm cache in `cache_dir`
/// (`cudnn-algorithms.json`; none is kept when `None`). Idempotent: later calls return what the
/// first found.
pub fn init(device_index: usize, cache_dir: Option<&Path>) -> Result<CudnnInfo, CudnnUnavailable> {
    if let Some(state) = STATE.get() {
        let s = state.lock().unwrap_or_else(|e| e.into_inner());
        return Ok(CudnnInfo {
            version: s.version,
            cached: s.algos.len(),
        });
    }
    // SAFETY: probing for the library only opens it.
    if !unsafe { sys::is_culib_present() } {
        return Err(CudnnUnavailable::NotFound);
    }
    // A missing symbol panics inside cudarc's loader: turn it into an error.
    let probe = std::panic::catch_unwind(|| unsafe { sys::cudnnGetVersion() });
    let version = probe.map_err(|_| {
        CudnnUnavailable::Failed("the library has no cudnnGetVersion symbol".into())
    })?;
    if version < MIN_CUDNN_VERSION {
        return Err(CudnnUnavailable::TooOld { found: version });
    }
    let ctx = primary_context(device_index).map_err(CudnnUnavailable::Failed)?;
    let handle = std::panic::catch_unwind(|| {
        let mut handle = std::ptr::null_mut();
        // SAFETY: the device's primary context is current on this thread.
        let status = unsafe { sys::cudnnCreate(&mut handle) };
        (status, handle)
    })
    .map_err(|_| CudnnUnavailable::Failed("the library has no cudnnCreate symbol".into()))?;
    if handle.0 != sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
        return Err(CudnnUnavailable::Failed(format!(
            "cudnnCreate: {:?}",
            handle.0
        )));
    }
    let cache_file = cache_dir.map(|d| d.join("cudnn-algorithms.json"));
    let algos = cache_file
        .as_deref()
        .and_then(|f| std::fs::read_to_string(f).ok())
        .and_then(|text| serde_json::from_str::<BTreeMap<String, Choice>>(&text).ok())
        .unwrap_or_default();
    let info = CudnnInfo {
        version,
        cached: algos.len(),
    };
    let _ = STATE.set(Mutex::new(State {
        handle: handle.1,
        ctx,
        version,
        cache_file,
        algos,
        descriptors: HashMap::new(),
        proven: HashSet::new(),
        warned: HashSet::new(),
    }));
    Ok(info)
}

fn primary_context(device_index: usize) -> Result<cudarc::driver::sys::CUcontext, String> {
    use cudarc::driver::result;
    result::init().map_err(|e| format!("CUDA driver: {e}"))?;
    let device = result::device::get(device_index as i32)
        .map_err(|e| format!("CUDA device {device_index}: {e}"))?;
    // SAFETY: the device handle is valid; cubecl retains the same primary context.
    let ctx =
        unsafe { result::primary_ctx::retain(device) }.map_err(|e| format!("CUDA context: {e}"))?;
    unsafe { result::ctx::set_current(ctx) }.map_err(|e| format!("CUDA context: {e}"))?;
    Ok(ctx)
}

/// The three convolution operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ConvOp {
    Forward,
    DataGrad,
    WeightGrad,
}

impl ConvOp {
    fn name(self) -> &'static str {
        match self {
            ConvOp::Forward => "fwd",
            ConvOp::DataGrad => "bwd-data",
            ConvOp::WeightGrad => "bwd-filter",
        }
    }

    fn algo_count(self) -> u32 {
        match self {
            ConvOp::Forward => 8,
            ConvOp::DataGrad => 6,
            ConvOp::WeightGrad => 7,
        }
    }
}

type Tensor = CubeTensor<CudaRuntime>;

/// `t` (logically `[b, c, d, h, w]`) with memory packed in `layout`'s order.
fn packed(t: Tensor, layout: Layout) -> Tensor {
    match layout {
        Layout::Ncdhw => {
            if t.is_contiguous() {
                t
            } else {
                into_contiguous(t)
            }
        }
        Layout::Ndhwc => {
            let cl = permute(t, &[0, 2, 3, 4, 1]);
            let cl = if cl.is_contiguous() {
                cl
            } else {
                into_contiguous(cl)
            };
            permute(cl, &[0, 4, 1, 2, 3])
        }
    }
}

/// A new `[b, c, d, h, w]` tensor with memory in `layout`'s order.
fn empty_like_layout(template: &Tensor, dims: [usize; 5], layout: Layout, dtype: DType) -> Tensor {
    let [b, c, d, h, w] = dims;
    match layout {
        Layout::Ncdhw => empty_device_contiguous_dtype(
            template.client.clone(),
            template.device.clone(),
            Shape::new(dims),
            dtype,
        ),
        Layout::Ndhwc => permute(
            empty_device_contiguous_dtype(
                template.client.clone(),
                template.device.clone(),
                Shape::new([b, d, h, w, c]),
                dtype,
            ),
            &[0, 4, 1, 2, 3],
        ),
    }
}

fn dims5(t: &Tensor) -> [usize; 5] {
    let s = t.meta.shape();
    [s[0], s[1], s[2], s[3], s[4]]
}

fn data_type(dtype: DType) -> Option<sys::cudnnDataType_t> {
    match dtype {
        DType::F32 => Some(sys::cudnnDataType_t::CUDNN_DATA_FLOAT),
        DType::BF16 => Some(sys::cudnnDataType_t::CUDNN_DATA_BFLOAT16),
        DType::F16 => Some(sys::cudnnDataType_t::CUDNN_DATA_HALF),
        _ => None,
    }
}

fn math_type(precision: Precision) -> sys::cudnnMathType_t {
    match precision {
        // No tensor cores, so no TF32 rounding: IEEE f32 fused multiply-adds.
        Precision::Fp32 => sys::cudnnMathType_t::CUDNN_FMA_MATH,
        // What PyTorch uses for f32 with TF32 allowed: tensor cores with TF32 operands.
        Precision::Tf32 => sys::cudnnMathType_t::CUDNN_DEFAULT_MATH,
        Precision::Bf16 => sys::cudnnMathType_t::CUDNN_TENSOR_OP_MATH,
    }
}

fn check(status: sys::cudnnStatus_t, what: &str) -> Result<(), String> {
    if status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what}: {status:?}"))
    }
}

/// Descriptors of one convolution, destroyed on drop.
struct Descriptors {
    x: sys::cudnnTensorDescriptor_t,
    y: sys::cudnnTensorDescriptor_t,
    w: sys::cudnnFilterDescriptor_t,
    conv: sys::cudnnConvolutionDescriptor_t,
}

// Never changed after `Descriptors::new`; cuDNN only reads them.
unsafe impl Send for Descriptors {}
unsafe impl Sync for Descriptors {}

impl Drop for Descriptors {
    fn drop(&mut self) {
        // SAFETY: created by `Descriptors::new` and not used after this.
        unsafe {
            sys::cudnnDestroyTensorDescriptor(self.x);
            sys::cudnnDestroyTensorDescriptor(self.y);
            sys::cudnnDestroyFilterDescriptor(self.w);
            sys::cudnnDestroyConvolutionDescriptor(self.conv);
        }
    }
}

fn strides5(t: &Tensor) -> [i32; 5] {
    let s = t.meta.strides();
    [
        s[0] as i32,
        s[1] as i32,
        s[2] as i32,
        s[3] as i32,
        s[4] as i32,
    ]
}

impl Descriptors {
    /// `x` and `y` as they lie in memory; the filter `[k, c, kd, kh, kw]` in `layout`'s format.
    fn new(
        x: &Tensor,
        y: &Tensor,
        w_dims: [usize; 5],
        spec: &Conv3dSpec,
        dtype: sys::cudnnDataType_t,
    ) -> Result<Self, String> {
        let mut d = Descriptors {
            x: std::ptr::null_mut(),
            y: std::ptr::null_mut(),
            w: std::ptr::null_mut(),
            conv: std::ptr::null_mut(),
        };
        let i32s = |a: [usize; 5]| a.map(|v| v as i32);
        let i3 = |a: [usize; 3]| a.map(|v| v as i32);
        // SAFETY: plain descriptor calls on locals; arrays outlive the calls.
        unsafe {
            check(sys::cudnnCreateTensorDescriptor(&mut d.x), "create x")?;
            check(sys::cudnnCreateTensorDescriptor(&mut d.y), "create y")?;
            check(sys::cudnnCreateFilterDescriptor(&mut d.w), "create w")?;
            check(
                sys::cudnnCreateConvolutionDescriptor(&mut d.conv),
                "create conv",
            )?;
            let (xd, xs) = (i32s(dims5(x)), strides5(x));
            check(
                sys::cudnnSetTensorNdDescriptor(d.x, dtype, 5, xd.as_ptr(), xs.as_ptr()),
                "x descriptor",
            )?;
            let (yd, ys) = (i32s(dims5(y)), strides5(y));
            check(
                sys::cudnnSetTensorNdDescriptor(d.y, dtype, 5, yd.as_ptr(), ys.as_ptr()),
                "y descriptor",
            )?;
            let format = match spec.compute.layout {
                Layout::Ncdhw => sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
                Layout::Ndhwc => sys::cudnnTensorFormat_t::CUDNN_TENSOR_NHWC,
            };
            let wd = i32s(w_dims);
            check(
                sys::cudnnSetFilterNdDescriptor(d.w, dtype, format, 5, wd.as_ptr()),
                "filter descriptor",
            )?;
            let (pad, stride, dil) = (i3(spec.padding), i3(spec.stride), [1i32; 3]);
            check(
                sys::cudnnSetConvolutionNdDescriptor(
                    d.conv,
                    3,
                    pad.as_ptr(),
                    stride.as_ptr(),
                    dil.as_ptr(),
                    sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                    sys::cudnnDataType_t::CUDNN_DATA_FLOAT,
                ),
                "convolution descriptor",
            )?;
            check(
                sys::cudnnSetConvolutionMathType(d.conv, math_type(spec.compute.precision)),
                "math type",
            )?;
        }
        Ok(d)
    }
}

/// The device pointers of `handles` and the stream of the first (the caller keeps the
/// buffers alive until the work is enqueued). One blocking call to cubecl's device thread for
/// all of them: each `get_resource` from the fusion thread waits until the device thread has
/// launched everything queued before it, so this makes one wait per convolution instead of one
/// per operand (about five). No change in step time was measured (docs/benchmarks, call 8).
fn ptrs_of(
    client: &cubecl::client::ComputeClient<CudaRuntime>,
    handles: Vec<cubecl::server::Handle>,
) -> Result<(Vec<u64>, cudarc::driver::sys::CUstream), String> {
    let resolved = client
        .exclusive(|| {
            // On the device thread: these calls run inline, without a round trip each.
            let mut ptrs = Vec::with_capacity(handles.len());
            let mut stream = 0usize;
            for (i, h) in handles.into_iter().enumerate() {
                let managed = client
                    .get_resource(h)
                    .map_err(|e| format!("buffer: {e:?}"))?;
                let r = managed.resource();
                if i == 0 {
                    stream = r.stream as usize;
                }
                ptrs.push(r.ptr);
            }
            Ok::<_, String>((ptrs, stream))
        })
        .map_err(|e| format!("device thread: {e:?}"))??;
    Ok((resolved.0, resolved.1 as cudarc::driver::sys::CUstream))
}

/// The operands of one call, packed for cuDNN: `(x, w, y_or_dy)` where the last is the output
/// for the forward pass and the incoming gradient otherwise.
pub(crate) struct Operands {
    pub x: Tensor,
    pub w: Tensor,
    pub dy: Option<Tensor>,
}

/// Runs `op` with cuDNN. `Err` means cuDNN refused this call (the caller falls back).
pub(crate) fn run(op: ConvOp, operands: Operands, spec: &Conv3dSpec) -> Result<Tensor, String> {
    let state = STATE.get().ok_or("cuDNN is not initialised")?;
    let layout = spec.compute.layout;
    let dtype = operands.x.dtype;
    if operands.w.dtype != dtype || operands.dy.as_ref().is_some_and(|t| t.dtype != dtype) {
        return Err(format!(
            "mixed dtypes (x {:?}, weight {:?})",
            dtype, operands.w.dtype
        ));
    }
    let cudnn_dtype = data_type(dtype).ok_or_else(|| format!("dtype {dtype:?}"))?;
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
            return Err(format!(
                "gradient shape {:?}, expected {y_dims:?}",
                dims5(dy)
            ));
        }
    }
    let out = match op {
        ConvOp::Forward => empty_like_layout(&x, y_dims, layout, dtype),
        ConvOp::DataGrad => empty_like_layout(&x, x_dims, layout, dtype),
        ConvOp::WeightGrad => empty_like_layout(&x, w_dims, layout, dtype),
    };
    let y_like = match op {
        ConvOp::Forward => &out,
        _ => dy.as_ref().ok_or("missing gradient")?,
    };
    let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
    let key = format!(
        "cudnn{}|{}|{:?}|{}|{}|x{:?}|w{:?}|s{:?}|p{:?}",
        s.version,
        op.name(),
        dtype,
        layout,
        spec.compute.precision,
        x_dims,
        w_dims,
        spec.stride,
        spec.padding
    );
    let desc = match s.descriptors.get(&key) {
        Some(d) => d.clone(),
        None => {
            let d = Arc::new(Descriptors::new(&x, y_like, w_dims, spec, cudnn_dtype)?);
            s.descriptors.insert(key.clone(), d.clone());
            d
        }
    };
    let proven = s.proven.contains(&key) && !sync_requested();
    if let Some(choice) = s.algos.get(&key).copied().filter(|_| proven) {
        let ctx = s.ctx;
        drop(s);
        let workspace = (choice.workspace > 0).then(|| x.client.empty(choice.workspace));
        let handles = OperandHandles {
            x: x.handle.clone(),
            w: (op != ConvOp::WeightGrad).then(|| w.handle.clone()),
            dy: dy.as_ref().map(|t| t.handle.clone()),
            out: out.handle.clone(),
            workspace,
        };
        enqueue(device_side(&x.device, ctx)?, op, desc, choice, handles, key);
        return Ok(out);
    }
    // SAFETY: the primary context was retained in `init`; cubecl uses the same one.
    unsafe { cudarc::driver::result::ctx::set_current(s.ctx) }.map_err(|e| e.to_string())?;
    let handle = s.handle;
    // SAFETY: `stream` is cubecl's live stream for this thread.
    let set_stream = |stream: cudarc::driver::sys::CUstream| {
        check(
            unsafe { sys::cudnnSetStream(handle, stream as sys::cudaStream_t) },
            "set stream",
        )
    };
    // Every operand's pointer (and the workspace's, once the algorithm is known) in one call
    // to the device thread: x, out, then w and dy where the operation reads them.
    let resolve = |workspace: Option<&cubecl::server::Handle>| {
        let mut handles = vec![x.handle.clone(), out.handle.clone()];
        if op != ConvOp::WeightGrad {
            handles.push(w.handle.clone());
        }
        if let Some(dy) = &dy {
            handles.push(dy.handle.clone());
        }
        handles.extend(workspace.cloned());
        let (p, stream) = ptrs_of(&x.client, handles)?;
        let mut rest = p[2..].iter().copied();
        let w = if op != ConvOp::WeightGrad {
            rest.next().unwrap_or(0)
        } else {
            0
        };
        let dy_ptr = if dy.is_some() {
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
        Ok::<_, String>((ptrs, rest.next().unwrap_or(0), stream))
    };
    let choice = match s.algos.get(&key) {
        Some(c) => *c,
        None => {
            let (ptrs, _, stream) = resolve(None)?;
            set_stream(stream)?;
            let c = find(op, handle, &desc, &ptrs, &x).map_err(|e| format!("{key}: {e}"))?;
            s.algos.insert(key.clone(), c);
            save_cache(&s);
            c
        }
    };
    let workspace = match choice.workspace {
        0 => None,
        bytes => Some(x.client.empty(bytes)),
    };
    let (ptrs, ws_ptr, stream) = resolve(workspace.as_ref())?;
    set_stream(stream)?;
    let result = launch(
        op,
        handle,
        &desc,
        &ptrs,
        choice.algo,
        ws_ptr,
        choice.workspace,
    );
    drop(workspace);
    if result.is_ok() {
        s.proven.insert(key.clone());
    }
    drop(s);
    result.map_err(|e| format!("{key}: {e}"))?;
    Ok(out)
}

/// The buffers of one call, held until the device thread has enqueued it.
struct OperandHandles {
    x: cubecl::server::Handle,
    w: Option<cubecl::server::Handle>,
    dy: Option<cubecl::server::Handle>,
    out: cubecl::server::Handle,
    workspace: Option<cubecl::server::Handle>,
}

/// Hands one call of an already searched shape to cubecl's device thread without waiting: it
/// runs after the kernels queued before it, resolves the buffers there (no round trip) and
/// enqueues cuDNN on the buffers' stream. A failure is kept for [`device_error`].
fn enqueue(
    side: &'static DeviceSide,
    op: ConvOp,
    desc: Arc<Descriptors>,
    choice: Choice,
    handles: OperandHandles,
    key: String,
) {
    use cubecl::server::ComputeServer as _;
    let stream_id = cubecl::stream_id::StreamId::current();
    side.thread.submit(move |server: &mut CudaServer| {
        let mut resolve = |h: &cubecl::server::Handle| -> Result<(u64, usize), String> {
            let managed = server
                .get_resource(h.clone().binding(), stream_id)
                .map_err(|e| format!("buffer: {e:?}"))?;
            let r = managed.resource();
            Ok((r.ptr, r.stream as usize))
        };
        let result = (|| {
            let mut ptr_of = |h: &Option<cubecl::server::Handle>| match h {
                Some(h) => resolve(h).map(|r| r.0),
                None => Ok(0),
            };
            let w = ptr_of(&handles.w)?;
            let dy = ptr_of(&handles.dy)?;
            let ws = ptr_of(&handles.workspace)?;
            let (x, stream) = resolve(&handles.x)?;
            let out = resolve(&handles.out)?.0;
            let ptrs = Ptrs { x, w, dy, out };
            // SAFETY: the retained primary context; the handle is this thread's alone, and the
            // stream is the one cubecl enqueues these buffers' kernels on.
            unsafe { cudarc::driver::result::ctx::set_current(side.ctx) }
                .map_err(|e| e.to_string())?;
            let stream = stream as sys::cudaStream_t;
            check(
                unsafe { sys::cudnnSetStream(side.handle, stream) },
                "set stream",
            )?;
            launch(
                op,
                side.handle,
                &desc,
                &ptrs,
                choice.algo,
                ws,
                choice.workspace,
            )
        })();
        drop(handles);
        if let Err(e) = result {
            let message = format!("cuDNN {key} failed on the device thread: {e}");
            eprintln!("{message}");
            DEVICE_ERROR
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert(message);
        }
    });
}

/// Reports (once per shape and reason) that cuDNN was not used.
pub(crate) fn warn_fallback(why: &str) {
    if let Some(state) = STATE.get() {
        let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
        if s.warned.insert(why.to_string()) {
            eprintln!("cuDNN not used for {why}; burn's kernel computes it instead");
        }
    }
}

struct Ptrs {
    x: u64,
    w: u64,
    dy: u64,
    out: u64,
}

fn vp(p: u64) -> *mut std::ffi::c_void {
    p as usize as *mut std::ffi::c_void
}

fn launch(
    op: ConvOp,
    handle: sys::cudnnHandle_t,
    d: &Descriptors,
    p: &Ptrs,
    algo: u32,
    ws: u64,
    ws_size: usize,
) -> Result<(), String> {
    if algo >= op.algo_count() {
        return Err(format!("cached algorithm {algo} out of range"));
    }
    let (alpha, beta) = (1.0f32, 0.0f32);
    let a = &alpha as *const f32 as *const std::ffi::c_void;
    let b = &beta as *const f32 as *const std::ffi::c_void;
    // SAFETY: pointers are live buffers of the right sizes (descriptors built from the same
    // tensors); algorithm values are in range (checked above), so the enum transmutes are valid.
    let status = unsafe {
        match op {
            ConvOp::Forward => sys::cudnnConvolutionForward(
                handle,
                a,
                d.x,
                vp(p.x),
                d.w,
                vp(p.w),
                d.conv,
                std::mem::transmute::<u32, sys::cudnnConvolutionFwdAlgo_t>(algo),
                vp(ws),
                ws_size,
                b,
                d.y,
                vp(p.out),
            ),
            ConvOp::DataGrad => sys::cudnnConvolutionBackwardData(
                handle,
                a,
                d.w,
                vp(p.w),
                d.y,
                vp(p.dy),
                d.conv,
                std::mem::transmute::<u32, sys::cudnnConvolutionBwdDataAlgo_t>(algo),
                vp(ws),
                ws_size,
                b,
                d.x,
                vp(p.out),
            ),
            ConvOp::WeightGrad => sys::cudnnConvolutionBackwardFilter(
                handle,
                a,
                d.x,
                vp(p.x),
                d.y,
                vp(p.dy),
                d.conv,
                std::mem::transmute::<u32, sys::cudnnConvolutionBwdFilterAlgo_t>(algo),
                vp(ws),
                ws_size,
                b,
                d.w,
                vp(p.out),
            ),
        }
    };
    check(status, op.name())
}

/// Times the candidate algorithms once and returns the fastest that fits [`MAX_WORKSPACE`].
fn find(
    op: ConvOp,
    handle: sys::cudnnHandle_t,
    d: &Descriptors,
    p: &Ptrs,
    x: &Tensor,
) -> Result<Choice, String> {
    const N: usize = 8;
    let mut returned = 0i32;
    // Heuristic candidates first, for the workspace they need.
    let ws_needed: usize = unsafe {
        match op {
            ConvOp::Forward => {
                let mut perf: [sys::cudnnConvolutionFwdAlgoPerf_t; N] = std::mem::zeroed();
                check(
                    sys::cudnnGetConvolutionForwardAlgorithm_v7(
                        handle,
                        d.x,
                        d.w,
                        d.conv,
                        d.y,
                        N as i32,
                        &mut returned,
                        perf.as_mut_ptr(),
                    ),
                    "forward heuristics",
                )?;
                max_fitting(&perf[..returned as usize])
            }
            ConvOp::DataGrad => {
                let mut perf: [sys::cudnnConvolutionBwdDataAlgoPerf_t; N] = std::mem::zeroed();
                check(
                    sys::cudnnGetConvolutionBackwardDataAlgorithm_v7(
                        handle,
                        d.w,
                        d.y,
                        d.conv,
                        d.x,
                        N as i32,
                        &mut returned,
                        perf.as_mut_ptr(),
                    ),
                    "data-gradient heuristics",
                )?;
                max_fitting(&perf[..returned as usize])
            }
            ConvOp::WeightGrad => {
                let mut perf: [sys::cudnnConvolutionBwdFilterAlgoPerf_t; N] = std::mem::zeroed();
                check(
                    sys::cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                        handle,
                        d.x,
                        d.y,
                        d.conv,
                        d.w,
                        N as i32,
                        &mut returned,
                        perf.as_mut_ptr(),
                    ),
                    "weight-gradient heuristics",
                )?;
                max_fitting(&perf[..returned as usize])
            }
        }
    };
    let ws_handle = x.client.empty(ws_needed.max(256));
    let ws = x
        .client
        .get_resource(ws_handle.clone())
        .map_err(|e| format!("workspace: {e:?}"))?
        .resource()
        .ptr;
    // SAFETY: as in `launch`; the workspace buffer holds `ws_needed` bytes.
    let best = unsafe {
        match op {
            ConvOp::Forward => {
                let mut perf: [sys::cudnnConvolutionFwdAlgoPerf_t; N] = std::mem::zeroed();
                check(
                    sys::cudnnFindConvolutionForwardAlgorithmEx(
                        handle,
                        d.x,
                        vp(p.x),
                        d.w,
                        vp(p.w),
                        d.conv,
                        d.y,
                        vp(p.out),
                        N as i32,
                        &mut returned,
                        perf.as_mut_ptr(),
                        vp(ws),
                        ws_needed,
                    ),
                    "forward search",
                )?;
                pick(&perf[..returned as usize], ws_needed)
            }
            ConvOp::DataGrad => {
                let mut perf: [sys::cudnnConvolutionBwdDataAlgoPerf_t; N] = std::mem::zeroed();
                check(
                    sys::cudnnFindConvolutionBackwardDataAlgorithmEx(
                        handle,
                        d.w,
                        vp(p.w),
                        d.y,
                        vp(p.dy),
                        d.conv,
                        d.x,
                        vp(p.out),
                        N as i32,
                        &mut returned,
                        perf.as_mut_ptr(),
                        vp(ws),
                        ws_needed,
                    ),
                    "data-gradient search",
                )?;
                pick(&perf[..returned as usize], ws_needed)
            }
            ConvOp::WeightGrad => {
                let mut perf: [sys::cudnnConvolutionBwdFilterAlgoPerf_t; N] = std::mem::zeroed();
                check(
                    sys::cudnnFindConvolutionBackwardFilterAlgorithmEx(
                        handle,
                        d.x,
                        vp(p.x),
                        d.y,
                        vp(p.dy),
                        d.conv,
                        d.w,
                        vp(p.out),
                        N as i32,
                        &mut returned,
                        perf.as_mut_ptr(),
                        vp(ws),
                        ws_needed,
                    ),
                    "weight-gradient search",
                )?;
                pick(&perf[..returned as usize], ws_needed)
            }
        }
    };
    drop(ws_handle);
    best
}

/// What `find` reads from each of cuDNN's three per-algorithm result types: algorithm,
/// status, workspace bytes and time (ms).
trait AlgoPerf {
    fn result(&self) -> (u32, sys::cudnnStatus_t, usize, f32);
}

macro_rules! algo_perf {
    ($($t:ty),*) => {$(
        impl AlgoPerf for $t {
            fn result(&self) -> (u32, sys::cudnnStatus_t, usize, f32) {
                (self.algo as u32, self.status, self.memory, self.time)
            }
        }
    )*};
}

algo_perf!(
    sys::cudnnConvolutionFwdAlgoPerf_t,
    sys::cudnnConvolutionBwdDataAlgoPerf_t,
    sys::cudnnConvolutionBwdFilterAlgoPerf_t
);

/// The fastest candidate that ran within the workspace, or what each candidate reported.
fn pick(perf: &[impl AlgoPerf], ws: usize) -> Result<Choice, String> {
    let results: Vec<_> = perf.iter().map(AlgoPerf::result).collect();
    let ran = |r: &&(u32, sys::cudnnStatus_t, usize, f32)| {
        r.1 == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS && r.2 <= ws && r.3 >= 0.0
    };
    let fastest = results
        .iter()
        .filter(ran)
        .map(|r| r.3)
        .fold(f32::INFINITY, f32::min);
    results
        .iter()
        .filter(ran)
        .filter(|r| r.3 <= fastest * NEAR_FASTEST)
        .min_by_key(|r| r.2)
        .map(|r| Choice {
            algo: r.0,
            workspace: r.2,
            ms: r.3,
        })
        .ok_or_else(|| {
            let tried: Vec<String> = results
                .iter()
                .map(|(a, st, m, _)| format!("algo {a}: {st:?}, {} MiB", m >> 20))
                .collect();
            format!(
                "no algorithm ran within a {} MiB workspace ({})",
                ws >> 20,
                tried.join("; ")
            )
        })
}

/// The largest workspace among the usable candidates, capped at [`MAX_WORKSPACE`].
fn max_fitting(perf: &[impl AlgoPerf]) -> usize {
    perf.iter()
        .map(AlgoPerf::result)
        .filter(|(_, status, _, _)| *status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS)
        .map(|(_, _, memory, _)| memory)
        .filter(|m| *m <= MAX_WORKSPACE)
        .max()
        .unwrap_or(0)
}

/// Writes the algorithm cache atomically (a temporary file renamed over the old one).
fn save_cache(s: &State) {
    let Some(file) = &s.cache_file else { return };
    let Ok(text) = serde_json::to_string_pretty(&s.algos) else {
        return;
    };
    let tmp = file.with_extension("json.tmp");
    let written = std::fs::write(&tmp, text).and_then(|_| std::fs::rename(&tmp, file));
    if let Err(e) = written {
        eprintln!(
            "cannot write the cuDNN algorithm cache {}: {e}",
            file.display()
        );
    }
}
