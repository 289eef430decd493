//! CUPTI's activity API, loaded at run time (`libcupti.so` from the library path, or the file
//! `MEDDDPM_CUPTI` names): the device's kernels, copies and memsets with their start and end.
//!
//! Only the few functions and record fields needed are declared here, not cudarc's bindings:
//! those pick one CUPTI version's structures at build time, while the fields read here (kind,
//! start, end, a kernel's name) sit at the same offsets in every kernel record since CUDA 11
//! (`CUpti_ActivityKernel4` to `13`), memcpy record and memset record.

use std::ffi::{c_char, c_void, CStr};
use std::sync::Mutex;

use libloading::Library;
use medddpm_ops::cuda::load_library;

use super::{Activity, HostCall, TraceError, Work};

const KIND_MEMCPY: u32 = 1;
const KIND_MEMSET: u32 = 2;
const KIND_DRIVER: u32 = 4;
const KIND_CONCURRENT_KERNEL: u32 = 10;
const KINDS: [u32; 4] = [
    KIND_CONCURRENT_KERNEL,
    KIND_MEMCPY,
    KIND_MEMSET,
    KIND_DRIVER,
];
/// `CUPTI_ACTIVITY_FLAG_FLUSH_FORCED`: hand over incomplete buffers too.
const FLUSH_FORCED: u32 = 1;
const BUFFER_BYTES: usize = 8 << 20;
const BUFFER_ALIGN: usize = 8;

/// Byte offsets in the records (see the module's comment).
const START: usize = 16;
const END: usize = 24;
const KERNEL_NAME: usize = 104;
/// A memcpy record's direction (`CUpti_ActivityMemcpyKind`) and source memory
/// (`CUpti_ActivityMemoryKind`), one byte each.
const COPY_KIND: usize = 4;
const COPY_SOURCE: usize = 5;
/// A driver call's callback id, start and end.
const API_CBID: usize = 4;
const API_START: usize = 8;
const API_END: usize = 16;

/// A copy's direction, and for one from the host whether its memory was pinned (a copy from
/// pageable memory is staged by the driver and holds the issuing thread).
fn memcpy_name(kind: u8, source: u8) -> &'static str {
    match (kind, source) {
        (1, 1) => "memcpy HtoD from pageable",
        (1, _) => "memcpy HtoD from pinned",
        (2, _) => "memcpy DtoH",
        (8, _) => "memcpy DtoD",
        (10, _) => "memcpy peer to peer",
        _ => "memcpy (other)",
    }
}

type Requested = extern "C" fn(*mut *mut u8, *mut usize, *mut usize);
type Completed = extern "C" fn(*mut c_void, u32, *mut u8, usize, usize);
type RegisterCallbacks = unsafe extern "C" fn(Requested, Completed) -> i32;
type KindCall = unsafe extern "C" fn(u32) -> i32;
type FlushAll = unsafe extern "C" fn(u32) -> i32;
type NextRecord = unsafe extern "C" fn(*mut u8, usize, *mut *mut u8) -> i32;
type GetTimestamp = unsafe extern "C" fn(*mut u64) -> i32;

/// What a record holds.
enum Record {
    Device(Activity),
    Host(HostCall),
}

/// The records of the completed buffers, in the order CUPTI handed them over.
static COLLECTED: Mutex<(Vec<Activity>, Vec<HostCall>)> = Mutex::new((Vec::new(), Vec::new()));
/// The library, kept loaded for the process (CUPTI keeps calling back into our buffers).
static LIBRARY: Mutex<Option<&'static Library>> = Mutex::new(None);

/// A recording in progress.
pub(super) struct Session {
    lib: &'static Library,
}

fn library() -> Result<&'static Library, TraceError> {
    let mut slot = LIBRARY.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(lib) = *slot {
        return Ok(lib);
    }
    let names = ["libcupti.so", "libcupti.so.13", "libcupti.so.12"];
    // SAFETY: loading CUPTI runs no initialisers that depend on our state.
    let (lib, _) = unsafe { load_library("MEDDDPM_CUPTI", &names) }.map_err(|errors| {
        TraceError::Library(format!(
            "CUPTI could not be loaded (put libcupti.so on LD_LIBRARY_PATH or name it in MEDDDPM_CUPTI): {errors}"
        ))
    })?;
    let lib: &'static Library = Box::leak(Box::new(lib));
    *slot = Some(lib);
    Ok(lib)
}

fn symbol<T: Copy>(lib: &Library, name: &str) -> Result<T, TraceError> {
    // SAFETY: each name is declared above with CUPTI's C signature.
    unsafe { lib.get::<T>(name.as_bytes()) }
        .map(|s| *s)
        .map_err(|e| TraceError::Library(format!("CUPTI lacks {name}: {e}")))
}

fn check(call: &'static str, code: i32) -> Result<(), TraceError> {
    if code == 0 {
        Ok(())
    } else {
        Err(TraceError::Cupti { call, code })
    }
}

