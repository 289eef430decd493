//! medddpm patch: capturing a stream's launches as a CUDA graph and replaying it.
//!
//! While a stream captures, nothing runs: the driver records each launch and copy, with the
//! addresses and arguments it has now, into a graph that later replays them. So cubecl must not,
//! on that stream, allocate through the stream-ordered allocator (an allocation node would own
//! the memory), free memory the graph will touch again, wait for an event recorded elsewhere
//! (illegal in a capture), copy from host memory that is reused later (the replay would copy
//! whatever is there then), or read back to the host (nothing has run). The paths that would are
//! told apart by [`is_capturing`]; a read or synchronisation marks the capture as failed
//! ([`forbid`]) and [`CudaServer::end_capture`](super::CudaServer::end_capture) says why.

use core::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use cudarc::driver::sys::{self, CUstream};

/// Streams capturing now, in this process; zero skips the driver query on the hot paths.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// Why the capture under way cannot be replayed (the first reason), if anything said so.
static FORBIDDEN: Mutex<Option<String>> = Mutex::new(None);

/// Whether `stream` is capturing (or its capture was invalidated and not yet ended).
pub fn is_capturing(stream: CUstream) -> bool {
    if ACTIVE.load(Ordering::Acquire) == 0 || stream.is_null() {
        return false;
    }
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: a query on a live stream.
    let result = unsafe { sys::cuStreamIsCapturing(stream, &mut status) };
    result == sys::CUresult::CUDA_SUCCESS
        && status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
}

/// Marks the capture on `stream` as failed with `why` when it captures (a read back to the
/// host or a synchronisation: what it waits for has not run).
pub fn forbid(stream: CUstream, why: &str) {
    if is_capturing(stream) {
        FORBIDDEN
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(|| why.to_string());
    }
}

fn driver(result: sys::CUresult, what: &str) -> Result<(), String> {
    match result {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        other => Err(format!("{what}: {other:?}")),
    }
}

/// Starts capturing `stream` in relaxed mode (other threads may keep allocating and launching
/// on their own streams meanwhile).
pub(crate) fn begin(stream: CUstream) -> Result<(), String> {
    FORBIDDEN.lock().unwrap_or_else(|e| e.into_inner()).take();
    ACTIVE.fetch_add(1, Ordering::AcqRel);
    // SAFETY: a live stream, not capturing (checked by the caller).
    let begun = unsafe {
        sys::cuStreamBeginCapture_v2(
            stream,
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        )
    };
    driver(begun, "cuStreamBeginCapture").inspect_err(|_| {
        ACTIVE.fetch_sub(1, Ordering::AcqRel);
    })
}

/// Ends the capture on `stream` and instantiates its graph, with `arena` (the pinned memory
/// its host-to-device copies read, and its kernels' metadata, written here) kept for as long
/// as the graph lives.
pub(crate) fn end(stream: CUstream, arena: CaptureArena) -> Result<CudaGraph, String> {
    let mut graph = core::ptr::null_mut();
    // SAFETY: the stream captures (begun by `begin`).
    let ended = unsafe { sys::cuStreamEndCapture(stream, &mut graph) };
    ACTIVE.fetch_sub(1, Ordering::AcqRel);
    let forbidden = FORBIDDEN.lock().unwrap_or_else(|e| e.into_inner()).take();
    let mut captured = CudaGraph {
        graph,
        exec: core::ptr::null_mut(),
        nodes: 0,
        kinds: Vec::new(),
        _arena: arena.chunks,
        _metadata: arena.metadata,
    };
    driver(ended, "cuStreamEndCapture")?;
    if let Some(why) = forbidden {
        return Err(why);
    }
    // SAFETY: a graph just captured; counting its nodes reads nothing else.
    driver(
        unsafe { sys::cuGraphGetNodes(graph, core::ptr::null_mut(), &mut captured.nodes) },
        "cuGraphGetNodes",
    )?;
    captured.kinds = node_kinds(graph, captured.nodes)?;
    for chunk in &captured._metadata {
        chunk.write()?;
    }
    // SAFETY: as above; the executable graph is destroyed with `captured`.
    driver(
        unsafe { sys::cuGraphInstantiateWithFlags(&mut captured.exec, graph, 0) },
        "cuGraphInstantiate",
    )?;
    // The graph's work goes to the device now rather than at its first replay.
    // SAFETY: an executable graph just instantiated, and the stream that captured it.
    driver(
        unsafe { sys::cuGraphUpload(captured.exec, stream) },
        "cuGraphUpload",
    )?;
    Ok(captured)
}

