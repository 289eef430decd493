//! Set-up shared by the CubeCL backends (CUDA, wgpu): the tensor-core switch, the tuning cache
//! and the precision checks against what the device supports.

use std::path::{Path, PathBuf};

use burn::tensor::backend::Backend;
use burn::tensor::DType;
use cubecl::config::cache::CacheConfig;
use cubecl::config::{CubeClRuntimeConfig, RuntimeConfig};
use cubecl::prelude::CubePrimitive;
use cubecl::Runtime;

use crate::task::Ran;
use crate::tune_watch::{count_entries, TuneWatcher};
use crate::{
    default_tune_cache, BackendKind, BackendTask, Collective, ComputeSettings, ConvEngine, Error,
    KernelAutodiffBackend, Launch, Precision, RunEnv,
};

/// Points cubecl's autotune and compilation caches at `root` (once per process).
fn configure_cache(root: &PathBuf) -> Result<(), Error> {
    let mut state = CubeClRuntimeConfig::storage().lock();
    if let Some(existing) = state.as_ref() {
        let current = existing.autotune.cache.root();
        if &current != root {
            return Err(Error::TuneCacheInUse {
                current,
                wanted: root.clone(),
            });
        }
        return Ok(());
    }
    // Respect a user's cubecl.toml / CUBECL_* variables for everything but the cache folder.
    let mut config = CubeClRuntimeConfig::from_current_dir().override_from_env();
    config.autotune.cache = CacheConfig::File(root.clone());
    // Compiled kernels (PTX on CUDA) beside the tuning results: with both warm, a first step
    // neither tunes nor compiles with NVRTC again.
    if config.compilation.cache.is_none() {
        config.compilation.cache = Some(CacheConfig::File(root.clone()));
    }
    *state = Some(std::sync::Arc::new(config));
    Ok(())
}

/// Where the CUDA driver keeps the machine code it compiles from PTX: beside the PTX cache,
/// unless the user chose a place (`CUDA_CACHE_PATH`). cubecl caches PTX, but loading PTX still
/// runs the driver's compiler, whose own cache (256 MiB in `~/.nv` by default) is lost on a fresh
/// machine and may be too small for these kernels. On an H100 the first bf16 training step took
/// 11.6 s with it cold and 1.5 s warm (docs/benchmarks/README.md).
/// The driver reads the variables once, when it starts (`cuInit`): set after that, the cache
/// stays in `~/.nv`, which a fresh machine does not have. [`before_the_driver`] calls this.
fn driver_jit_cache(root: &Path) {
    if std::env::var_os("CUDA_CACHE_PATH").is_none() {
        std::env::set_var("CUDA_CACHE_PATH", root.join("cuda-driver-jit"));
    }
    if std::env::var_os("CUDA_CACHE_MAXSIZE").is_none() {
        // The driver's maximum (4 GiB).
        std::env::set_var("CUDA_CACHE_MAXSIZE", "4294967296");
    }
}

/// CUDA device memory as a buffer per allocation, in size buckets, rather than cubecl's
/// default slices of pages sized from the device (a quarter of its memory divided by powers of
/// four: on an H200 every tensor of 70-561 MB, a 128^3 activation of 16-128 bf16 channels, lands
/// in a 2.2 GiB page, and the pool grows by whole pages): a bf16 training step's peak on an H200
/// went from 11,132 to 10,236 MiB at the same speed; buckets of our own (a buffer per size class,
/// 1.125x to 2x apart, never freed) peaked at 10,300-10,364 MiB. On CUDA a bucket's freed
/// buffers are never released while no error occurs; handing those beyond a slack back to the
/// driver's pool made the peak vary from run to run around a worse mean
/// (docs/benchmarks/optimisation-log.md). Takes effect for the devices whose first client opens
/// after it.
#[cfg(feature = "cuda")]
fn exclusive_memory_pages() {
    cubecl::cuda::set_device_memory_pools(|_| cubecl::MemoryConfiguration::ExclusivePages);
}

/// The devices a run opens, each with its index (the first is the task's), and how their
/// replicas average gradients (resolved).
pub(crate) struct Placement<D> {
    pub devices: Vec<(usize, D)>,
    pub collective: Collective,
    /// With `processes`, `devices` is the first only: the run's others are in `settings`.
    pub launch: Launch,
}

