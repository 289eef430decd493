//! Run-time backend choice: the binary is monomorphised once per compiled-in backend.

use anyhow::bail;
use burn::tensor::backend::AutodiffBackend;
use clap::ValueEnum;

/// `--backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// CUDA if compiled in and an NVIDIA device is present, else wgpu if compiled in, else CPU.
    Auto,
    /// burn's CUDA backend (`--features cuda`).
    Cuda,
    /// burn's wgpu backend: Vulkan, Metal or DX12 (`--features wgpu`).
    Wgpu,
    /// burn's Flex CPU backend.
    Cpu,
}

/// Work that runs on whichever backend the user picked.
pub trait BackendTask {
    /// What the work returns.
    type Output;
    /// Runs the work on backend `B`.
    fn run<B: AutodiffBackend>(
        self,
        device: B::Device,
        backend_name: &str,
    ) -> anyhow::Result<Self::Output>;
}

fn nvidia_present() -> bool {
    std::path::Path::new("/dev/nvidiactl").exists()
}

/// Resolves `auto` and runs `task` on the chosen backend.
pub fn run_on<T: BackendTask>(choice: BackendArg, task: T) -> anyhow::Result<T::Output> {
    let choice = match choice {
        BackendArg::Auto if cfg!(feature = "cuda") && nvidia_present() => BackendArg::Cuda,
        BackendArg::Auto if cfg!(feature = "wgpu") => BackendArg::Wgpu,
        BackendArg::Auto => BackendArg::Cpu,
        other => other,
    };
    match choice {
        BackendArg::Cpu => task.run::<burn::backend::Autodiff<burn::backend::Flex>>(Default::default(), "cpu"),
        #[cfg(feature = "cuda")]
        BackendArg::Cuda => task.run::<burn::backend::Autodiff<burn::backend::Cuda>>(Default::default(), "cuda"),
        #[cfg(feature = "wgpu")]
        BackendArg::Wgpu => task.run::<burn::backend::Autodiff<burn::backend::Wgpu>>(Default::default(), "wgpu"),
        #[allow(unreachable_patterns)]
        other => bail!(
            "the {} backend is not compiled into this binary: rebuild with `cargo build --release -p medddpm --features {}`",
            format!("{other:?}").to_lowercase(),
            format!("{other:?}").to_lowercase()
        ),
    }
}
