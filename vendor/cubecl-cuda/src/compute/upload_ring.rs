//! medddpm patch: a ring of pinned host memory for small uploads from pageable memory (a
//! kernel's metadata: shapes and strides beyond the launch parameters).
//!
//! A copy from pageable memory is staged by the driver, and the stream waits for that staging
//! (about 1 us a copy in the bench on an H200, several when other threads keep the host busy),
//! where from pinned memory a copy is a plain DMA. The ring is cut into chunks; leaving a chunk
//! records a fence on the stream after its copies, and entering it again waits for that fence,
//! which the GPU has long passed unless the host runs a whole ring of uploads ahead of it.
//!
//! A second ring of 16 MiB chunks for a training batch's volumes was tried and removed: the
//! stream no longer waited for those copies, but 8 of 12 `medddpm train` runs took 20-60 ms
//! longer an optimizer step on the host, with a fence after every copy as well (twenty-fourth
//! session, docs/benchmarks/README.md).

use crate::compute::sync::Fence;
use cubecl_core::server::ServerError;
use cudarc::driver::sys::CUstream;

/// The largest upload the ring takes, and the size of a chunk.
pub const CHUNK: usize = 64 * 1024;
/// Chunks in the ring (4 MiB: a chunk holds a few hundred kernels' metadata).
const CHUNKS: usize = 64;
/// Uploads start at multiples of this many bytes.
const ALIGN: usize = 16;

#[derive(Debug)]
pub struct UploadRing {
    /// Pinned host memory of `CHUNK * CHUNKS` bytes, allocated at the first upload.
    base: *mut u8,
    chunk: usize,
    offset: usize,
    /// Per chunk, the fence recorded after its copies when the ring left it.
    fences: Vec<Option<Fence>>,
    /// The stream the copies run on (set with `base`).
    stream: CUstream,
    /// While the stream captures a graph: where uploads go instead (`capture.rs`).
    capture: Option<super::capture::CaptureArena>,
}

// SAFETY: the ring is owned by one stream, used from the thread that owns the stream's server;
// the pointer is to pinned host memory that lives as long as the ring.
unsafe impl Send for UploadRing {}

impl Default for UploadRing {
    fn default() -> Self {
        Self {
            base: core::ptr::null_mut(),
            chunk: 0,
            offset: 0,
            fences: (0..CHUNKS).map(|_| None).collect(),
            stream: core::ptr::null_mut(),
            capture: None,
        }
    }
}

impl UploadRing {
    /// Copies `data` (at most [`CHUNK`] bytes) into the ring and returns the pinned copy,
    /// which stays untouched until `stream` has passed the work enqueued on it after this call
    /// and before the ring comes round again.
    pub fn stage(&mut self, data: &[u8], stream: CUstream) -> Result<&[u8], ServerError> {
        if let Some(arena) = self.capture.as_mut() {
            return arena.stage(data).map_err(|reason| ServerError::Generic {
                reason,
                backtrace: cubecl_common::backtrace::BackTrace::capture(),
            });
        }
        assert!(data.len() <= CHUNK, "an upload of {} bytes", data.len());
        if self.base.is_null() {
            // SAFETY: the calling thread has the stream's context current.
            let ptr = unsafe { cudarc::driver::result::malloc_host(CHUNK * CHUNKS, 0) }
                .map_err(|e| ServerError::Generic {
                    reason: format!("pinned upload ring: {e:?}"),
                    backtrace: cubecl_common::backtrace::BackTrace::capture(),
                })?;
            self.base = ptr as *mut u8;
            self.stream = stream;
        }
        if self.offset + data.len() > CHUNK {
            self.fences[self.chunk] = Some(Fence::new(stream));
            self.chunk = (self.chunk + 1) % CHUNKS;
            self.offset = 0;
            if let Some(fence) = self.fences[self.chunk].take() {
                fence.wait_sync()?;
            }
        }
        // SAFETY: `base` holds `CHUNK * CHUNKS` bytes and `offset + len <= CHUNK`; the range is
        // not read by any pending copy (its chunk's fence was passed above).
        let staged = unsafe {
            let at = self.base.add(self.chunk * CHUNK + self.offset);
            core::ptr::copy_nonoverlapping(data.as_ptr(), at, data.len());
            core::slice::from_raw_parts(at, data.len())
        };
        self.offset += data.len().next_multiple_of(ALIGN);
        Ok(staged)
    }
}

impl UploadRing {
    /// Uploads of any size go to a capture's arena from now on, until [`Self::end_capture`].
    pub fn begin_capture(&mut self) {
        self.capture = Some(Default::default());
    }

    /// The arena of the capture that ends (empty when none was begun).
    pub fn end_capture(&mut self) -> super::capture::CaptureArena {
        self.capture.take().unwrap_or_default()
    }

    /// Where a kernel launched in the capture under way reads `data`, placed in the capture's
    /// device arena (`None` when not capturing).
    pub fn place_metadata(&mut self, data: &[u8]) -> Option<Result<u64, ServerError>> {
        let arena = self.capture.as_mut()?;
        Some(
            arena
                .place_metadata(data)
                .map_err(|reason| ServerError::Generic {
                    reason,
                    backtrace: cubecl_common::backtrace::BackTrace::capture(),
                }),
        )
    }

    /// Whether uploads go to a capture's arena.
    pub fn capturing(&self) -> bool {
        self.capture.is_some()
    }
}

impl Drop for UploadRing {
    fn drop(&mut self) {
        if self.base.is_null() {
            return;
        }
        // Every copy from the ring has run once the stream passes a fence recorded now.
        if Fence::new(self.stream).wait_sync().is_ok() {
            // SAFETY: allocated by `malloc_host`; no copy from it is pending.
            let _ = unsafe { cudarc::driver::result::free_host(self.base as *mut _) };
        }
    }
}
