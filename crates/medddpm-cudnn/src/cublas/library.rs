//! cuBLAS loaded at run time: the library (once per process), a handle per device, and the
//! strided batched product.

use std::collections::HashMap;
use std::ffi::{c_int, c_longlong, c_void};
use std::sync::{Mutex, OnceLock};

use libloading::Library;

use crate::cuda::load_library;
use crate::error::{driver, EngineError};
use crate::reference::product::plan::ColumnMajor;

type Handle = *mut c_void;
type Create = unsafe extern "C" fn(*mut Handle) -> c_int;
type SetStream = unsafe extern "C" fn(Handle, *mut c_void) -> c_int;
type SetWorkspace = unsafe extern "C" fn(Handle, *mut c_void, usize) -> c_int;
#[allow(clippy::type_complexity)]
type GemmStridedBatchedEx = unsafe extern "C" fn(
    Handle,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    *const c_void,
    *const c_void,
    c_int,
    c_int,
    c_longlong,
    *const c_void,
    c_int,
    c_int,
    c_longlong,
    *const c_void,
    *mut c_void,
    c_int,
    c_int,
    c_longlong,
    c_int,
    c_int,
    c_int,
) -> c_int;

/// `cudaDataType_t` values.
pub(super) mod data_type {
    pub const R_32F: i32 = 0;
    pub const R_64F: i32 = 1;
    pub const R_16F: i32 = 2;
    pub const R_16BF: i32 = 14;
}

/// `cublasComputeType_t` values.
pub(super) mod compute_type {
    pub const F32: i32 = 68;
    pub const F32_FAST_TF32: i32 = 77;
    pub const F64: i32 = 70;
}

/// `CUBLAS_GEMM_DEFAULT`: cuBLAS's heuristics pick the kernel (tensor cores where the types
/// allow).
const GEMM_DEFAULT: c_int = -1;

/// Bytes of the workspace given to cuBLAS per stream (what PyTorch gives it on Hopper).
const WORKSPACE: usize = 32 << 20;

/// The workspace of `stream` (allocated on its first product, kept for the process; the
/// device thread that enqueues the products is the only user).
fn workspace_of(stream: u64) -> Result<u64, EngineError> {
    static WORKSPACES: Mutex<Option<HashMap<u64, u64>>> = Mutex::new(None);
    let mut all = WORKSPACES.lock().unwrap_or_else(|e| e.into_inner());
    let all = all.get_or_insert_with(HashMap::new);
    if let Some(&ptr) = all.get(&stream) {
        return Ok(ptr);
    }
    // SAFETY: a plain allocation in the current context (the stream's).
    let ptr = unsafe { cudarc::driver::result::malloc_sync(WORKSPACE) }
        .map_err(driver("cuBLAS workspace (32 MiB)"))?;
    all.insert(stream, ptr);
    Ok(ptr)
}

/// The functions used, from the loaded library.
pub(super) struct Cublas {
    create: Create,
    set_stream: SetStream,
    set_workspace: SetWorkspace,
    gemm: GemmStridedBatchedEx,
    /// Kept loaded for the process.
    _lib: Library,
}

/// The library, or why it could not be loaded (tried once).
pub(super) fn library() -> Result<&'static Cublas, EngineError> {
    static LIBRARY: OnceLock<Result<Cublas, EngineError>> = OnceLock::new();
    LIBRARY.get_or_init(load).as_ref().map_err(Clone::clone)
}

fn load() -> Result<Cublas, EngineError> {
    let names = ["libcublas.so.13", "libcublas.so.12", "libcublas.so"];
    // SAFETY: loading cuBLAS runs no initialisers that depend on our state.
    let (lib, name) = unsafe { load_library("MEDDDPM_CUBLAS", &names) }.map_err(|errors| {
        EngineError::Library(format!(
            "cuBLAS could not be loaded (put libcublas.so on LD_LIBRARY_PATH or name the file in MEDDDPM_CUBLAS): {errors}"
        ))
    })?;
    resolve(lib).map_err(|e| e.context(name))
}

fn resolve(lib: Library) -> Result<Cublas, EngineError> {
    fn symbol<T: Copy>(lib: &Library, name: &str) -> Result<T, EngineError> {
        // SAFETY: each name is declared above with cuBLAS's C signature.
        unsafe { lib.get::<T>(name.as_bytes()) }
            .map(|s| *s)
            .map_err(|e| EngineError::Library(format!("lacks {name}: {e}")))
    }
    Ok(Cublas {
        create: symbol(&lib, "cublasCreate_v2")?,
        set_stream: symbol(&lib, "cublasSetStream_v2")?,
        set_workspace: symbol(&lib, "cublasSetWorkspace_v2")?,
        gemm: symbol(&lib, "cublasGemmStridedBatchedEx")?,
        _lib: lib,
    })
}