/// How many of `graph`'s `n` nodes are of each kind.
fn node_kinds(graph: sys::CUgraph, n: usize) -> Result<Vec<(String, usize)>, String> {
    let mut nodes = vec![core::ptr::null_mut(); n];
    let mut count = n;
    // SAFETY: `nodes` holds `count` entries.
    driver(
        unsafe { sys::cuGraphGetNodes(graph, nodes.as_mut_ptr(), &mut count) },
        "cuGraphGetNodes",
    )?;
    let mut kinds: Vec<(String, usize)> = Vec::new();
    for node in &nodes[..count] {
        let mut kind = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
        // SAFETY: a node of the graph.
        driver(unsafe { sys::cuGraphNodeGetType(*node, &mut kind) }, "cuGraphNodeGetType")?;
        let mut name = format!("{kind:?}")
            .trim_start_matches("CU_GRAPH_NODE_TYPE_")
            .to_lowercase();
        if kind == sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEMCPY {
            let mut p = core::mem::MaybeUninit::<sys::CUDA_MEMCPY3D>::zeroed();
            // SAFETY: a memcpy node's parameters written into `p`; the memory types are read
            // as the plain integers they are (1 host, 2 device, 3 array, 4 unified).
            let ok = unsafe { sys::cuGraphMemcpyNodeGetParams(*node, p.as_mut_ptr()) }
                == sys::CUresult::CUDA_SUCCESS;
            if ok {
                let side = |t: u32| match t {
                    1 => "h",
                    2 => "d",
                    4 => "u",
                    _ => "a",
                };
                let (src, dst) = unsafe {
                    let q = p.as_ptr();
                    (
                        core::ptr::addr_of!((*q).srcMemoryType).cast::<u32>().read(),
                        core::ptr::addr_of!((*q).dstMemoryType).cast::<u32>().read(),
                    )
                };
                name = format!("memcpy {}to{}", side(src), side(dst));
            }
        }
        match kinds.iter_mut().find(|(k, _)| *k == name) {
            Some((_, c)) => *c += 1,
            None => kinds.push((name, 1)),
        }
    }
    Ok(kinds)
}

/// Pinned host memory that a captured copy reads at every replay.
#[derive(Debug)]
pub struct PinnedChunk {
    ptr: *mut u8,
    len: usize,
    used: usize,
}

// SAFETY: plain host memory, owned by one arena at a time.
unsafe impl Send for PinnedChunk {}

impl PinnedChunk {
    fn new(len: usize) -> Result<Self, String> {
        // SAFETY: a plain pinned allocation (the caller's context is current).
        let ptr = unsafe { cudarc::driver::result::malloc_host(len, 0) }
            .map_err(|e| format!("pinned memory for a captured copy: {e:?}"))?;
        Ok(Self {
            ptr: ptr as *mut u8,
            len,
            used: 0,
        })
    }
}

impl Drop for PinnedChunk {
    fn drop(&mut self) {
        // SAFETY: allocated by `malloc_host`; the graph whose copies read it is gone.
        let _ = unsafe { cudarc::driver::result::free_host(self.ptr as *mut _) };
    }
}

/// Device memory holding kernels' metadata for one graph: written once, after the capture,
/// and read by every replay, so the graph holds no copy node for it.
#[derive(Debug)]
pub struct MetadataChunk {
    ptr: u64,
    len: usize,
    host: Vec<u8>,
}

impl MetadataChunk {
    fn new(len: usize) -> Result<Self, String> {
        // SAFETY: a plain device allocation (the caller's context is current); `cuMemAlloc`
        // is allowed while a stream captures in relaxed mode and adds no node to its graph.
        let ptr = unsafe { cudarc::driver::result::malloc_sync(len) }
            .map_err(|e| format!("device memory for a graph's kernel metadata: {e:?}"))?;
        Ok(Self {
            ptr,
            len,
            host: Vec::with_capacity(len),
        })
    }

    /// Writes what the capture placed here to the device (after the capture: nothing runs).
    fn write(&self) -> Result<(), String> {
        if self.host.is_empty() {
            return Ok(());
        }
        // SAFETY: `host.len() <= len` bytes into a live allocation of `len` bytes.
        unsafe { cudarc::driver::result::memcpy_htod_sync(self.ptr, &self.host) }
            .map_err(|e| format!("writing a graph's kernel metadata: {e:?}"))
    }
}