/// Sets up a CubeCL backend on every device of `placement` and runs `task` on the first
/// (taking it out of the option only once the devices are up, so that a caller can run it
/// elsewhere after an [`Error::NoDevice`]). `conv_engine` resolves `--conv-engine` for this
/// backend, given the tuning-cache folder (where cuDNN keeps its algorithm choices).
pub(crate) fn run<R, B, T>(
    backend: BackendKind,
    placement: Placement<R::Device>,
    (settings, precision): (&ComputeSettings, Precision),
    conv_engine: impl FnOnce(&Path) -> Result<ConvEngine, Error>,
    task: &mut Option<T>,
) -> Ran<T>
where
    R: Runtime,
    B: KernelAutodiffBackend<Device = R::Device>,
    T: BackendTask,
{
    let root = tuning_cache(backend, settings, precision)?;
    #[cfg(feature = "cuda")]
    if backend == BackendKind::Cuda {
        exclusive_memory_pages();
        shipped_kernels(settings.shipped_tuning);
    }
    let several = placement.devices.len() > 1;
    for (index, device) in &placement.devices {
        open_device::<R, B>(backend, precision, device).map_err(|e| match several {
            false => e,
            true => Error::OnDevice {
                backend,
                device: *index,
                source: Box::new(e),
            },
        })?;
    }

    #[cfg(feature = "cuda")]
    if backend == BackendKind::Cuda && settings.shipped_tuning {
        seed_shipped_tuning(&root, &settings.devices)?;
    }
    let conv_engine = conv_engine(&root)?;
    let tuned_before = count_entries(&root);
    let (indices, devices): (Vec<usize>, Vec<R::Device>) = placement.devices.into_iter().unzip();
    let env = RunEnv {
        backend,
        precision,
        layout: settings.layout,
        conv_engine,
        norm_engine: settings.norm_engine,
        tune_cache: Some(root.clone()),
        tuned_before,
        devices: match placement.launch {
            Launch::Processes => settings.devices.clone(),
            _ => indices,
        },
        collective: placement.collective,
        launch: placement.launch,
    };
    let device = devices.into_iter().next().expect("a run has a device");
    let watcher = TuneWatcher::start(root, settings.show_tuning);
    let task = task.take().expect("the task is taken only here");
    let out = task.run::<B>(device, &env);
    watcher.finish();
    #[cfg(feature = "cuda")]
    if backend == BackendKind::Cuda {
        let (shipped, compiled) = cubecl::cuda::shipped_kernel_counts();
        if shipped + compiled > 0 {
            log::info!("kernels: {shipped} loaded from the machine code shipped for H100/H200, {compiled} compiled with NVRTC");
        }
    }
    Ok(out)
}

/// Writes the tuning results shipped for the run's GPU model into `root` where it has none
/// (every device of the run, the replicas' too: before any of them tunes), and says so.
#[cfg(feature = "cuda")]
fn seed_shipped_tuning(root: &Path, devices: &[usize]) -> Result<(), Error> {
    let seeded =
        crate::shipped_tuning::seed(root, devices, medddpm_kernels::cudnn::compute_capability)?;
    if seeded.files > 0 {
        log::info!(
            "tuning: started {} from the {} results shipped for H100/H200 (compute capability 9.0; --no-shipped-tuning tunes from scratch)",
            root.display(),
            seeded.entries
        );
    }
    Ok(())
}

/// Machine code shipped for H100/H200 where the PTX cache lacks a kernel (unless `shipped`
/// is off: `--no-shipped-tuning` compiles everything). Where `MEDDDPM_EXPORT_KERNELS` names a
/// folder, nothing shipped is used and every kernel NVRTC compiles is written there (for
/// `scripts/ship-kernels.sh`: a kernel loaded from the shipped table would be missing).
#[cfg(feature = "cuda")]
fn shipped_kernels(shipped: bool) {
    if let Some(dir) = std::env::var_os("MEDDDPM_EXPORT_KERNELS") {
        cubecl::cuda::export_kernels_to(dir.into());
    } else if shipped {
        cubecl::cuda::set_shipped_kernels(crate::shipped_kernels::table);
    }
}

/// Opens `device`'s client and checks that it computes in `precision`.
fn open_device<R, B>(
    backend: BackendKind,
    precision: Precision,
    device: &R::Device,
) -> Result<(), Error>
where
    R: Runtime,
    B: KernelAutodiffBackend<Device = R::Device>,
{
    // cubecl panics when it finds no device (wgpu without a Vulkan driver, CUDA without the
    // driver library): a `NoDevice` error instead, without the panic's trace on stderr (the
    // task is still in its option then, for `run_on`'s fallback).
    let client = medddpm_kernels::panics::quiet_catch(|| R::client(device)).map_err(|p| {
        Error::NoDevice {
            backend,
            cause: p.0,
        }
    })?;
    let lacks = |reason| Error::PrecisionUnsupported {
        backend,
        precision,
        on_device: true,
        reason,
    };
    match precision {
        Precision::Tf32 => {
            let tf32 = cubecl::tf32::as_type_native_unchecked().storage_type();
            if !client.properties().supports_type(tf32) {
                return Err(lacks(
                    "it exposes no TF32 matrix instructions (use --precision fp32, or cuda on an NVIDIA GPU)",
                ));
            }
        }
        Precision::Bf16 => {
            if !<B::InnerBackend as Backend>::supports_dtype(device, DType::BF16) {
                return Err(lacks("it has no bf16 tensors"));
            }
        }
        Precision::F16 => {
            if !<B::InnerBackend as Backend>::supports_dtype(device, DType::F16) {
                return Err(lacks("it has no f16 tensors (Vulkan's shaderFloat16)"));
            }
        }
        Precision::Fp32 => {}
    }
    Ok(())
}

