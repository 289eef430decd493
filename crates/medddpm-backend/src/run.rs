//! Running a task on the backend the settings pick: `auto` resolved, the device list and the
//! precision and engines checked against what the backend and devices support, and the CPU as
//! `auto`'s fallback.

#[cfg(any(feature = "cuda", feature = "wgpu"))]
use crate::cube::Placement;
#[cfg(feature = "cuda")]
use crate::devices::check_count;
use crate::devices::{check_devices, nccl_status, resolve_collective, resolve_launch};
use crate::task::{BackendTask, Ran, RunEnv};
use crate::{
    default_precision, BackendKind, Collective, ComputeSettings, ConvEngine, Error, Launch,
    Precision,
};

/// Resolves `auto`, configures precision and tuning, checks the device supports the precision,
/// and runs `task`.
pub fn run_on<T: BackendTask>(settings: &ComputeSettings, task: T) -> Result<T::Output, T::Error> {
    let backend = settings.backend.resolve();
    let mut task = Some(task);
    let ran = match run_resolved(backend, settings, &mut task) {
        Err(Error::NoDevice { cause, .. }) if settings.backend == BackendKind::Auto => {
            // `auto` chose a GPU backend that has no device: the CPU, saying so. (Asked for by
            // name, it is a refusal: a GPU run silently on the CPU could take days.)
            log::warn!(
                "no usable GPU for the {backend} backend ({cause}): running on the cpu backend"
            );
            run_resolved(BackendKind::Cpu, settings, &mut task)
        }
        other => other,
    };
    ran?
}

/// [`run_on`] on a resolved backend; `task` stays in its option when the device is missing.
fn run_resolved<T: BackendTask>(
    backend: BackendKind,
    settings: &ComputeSettings,
    task: &mut Option<T>,
) -> Ran<T> {
    if !backend.compiled_in() {
        return Err(Error::NotCompiledIn { backend });
    }
    // The one place a precision left to the backend is decided: the backend is known now.
    let precision = settings
        .precision
        .unwrap_or_else(|| default_precision(backend));
    #[cfg(any(feature = "cuda", feature = "wgpu"))]
    crate::cube::before_the_driver(backend, settings, precision);
    let (collective, launch) = devices_and_collective(backend, settings)?;
    match backend {
        BackendKind::Cpu => run_cpu(settings, precision, (collective, launch), task),
        #[cfg(feature = "cuda")]
        BackendKind::Cuda => {
            // With a process per device, this one opens only the first.
            let indices = match launch {
                Launch::Processes => &settings.devices[..1],
                _ => &settings.devices[..],
            };
            let devices = indices
                .iter()
                .map(|&i| (i, burn::backend::cuda::CudaDevice::new(i)))
                .collect();
            crate::cube::run::<
                cubecl::cuda::CudaRuntime,
                burn::backend::Autodiff<burn::backend::Cuda>,
                T,
            >(
                backend,
                Placement {
                    devices,
                    collective,
                    launch,
                },
                (settings, precision),
                |cache| crate::cube::cuda_conv_engine(settings.conv_engine, indices, cache),
                task,
            )
        }
        #[cfg(feature = "wgpu")]
        BackendKind::Wgpu => {
            let device = burn::backend::wgpu::WgpuDevice::default();
            crate::cube::run::<
                cubecl::wgpu::WgpuRuntime,
                burn::backend::Autodiff<burn::backend::Wgpu>,
                T,
            >(
                backend,
                Placement {
                    devices: vec![(0, device)],
                    collective,
                    launch,
                },
                (settings, precision),
                |_| crate::cube::wgpu_conv_engine(settings.conv_engine),
                task,
            )
        }
        #[allow(unreachable_patterns)]
        other => Err(Error::NotCompiledIn { backend: other }),
    }
}

/// Checks the device list against `backend` (and, on CUDA, the machine) and resolves
/// `--collective` and `--launch`, saying in one line how several devices average their
/// gradients.
fn devices_and_collective(
    backend: BackendKind,
    settings: &ComputeSettings,
) -> Result<(Collective, Launch), Error> {
    check_devices(backend, &settings.devices, settings.launch)?;
    #[cfg(feature = "cuda")]
    if backend == BackendKind::Cuda {
        if let Some(count) = crate::devices::cuda_device_count() {
            check_count(backend, &settings.devices, count)?;
        }
    }
    let (collective, line) = resolve_collective(
        backend,
        settings.collective,
        settings.cluster_world.unwrap_or(settings.devices.len()),
        nccl_status,
    )?;
    let launch = resolve_launch(backend, settings.launch, settings.devices.len());
    if let Some(line) = line {
        match launch {
            Launch::Processes => log::info!("{line}, one process per device"),
            _ => log::info!("{line}"),
        }
    }
    Ok((collective, launch))
}

/// [`run_resolved`] on burn's Flex CPU backend.
fn run_cpu<T: BackendTask>(
    settings: &ComputeSettings,
    precision: Precision,
    (collective, launch): (Collective, Launch),
    task: &mut Option<T>,
) -> Ran<T> {
    let backend = BackendKind::Cpu;
    if precision == Precision::Tf32 {
        return Err(Error::PrecisionUnsupported {
            backend,
            precision,
            on_device: false,
            reason: "TF32 is a GPU tensor-core format; the CPU computes in IEEE f32 (use --precision fp32)",
        });
    }
    if settings.conv_engine == ConvEngine::Cudnn {
        return Err(Error::CudnnNeedsCuda { backend });
    }
    let env = RunEnv {
        backend,
        precision,
        layout: settings.layout,
        // Flex's own convolutions: the CPU's only engine, whatever else was asked for.
        conv_engine: ConvEngine::Burn,
        norm_engine: settings.norm_engine,
        tune_cache: None,
        tuned_before: 0,
        devices: settings.devices.clone(),
        collective,
        launch,
    };
    let task = task.take().expect("the task is taken only once");
    Ok(task.run::<burn::backend::Autodiff<burn::backend::Flex>>(Default::default(), &env))
}
