//! A build with GPU backends on a machine without a usable GPU: `auto` falls back to the CPU
//! with one line, a GPU backend asked for by name is a clear refusal, and neither prints a
//! panic. Run with `--features wgpu` (CI does, beside the lavapipe test); the Vulkan loader is
//! pointed at a driver file that does not exist, so no Vulkan device is found.
#![cfg(feature = "wgpu")]

use medddpm_backend::{
    run_on, BackendKind, BackendTask, ComputeSettings, Error, KernelAutodiffBackend, RunEnv,
};

struct WhereAmI;

impl BackendTask for WhereAmI {
    type Output = BackendKind;
    type Error = Error;
    fn run<B: KernelAutodiffBackend>(
        self,
        _: B::Device,
        env: &RunEnv,
    ) -> Result<BackendKind, Error> {
        Ok(env.backend)
    }
}

#[test]
fn no_gpu_means_the_cpu_for_auto_and_a_refusal_by_name() {
    // Before anything opens Vulkan in this process (one test in this binary).
    std::env::set_var("VK_DRIVER_FILES", "/nonexistent/medddpm-no-icd.json");
    std::env::set_var("VK_ICD_FILENAMES", "/nonexistent/medddpm-no-icd.json");
    std::env::set_var("WGPU_BACKEND", "vulkan");
    let tmp = tempfile::tempdir().unwrap();
    let settings = |backend| ComputeSettings {
        backend,
        tune_cache: Some(tmp.path().to_path_buf()),
        show_tuning: false,
        ..Default::default()
    };
    let err = run_on(&settings(BackendKind::Wgpu), WhereAmI).unwrap_err();
    assert!(err.is_unsupported(), "{err:#}");
    assert!(err.to_string().contains("no usable GPU device"), "{err:#}");
    assert_eq!(
        run_on(&settings(BackendKind::Auto), WhereAmI).unwrap(),
        BackendKind::Cpu
    );
}