impl Drop for MetadataChunk {
    fn drop(&mut self) {
        // SAFETY: allocated by `malloc_sync`; the graph whose kernels read it is gone
        // (`cuMemFree` waits for work in flight).
        let _ = unsafe { cudarc::driver::result::free_sync(self.ptr) };
    }
}

/// The memory of one capture's uploads, never reused while its graph lives: pinned host
/// memory that its copies read, and device memory holding its kernels' metadata.
#[derive(Debug, Default)]
pub struct CaptureArena {
    chunks: Vec<PinnedChunk>,
    metadata: Vec<MetadataChunk>,
}

/// Alignment of a kernel's metadata in the device arena (cubecl's buffer alignment).
const METADATA_ALIGN: usize = 256;

/// Chunk size of a capture's arena (a chunk holds many kernels' metadata).
const ARENA_CHUNK: usize = 1 << 20;

impl CaptureArena {
    /// A copy of `data` that stays as it is while the graph lives.
    pub fn stage(&mut self, data: &[u8]) -> Result<&[u8], String> {
        let fits = |c: &PinnedChunk| c.used + data.len() <= c.len;
        if !self.chunks.last().is_some_and(fits) {
            self.chunks
                .push(PinnedChunk::new(data.len().max(ARENA_CHUNK))?);
        }
        let chunk = self.chunks.last_mut().expect("a chunk was just pushed");
        // SAFETY: `used + len <= len` of a live pinned allocation, written once.
        let staged = unsafe {
            let at = chunk.ptr.add(chunk.used);
            core::ptr::copy_nonoverlapping(data.as_ptr(), at, data.len());
            core::slice::from_raw_parts(at, data.len())
        };
        chunk.used += data.len().next_multiple_of(16);
        Ok(staged)
    }

    /// The device address where a kernel launched in the capture reads `data` at every
    /// replay. Unlike an upload, this adds no copy to the graph: [`end`] writes the arena
    /// once, before the graph can run.
    pub fn place_metadata(&mut self, data: &[u8]) -> Result<u64, String> {
        let fits = |c: &MetadataChunk| {
            c.host.len().next_multiple_of(METADATA_ALIGN) + data.len() <= c.len
        };
        if !self.metadata.last().is_some_and(fits) {
            self.metadata
                .push(MetadataChunk::new(data.len().max(ARENA_CHUNK))?);
        }
        let chunk = self.metadata.last_mut().expect("a chunk was just pushed");
        let at = chunk.host.len().next_multiple_of(METADATA_ALIGN);
        chunk.host.resize(at, 0);
        chunk.host.extend_from_slice(data);
        Ok(chunk.ptr + at as u64)
    }
}

/// A captured and instantiated CUDA graph.
#[derive(Debug)]
pub struct CudaGraph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    nodes: usize,
    kinds: Vec<(String, usize)>,
    _arena: Vec<PinnedChunk>,
    _metadata: Vec<MetadataChunk>,
}

// SAFETY: driver handles, used from cubecl's device thread with the context current.
unsafe impl Send for CudaGraph {}
unsafe impl Sync for CudaGraph {}

impl CudaGraph {
    /// Launches and copies in the graph.
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// How many nodes of each kind the graph has (kernel, memcpy, memset, host, ...).
    pub fn kinds(&self) -> &[(String, usize)] {
        &self.kinds
    }

    /// Replays the graph on `stream` (the context current).
    ///
    /// # Safety
    /// Every buffer the capture touched must still be allocated and not in use by other work.
    pub unsafe fn launch(&self, stream: CUstream) -> Result<(), String> {
        // SAFETY: per the caller.
        driver(unsafe { sys::cuGraphLaunch(self.exec, stream) }, "cuGraphLaunch")
    }
}

impl Drop for CudaGraph {
    fn drop(&mut self) {
        // SAFETY: handles made by `end`; the driver defers freeing a graph still running.
        unsafe {
            if !self.exec.is_null() {
                let _ = sys::cuGraphExecDestroy(self.exec);
            }
            if !self.graph.is_null() {
                let _ = sys::cuGraphDestroy(self.graph);
            }
        }
    }
}
