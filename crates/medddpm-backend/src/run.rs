//! Running a task on the backend the settings pick: `auto` resolved, the precision and engines
//! checked against what the backend and device support, and the CPU as `auto`'s fallback.

use crate::task::{BackendTask, Ran, RunEnv};
use crate::{BackendKind, ComputeSettings, ConvEngine, Error, Precision};

/// Resolves `auto`, configures precision and tuning, checks the device supports the precision,
/// and runs `task`.
pub fn run_on<T: BackendTask>(settings: &ComputeSettings, task: T) -> Result<T::Output, T::Error> {
    let backend = settings.backend.resolve();
    let mut task = Some(task);
    let ran = match run_resolved(backend, settings, &mut task) {
        Err(Error::NoDevice { cause, .. }) if settings.backend == BackendKind::Auto => {
            // `auto` chose a GPU backend that has no device: the CPU, saying so. (Asked for by
            // name, it is a refusal: a GPU run silently on the CPU could take days.)
            eprintln!(
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
    match backend {
        BackendKind::Cpu => {
            if settings.precision == Precision::Tf32 {
                return Err(Error::PrecisionUnsupported {
                    backend,
                    precision: settings.precision,
                    on_device: false,
                    reason: "TF32 is a GPU tensor-core format; the CPU computes in IEEE f32 (use --precision fp32)",
                });
            }
            if settings.conv_engine == ConvEngine::Cudnn {
                return Err(Error::CudnnNeedsCuda { backend });
            }
            let env = RunEnv {
                backend,
                precision: settings.precision,
                layout: settings.layout,
                conv_engine: ConvEngine::Cubecl,
                norm_engine: settings.norm_engine,
                tune_cache: None,
                tuned_before: 0,
            };
            let task = task.take().expect("the task is taken only once");
            Ok(task.run::<burn::backend::Autodiff<burn::backend::Flex>>(Default::default(), &env))
        }
        #[cfg(feature = "cuda")]
        BackendKind::Cuda => {
            let device = burn::backend::cuda::CudaDevice::default();
            let index = device.index;
            crate::cube::run::<
                cubecl::cuda::CudaRuntime,
                burn::backend::Autodiff<burn::backend::Cuda>,
                T,
            >(
                backend,
                device,
                settings,
                |cache| crate::cube::cuda_conv_engine(settings.conv_engine, index, cache),
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
                device,
                settings,
                |_| crate::cube::wgpu_conv_engine(settings.conv_engine),
                task,
            )
        }
        #[allow(unreachable_patterns)]
        other => Err(Error::NotCompiledIn { backend: other }),
    }
}