/// Sets the precision switches of burn's kernels and points cubecl's caches at this backend
/// and precision's folder of the tuning cache (created); returns the folder.
fn tuning_cache(
    backend: BackendKind,
    settings: &ComputeSettings,
    precision: Precision,
) -> Result<PathBuf, Error> {
    // Must precede the first tuned kernel: the cache does not record the setting.
    cubek_matmul::definition::set_f32_tensor_cores(precision != Precision::Fp32);
    // bf16 convolutions tuned to burn's `*_mma` kernels gave NaN on an H100
    // (docs/benchmarks/README.md): 16-bit operands stay on the WMMA (`cmma`) kernels.
    cubek_matmul::definition::set_half_mma(false);
    let root = tuning_root(backend, settings, precision);
    std::fs::create_dir_all(&root).map_err(|source| Error::TuneCache {
        path: root.clone(),
        source,
    })?;
    configure_cache(&root)?;
    Ok(root)
}

/// This backend and precision's folder of the tuning cache.
fn tuning_root(backend: BackendKind, settings: &ComputeSettings, precision: Precision) -> PathBuf {
    settings
        .tune_cache
        .clone()
        .unwrap_or_else(default_tune_cache)
        .join(format!("{backend}-{precision}"))
}

/// What must happen before anything starts the CUDA driver (counting devices does): its cache
/// of machine code pointed at the tuning cache's folder.
pub(crate) fn before_the_driver(
    backend: BackendKind,
    settings: &ComputeSettings,
    precision: Precision,
) {
    if backend == BackendKind::Cuda {
        driver_jit_cache(&tuning_root(backend, settings, precision));
    }
}

/// `--conv-engine` on CUDA: cuDNN when asked for or when `auto` finds it (on every device of
/// the run), else burn's kernels; `cubecl` our portable kernels. Says in one line which engine
/// runs and why.
#[cfg(feature = "cuda")]
pub(crate) fn cuda_conv_engine(
    requested: ConvEngine,
    devices: &[usize],
    cache_dir: &Path,
) -> Result<ConvEngine, Error> {
    use medddpm_kernels::cudnn;
    match requested {
        ConvEngine::Cubecl | ConvEngine::Burn => {
            log::info!(
                "convolutions: {} (--conv-engine {requested})",
                engine_words(requested)
            );
            return Ok(requested);
        }
        ConvEngine::Auto | ConvEngine::Cudnn => {}
    }
    let mut started = Vec::with_capacity(devices.len());
    for &device in devices {
        match cudnn::init(device, Some(cache_dir)) {
            Ok(info) => started.push((device, info)),
            Err(why) if requested == ConvEngine::Auto => {
                log::info!("convolutions: burn's CubeCL kernels (--conv-engine auto: {why})");
                return Ok(ConvEngine::Burn);
            }
            Err(cause) => return Err(Error::Cudnn { cause }),
        }
    }
    let Some((_, first)) = started.first() else {
        return Err(Error::NoDevicesListed);
    };
    let on = match started.len() {
        1 => String::new(),
        _ => format!(" on CUDA devices {}", crate::error::device_list(devices)),
    };
    log::info!(
        "convolutions: cuDNN {}{on} (--conv-engine {requested}; {} algorithm choices cached in {})",
        first.version_string(),
        first.cached,
        cache_dir.display()
    );
    for (device, info) in &started[1..] {
        if info.gpu != first.gpu {
            log::info!(
                "cuDNN on CUDA device {device} ({}): another GPU model than device {} ({}), so it searches its own algorithms{}",
                info.gpu,
                started[0].0,
                first.gpu,
                if info.cache_file.is_none() { ", kept for this run only" } else { "" }
            );
        }
    }
    Ok(ConvEngine::Cudnn)
}

/// `--conv-engine` on wgpu: burn's kernels (`auto`, `burn`) or ours (`cubecl`); `cudnn` is
/// refused.
#[cfg(feature = "wgpu")]
pub(crate) fn wgpu_conv_engine(requested: ConvEngine) -> Result<ConvEngine, Error> {
    match requested {
        ConvEngine::Cudnn => Err(Error::CudnnNeedsCuda {
            backend: BackendKind::Wgpu,
        }),
        ConvEngine::Auto => {
            log::info!(
                "convolutions: burn's CubeCL kernels (--conv-engine auto: cuDNN is CUDA-only)"
            );
            Ok(ConvEngine::Burn)
        }
        ConvEngine::Cubecl | ConvEngine::Burn => {
            log::info!(
                "convolutions: {} (--conv-engine {requested})",
                engine_words(requested)
            );
            Ok(requested)
        }
    }
}

/// What an engine's one-line announcement calls it.
#[cfg(any(feature = "cuda", feature = "wgpu"))]
fn engine_words(engine: ConvEngine) -> &'static str {
    match engine {
        ConvEngine::Cubecl => "our portable CubeCL kernels",
        ConvEngine::Burn => "burn's CubeCL kernels",
        ConvEngine::Cudnn => "cuDNN",
        ConvEngine::Auto => "chosen when the backend starts",
    }
}