fn check(call: &'static str, status: c_int) -> Result<(), EngineError> {
    match status {
        0 => Ok(()),
        status => Err(EngineError::Cublas { what: call, status }),
    }
}

/// The element and accumulation types of one product (`cudaDataType_t`,
/// `cublasComputeType_t`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Types {
    pub data: i32,
    pub compute: i32,
}

impl Cublas {
    /// The handle of CUDA device `device` (made on its first call, with the device's primary
    /// context current), for cubecl's device thread of that device only.
    pub fn handle(&self, device: usize) -> Result<usize, EngineError> {
        static HANDLES: Mutex<Option<HashMap<usize, usize>>> = Mutex::new(None);
        let mut handles = HANDLES.lock().unwrap_or_else(|e| e.into_inner());
        let handles = handles.get_or_insert_with(HashMap::new);
        if let Some(h) = handles.get(&device) {
            return Ok(*h);
        }
        use cudarc::driver::result;
        let on = |e: EngineError| e.context(format!("cuBLAS on CUDA device {device}"));
        let dev = result::device::get(device as c_int).map_err(|e| on(driver("CUDA device")(e)))?;
        // SAFETY: the device's primary context (the one cubecl uses), made current on this
        // thread before the handle is created on it.
        unsafe {
            let ctx =
                result::primary_ctx::retain(dev).map_err(|e| on(driver("CUDA context")(e)))?;
            result::ctx::set_current(ctx).map_err(|e| on(driver("CUDA context")(e)))?;
        }
        let mut handle: Handle = std::ptr::null_mut();
        // SAFETY: plain handle creation with the context current.
        check("cublasCreate", unsafe { (self.create)(&mut handle) }).map_err(on)?;
        handles.insert(device, handle as usize);
        Ok(handle as usize)
    }

    /// Enqueues `plan` on `stream` through `handle`, on the buffers `[first, second, c]`.
    ///
    /// # Safety
    /// The pointers are live device buffers holding what `plan`'s sizes, leading dimensions and
    /// strides describe in `types.data`, and `stream` is a live stream of their context.
    pub unsafe fn gemm(
        &self,
        handle: usize,
        stream: u64,
        plan: &ColumnMajor,
        [first, second, c]: [u64; 3],
        types: Types,
    ) -> Result<(), EngineError> {
        let handle = handle as Handle;
        check(
            "cublasSetStream",
            (self.set_stream)(handle, stream as usize as *mut c_void),
        )?;
        // A workspace of ours per stream (setting the stream dropped the previous one): left
        // to itself, cuBLAS allocates its workspace stream-ordered, which a CUDA graph
        // captures as allocation and free nodes that make each replay's launch slow.
        let workspace = workspace_of(stream)?;
        check(
            "cublasSetWorkspace",
            (self.set_workspace)(handle, workspace as usize as *mut c_void, WORKSPACE),
        )?;
        let (one_f32, zero_f32) = (1.0f32, 0.0f32);
        let (one_f64, zero_f64) = (1.0f64, 0.0f64);
        // alpha and beta in the compute type's scalar type.
        let (alpha, beta) = match types.compute {
            compute_type::F64 => (
                &one_f64 as *const f64 as *const c_void,
                &zero_f64 as *const f64 as *const c_void,
            ),
            _ => (
                &one_f32 as *const f32 as *const c_void,
                &zero_f32 as *const f32 as *const c_void,
            ),
        };
        let op = |t: bool| c_int::from(t);
        let p = |ptr: u64| ptr as usize as *const c_void;
        check(
            "cublasGemmStridedBatchedEx",
            (self.gemm)(
                handle,
                op(plan.trans_first),
                op(plan.trans_second),
                plan.m,
                plan.n,
                plan.k,
                alpha,
                p(first),
                types.data,
                plan.ld_first,
                plan.stride_first,
                p(second),
                types.data,
                plan.ld_second,
                plan.stride_second,
                beta,
                c as usize as *mut c_void,
                types.data,
                plan.ldc,
                plan.stride_c,
                plan.batch,
                types.compute,
                GEMM_DEFAULT,
            ),
        )
    }
}
