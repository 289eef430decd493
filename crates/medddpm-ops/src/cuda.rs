//! What the CUDA-only modules (cuBLAS, cuDNN, graphs, page-locked uploads, NCCL) share: burn's
//! fused CUDA backend by name, cubecl's device thread of a device, and loading NVIDIA's libraries.

use std::collections::HashMap;
use std::sync::Mutex;

use burn_cubecl::CubeBackend;
use burn_fusion::Fusion;
use cubecl_cuda::CudaRuntime;
use libloading::Library;

/// burn's CUDA backend without fusion.
pub type Cube<F, I, BT> = CubeBackend<CudaRuntime, F, I, BT>;
/// burn's CUDA backend as users run it (fusion on top).
pub type Fused<F, I, BT> = Fusion<Cube<F, I, BT>>;
/// cubecl's CUDA compute server (what runs on the device thread).
pub type CudaServer = <CudaRuntime as cubecl::Runtime>::Server;
/// A handle on cubecl's device thread.
pub type DeviceThread = cubecl::device_handle::DeviceHandle<CudaServer>;

/// The first of `names` that loads (only the file `$variable` names, where it is set), with its
/// name; else each attempt's error, `name: error`, joined by `; `.
///
/// # Safety
/// Loading any of these files must run no initialisers that depend on our state.
pub unsafe fn load_library(variable: &str, names: &[&str]) -> Result<(Library, String), String> {
    let names: Vec<String> = match std::env::var(variable) {
        Ok(path) => vec![path],
        Err(_) => names.iter().map(|n| n.to_string()).collect(),
    };
    let mut errors = Vec::new();
    for name in names {
        // SAFETY: the caller vouches for every file it names.
        match unsafe { Library::new(&name) } {
            Ok(lib) => return Ok((lib, name)),
            Err(e) => errors.push(format!("{name}: {e}")),
        }
    }
    Err(errors.join("; "))
}

/// cubecl's device thread of `device` (a handle kept per device).
pub fn device_thread(device: &cubecl_cuda::CudaDevice) -> DeviceThread {
    use cubecl::device::Device as _;
    static THREADS: Mutex<Option<HashMap<usize, DeviceThread>>> = Mutex::new(None);
    let mut threads = THREADS.lock().unwrap_or_else(|e| e.into_inner());
    threads
        .get_or_insert_with(HashMap::new)
        .entry(device.index)
        .or_insert_with(|| DeviceThread::new(device.to_id()))
        .clone()
}
