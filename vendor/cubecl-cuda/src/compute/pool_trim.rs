//! medddpm patch: freed memory that cubecl's pools may keep before a large request hands it
//! back to the driver's stream-ordered pool. cubecl's `ExclusivePages` pools keep a freed buffer
//! for requests of its own size class and, on CUDA, never release it while no error occurs, so
//! a training step's temporaries of one size class stay reserved while later tensors of other
//! classes take new memory; the driver's pool reuses freed memory for requests of any size.

use std::sync::OnceLock;

/// Requests below this size never trim: small buffers' churn would cost launches' time and
/// free little.
pub(crate) const MIN_REQUEST: u64 = 1 << 20;

static SLACK: OnceLock<u64> = OnceLock::new();

/// medddpm-rs: before a request of at least 1 MiB, when cubecl's pools on a stream hold more
/// than `slack` bytes of freed buffers, those buffers go back to the driver's memory pool, which
/// keeps freed memory across synchronisations (its release threshold at the maximum) so that the
/// next requests reuse it rather than map new memory. Devices whose first client opens after
/// this call; returns false, changing nothing, when a slack was set before.
pub fn set_pool_trim(slack: u64) -> bool {
    SLACK.set(slack).is_ok()
}

pub(crate) fn slack() -> Option<u64> {
    SLACK.get().copied()
}

/// With trimming on, the device's default memory pool keeps freed memory instead of returning
/// it to the system at each synchronisation (which would make every step map memory anew).
pub(crate) fn keep_freed_memory(device: cudarc::driver::sys::CUdevice) {
    if slack().is_none() {
        return;
    }
    use cudarc::driver::sys::{
        CUmemPool_attribute, CUmemoryPool, CUresult, cuDeviceGetDefaultMemPool,
        cuMemPoolSetAttribute,
    };
    // SAFETY: `device` is a valid device whose primary context is current; the attribute is
    // read from a pointer to a u64 that outlives the call.
    unsafe {
        let mut pool: CUmemoryPool = std::ptr::null_mut();
        if cuDeviceGetDefaultMemPool(&mut pool, device) == CUresult::CUDA_SUCCESS {
            let mut threshold = u64::MAX;
            let _ = cuMemPoolSetAttribute(
                pool,
                CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&mut threshold as *mut u64).cast(),
            );
        }
    }
}
