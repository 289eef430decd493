//! The engine's state on each CUDA device: [`init`] opens cuDNN on a device (once per device),
//! and [`engine`] finds a device's state from the index of the tensors a convolution gets.
//!
//! Per device: the cuDNN handles (one for the first calls, one for cubecl's device thread), the
//! primary context, the descriptors of each shape and the shapes proven there, behind one lock
//! of the device's own, so the devices of a data-parallel run never wait for one another.
//! Shared by the devices of one GPU model: the algorithm choices (see [`AlgoTable`]).
//! Finding a device's state takes two atomic loads and no lock.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use cudarc::cudnn::sys;

use super::algorithms::{AlgoTable, Choice};
use super::descriptors::Descriptors;
use super::device_thread::DeviceSide;
use super::graph::PlanChoice;
use super::library::{self, CudnnInfo, CudnnUnavailable, GpuModel};
use crate::error::EngineError;

/// cuDNN on one CUDA device.
pub(super) struct Engine {
    /// cuDNN's version (part of every algorithm key).
    pub version: usize,
    /// The device's primary context, retained.
    pub ctx: cudarc::driver::sys::CUcontext,
    state: Mutex<DeviceState>,
    /// The device thread's side, made on the first hand-over.
    side: OnceLock<Result<DeviceSide, EngineError>>,
}

// The context is a driver handle valid on any thread; the cuDNN handle lives in the mutex.
unsafe impl Send for Engine {}
unsafe impl Sync for Engine {}

/// What one device's calls change, under its own lock.
pub(super) struct DeviceState {
    /// The handle of the waiting path.
    pub handle: sys::cudnnHandle_t,
    /// The algorithm choices of this device's GPU model.
    pub algos: Arc<AlgoTable>,
    /// Descriptors of each shape seen, shared with the device-thread tasks.
    pub descriptors: HashMap<String, Arc<Descriptors>>,
    /// Shapes whose call succeeded on the waiting path, with the algorithm that ran: only these
    /// go to the device thread (cuDNN 9.14 finds an algorithm for some shapes, e.g. a bf16 data
    /// gradient with 8 output channels, and then refuses to run it, which only the waiting path
    /// can fall back from). Kept here rather than read from `algos` so that the hot path takes
    /// no lock but the device's.
    pub proven: HashMap<String, Choice>,
    /// Graph-API plans known for this device's shapes, copied from the model's plan table on
    /// first sight so that later calls take no lock but the device's.
    pub planned: HashMap<String, Arc<PlanChoice>>,
}

// The handle is only used under the device's mutex.
unsafe impl Send for DeviceState {}

/// One slot per CUDA device the driver reports, made by the first [`init`].
static ENGINES: OnceLock<Box<[OnceLock<Engine>]>> = OnceLock::new();

/// The algorithm tables, one per GPU model initialised.
static TABLES: Mutex<Vec<Arc<AlgoTable>>> = Mutex::new(Vec::new());

/// Keys already reported as falling back (on any device: the same shape on another device of
/// a run says nothing new).
static WARNED: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// Loads cuDNN for CUDA device `device_index` and reads the algorithm cache in `cache_dir`
/// (`cudnn-algorithms.json`; none is kept when `None`). Call it once for each device a run
/// uses, from any thread; each call after a device's first returns what that one found.
///
/// Devices of one GPU model share their algorithm choices. The cache file belongs to the first
/// model initialised with it: a device of another model in the same process searches its own
/// choices and keeps them for the run only (its [`CudnnInfo::cache_file`] is `None`).
pub fn init(device_index: usize, cache_dir: Option<&Path>) -> Result<CudnnInfo, CudnnUnavailable> {
    static INIT: Mutex<()> = Mutex::new(());
    let _one_at_a_time = INIT.lock().unwrap_or_else(|e| e.into_inner());
    let version = library::load_library()?;
    let slots = match ENGINES.get() {
        Some(slots) => slots,
        None => {
            let count = library::device_count()?;
            ENGINES.get_or_init(|| (0..count).map(|_| OnceLock::new()).collect())
        }
    };
    let slot = slots
        .get(device_index)
        .ok_or(CudnnUnavailable::NoSuchDevice {
            device: device_index,
            count: slots.len(),
        })?;
    if let Some(engine) = slot.get() {
        return Ok(engine.info());
    }
    let opened = library::open(device_index)?;
    let engine = Engine {
        version,
        ctx: opened.ctx,
        state: Mutex::new(DeviceState {
            handle: opened.handle,
            algos: table_for(opened.model, cache_dir),
            descriptors: HashMap::new(),
            proven: HashMap::new(),
            planned: HashMap::new(),
        }),
        side: OnceLock::new(),
    };
    let info = engine.info();
    let _ = slot.set(engine);
    Ok(info)
}

/// The algorithm table of `model`: the one already open for it, else a new one, kept in
/// `cache_dir`'s file unless another model's table already uses that file.
pub(super) fn table_for(model: GpuModel, cache_dir: Option<&Path>) -> Arc<AlgoTable> {
    let mut tables = TABLES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(table) = tables.iter().find(|t| t.model == model) {
        return table.clone();
    }
    let file = cache_dir
        .map(|d| d.join("cudnn-algorithms.json"))
        .filter(|f| !tables.iter().any(|t| t.file.as_ref() == Some(f)));
    let table = Arc::new(AlgoTable::open(model, file));
    tables.push(table.clone());
    table
}

/// The engine of CUDA device `device_index`, if [`init`] opened it.
pub(super) fn engine(device_index: usize) -> Result<&'static Engine, EngineError> {
    ENGINES
        .get()
        .and_then(|slots| slots.get(device_index))
        .and_then(OnceLock::get)
        .ok_or_else(|| {
            EngineError::Unsupported(format!(
                "cuDNN is not initialised on CUDA device {device_index}"
            ))
        })
}

impl Engine {
    /// What [`init`] reports of this device.
    fn info(&self) -> CudnnInfo {
        let s = self.lock();
        CudnnInfo {
            version: self.version,
            cached: s.algos.len(),
            gpu: s.algos.model.name.clone(),
            cache_file: s.algos.file.clone(),
        }
    }

    /// The device's state, locked.
    pub fn lock(&self) -> MutexGuard<'_, DeviceState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The device thread's side, made on first use for `device` (this engine's device).
    pub fn side(
        &'static self,
        device: &cubecl_cuda::CudaDevice,
    ) -> Result<&'static DeviceSide, EngineError> {
        self.side
            .get_or_init(|| DeviceSide::new(device, self.ctx))
            .as_ref()
            .map_err(Clone::clone)
    }
}

/// Reports (once per shape and reason, over all devices) that cuDNN was not used.
pub fn warn_fallback(why: &EngineError) {
    if ENGINES.get().is_none() {
        return;
    }
    let why = why.to_string();
    let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    if warned.get_or_insert_with(HashSet::new).insert(why.clone()) {
        log::info!("cuDNN not used for {why}; burn's kernel computes it instead");
    }
}