extern "C" fn buffer_requested(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize) {
    let layout = std::alloc::Layout::from_size_align(BUFFER_BYTES, BUFFER_ALIGN).expect("layout");
    // SAFETY: CUPTI passes valid out-pointers; the buffer is freed in `buffer_completed`.
    unsafe {
        *buffer = std::alloc::alloc(layout);
        *size = if (*buffer).is_null() { 0 } else { BUFFER_BYTES };
        *max_records = 0;
    }
}

extern "C" fn buffer_completed(
    _ctx: *mut c_void,
    _stream: u32,
    buffer: *mut u8,
    _size: usize,
    valid: usize,
) {
    if buffer.is_null() {
        return;
    }
    let lib = *LIBRARY.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(next) = lib.and_then(|l| symbol::<NextRecord>(l, "cuptiActivityGetNextRecord").ok())
    {
        let mut out = COLLECTED.lock().unwrap_or_else(|p| p.into_inner());
        let mut record: *mut u8 = std::ptr::null_mut();
        // SAFETY: `buffer` holds `valid` bytes of records; each record starts with its kind and
        // holds the fields read at the offsets above. The loop ends at the buffer's end
        // (`CUPTI_ERROR_MAX_LIMIT_REACHED`) or any other error.
        unsafe {
            while next(buffer, valid, &mut record) == 0 {
                match read_record(record) {
                    Some(Record::Device(a)) => out.0.push(a),
                    Some(Record::Host(c)) => out.1.push(c),
                    None => {}
                }
            }
        }
    }
    let layout = std::alloc::Layout::from_size_align(BUFFER_BYTES, BUFFER_ALIGN).expect("layout");
    // SAFETY: allocated in `buffer_requested` with this layout.
    unsafe { std::alloc::dealloc(buffer, layout) };
}

/// # Safety
/// `record` points at a CUPTI activity record.
unsafe fn read_record(record: *const u8) -> Option<Record> {
    let kind = (record as *const u32).read_unaligned();
    let at = |offset: usize| (record.add(offset) as *const u64).read_unaligned();
    let word = |offset: usize| (record.add(offset) as *const u32).read_unaligned();
    if kind == KIND_DRIVER {
        return Some(Record::Host(HostCall {
            cbid: word(API_CBID),
            start_ns: at(API_START),
            end_ns: at(API_END),
        }));
    }
    let (start_ns, end_ns) = (at(START), at(END));
    let work = match kind {
        KIND_CONCURRENT_KERNEL => {
            let name = (record.add(KERNEL_NAME) as *const *const c_char).read_unaligned();
            Work::Kernel(if name.is_null() {
                "?".to_string()
            } else {
                CStr::from_ptr(name).to_string_lossy().into_owned()
            })
        }
        KIND_MEMCPY => Work::Copy(memcpy_name(
            *record.add(COPY_KIND),
            *record.add(COPY_SOURCE),
        )),
        KIND_MEMSET => Work::Copy("memset"),
        _ => return None,
    };
    Some(Record::Device(Activity {
        work,
        start_ns,
        end_ns,
    }))
}

/// `cuptiGetTimestamp`, looked up once by [`Session::start`]: marks can come thousands of
/// times a step.
static GET_TIMESTAMP: std::sync::OnceLock<GetTimestamp> = std::sync::OnceLock::new();

/// CUPTI's clock now (the activities' clock), ns; `None` before a session started or on error.
pub(super) fn timestamp() -> Option<u64> {
    let get = GET_TIMESTAMP.get()?;
    let mut ns = 0u64;
    // SAFETY: a plain call with a valid out-pointer.
    (unsafe { get(&mut ns) } == 0).then_some(ns)
}

impl Session {
    pub(super) fn start() -> Result<Self, TraceError> {
        let lib = library()?;
        *COLLECTED.lock().unwrap_or_else(|p| p.into_inner()) = Default::default();
        let get_timestamp: GetTimestamp = symbol(lib, "cuptiGetTimestamp")?;
        GET_TIMESTAMP.get_or_init(|| get_timestamp);
        let register: RegisterCallbacks = symbol(lib, "cuptiActivityRegisterCallbacks")?;
        let enable: KindCall = symbol(lib, "cuptiActivityEnable")?;
        // SAFETY: the callbacks have CUPTI's signatures and live for the process.
        unsafe {
            check(
                "cuptiActivityRegisterCallbacks",
                register(buffer_requested, buffer_completed),
            )?;
            for kind in KINDS {
                check("cuptiActivityEnable", enable(kind))?;
            }
        }
        Ok(Self { lib })
    }

    /// Stops recording and hands over what was recorded (the device is synchronised first by
    /// the caller, so every activity has ended).
    pub(super) fn finish(self) -> Result<(Vec<Activity>, Vec<HostCall>), TraceError> {
        let disable: KindCall = symbol(self.lib, "cuptiActivityDisable")?;
        let flush: FlushAll = symbol(self.lib, "cuptiActivityFlushAll")?;
        // SAFETY: plain calls into the loaded library.
        unsafe {
            for kind in KINDS {
                check("cuptiActivityDisable", disable(kind))?;
            }
            check("cuptiActivityFlushAll", flush(FLUSH_FORCED))?;
        }
        Ok(std::mem::take(
            &mut *COLLECTED.lock().unwrap_or_else(|p| p.into_inner()),
        ))
    }
}
