//! wgpu against the CPU (`cargo test -p medddpm-bench --features wgpu --test wgpu_agreement`;
//! CI runs it on lavapipe, Mesa's software Vulkan driver). The kernels are tuned afresh, in a
//! temporary tuning cache, so the ones autotune picks on the machine are the ones checked.
#![cfg(feature = "wgpu")]

use burn::tensor::backend::Backend;
use burn::tensor::{DType, Distribution, Tensor};
use medddpm_backend::KernelAutodiffBackend;
use medddpm_backend::{run_on, BackendKind, BackendTask, ComputeSettings, RunEnv};
use medddpm_bench::probe::{Probe, ProbeCase};
use medddpm_bench::ModelArg;
use medddpm_unet::{Compute, Layout};

fn on_wgpu<T: BackendTask>(task: T) -> T::Output {
    // cubecl takes one tuning cache per process: the tests share a fresh one.
    static CACHE: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let cache = CACHE.get_or_init(|| tempfile::tempdir().unwrap());
    let settings = ComputeSettings {
        backend: BackendKind::Wgpu,
        tune_cache: Some(cache.path().to_path_buf()),
        show_tuning: false,
        ..Default::default()
    };
    run_on(&settings, task).unwrap_or_else(|e| {
        panic!("on wgpu (needs a Vulkan device; on Linux lavapipe, mesa-vulkan-drivers): {e:#}")
    })
}

fn rel_l2(a: Vec<f32>, b: Vec<f32>) -> f64 {
    let num: f64 = a
        .iter()
        .zip(&b)
        .map(|(x, y)| ((x - y) as f64).powi(2))
        .sum();
    let den: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    (num / den).sqrt()
}

/// Products `[1, m, k] x [k, 16]` with the right operand a transposed view, as the channels-last
/// 1x1x1 convolutions and attention projections run them. On lavapipe autotune gave k = 8, 24
/// and 40 to cubek's double-buffered matmul, whose padding stage then lies past k: before the
/// vendored fix (vendor/cubek-matmul/README.medddpm.md) these were off by sqrt(8 / k).
struct Products;

impl BackendTask for Products {
    type Output = Vec<(usize, usize, f64)>;
    fn run<B: KernelAutodiffBackend>(
        self,
        device: B::Device,
        _: &RunEnv,
    ) -> anyhow::Result<Self::Output> {
        type Cpu = burn::backend::Flex;
        let cpu = Default::default();
        Cpu::seed(&cpu, 5);
        let mut errors = Vec::new();
        for m in [512, 4096] {
            for k in [8, 16, 24, 40, 48] {
                let n = 16;
                let x = Tensor::<Cpu, 3>::random([1, m, k], Distribution::Normal(0.0, 1.0), &cpu);
                let w = Tensor::<Cpu, 2>::random([n, k], Distribution::Normal(0.0, 1.0), &cpu);
                let expected = product(x.clone(), w.clone());
                let got = product(
                    Tensor::<B::InnerBackend, 3>::from_data(x.to_data(), &device),
                    Tensor::<B::InnerBackend, 2>::from_data(w.to_data(), &device),
                );
                let e = rel_l2(
                    got.into_data().to_vec().unwrap(),
                    expected.into_data().to_vec().unwrap(),
                );
                errors.push((m, k, e));
            }
        }
        Ok(errors)
    }
}

#[test]
fn matrix_products_with_an_odd_number_of_k_stages_are_right() {
    for (m, k, e) in on_wgpu(Products) {
        assert!(e < 1e-5, "[1, {m}, {k}] x [{k}, 16]: rel. L2 {e:.2e}");
    }
}

/// `x · wᵀ`, the right operand a transposed view.
fn product<Bk: Backend>(x: Tensor<Bk, 3>, w: Tensor<Bk, 2>) -> Tensor<Bk, 3> {
    let [n, k] = w.dims();
    x.matmul(w.reshape([1, n, k]).swap_dims(1, 2))
}

/// The agreement probe of the small network in both layouts, and per operation.
struct TinyProbe;

impl BackendTask for TinyProbe {
    type Output = Vec<(Layout, f64, Option<String>)>;
    fn run<B: KernelAutodiffBackend>(
        self,
        device: B::Device,
        _: &RunEnv,
    ) -> anyhow::Result<Self::Output> {
        let unet = ModelArg::Tiny.config();
        let probe = Probe::new(&unet, [16; 3], 0, None)?;
        let mut out = Vec::new();
        for layout in Layout::ALL {
            let case = ProbeCase {
                unet: &unet,
                dtype: DType::F32,
                compute: Compute {
                    layout,
                    ..Compute::default()
                },
                tolerance: 1e-4,
            };
            let result = probe.run::<B::InnerBackend>(&case, &device)?;
            let located = probe.locate_deviation::<B::InnerBackend>(&case, &device)?;
            let first = located.first_over().map(|_| located.summary());
            out.push((layout, result.rel_l2, first));
        }
        Ok(out)
    }
}

#[test]
fn the_small_network_agrees_with_float64_in_both_layouts() {
    for (layout, rel_l2, first_deviating) in on_wgpu(TinyProbe) {
        assert!(
            rel_l2 < 1e-4 && first_deviating.is_none(),
            "{layout}: rel. L2 {rel_l2:.2e}; {first_deviating:?}"
        );
    }
}

/// burn's CubeCL convolutions through the kernels extension (forward, data and weight
/// gradient, both layouts) against the f32 CPU convolution, on the U-Net's geometries and odd
/// ones.
struct Convolutions;

impl BackendTask for Convolutions {
    type Output = Vec<String>;
    fn run<B: KernelAutodiffBackend>(
        self,
        device: B::Device,
        env: &RunEnv,
    ) -> anyhow::Result<Self::Output> {
        let mut bad = Vec::new();
        for layout in Layout::ALL {
            let compute = medddpm_kernels::Compute {
                layout,
                ..env.compute()
            };
            for (i, case) in medddpm_kernels::conv::ConvCase::standard(1)
                .into_iter()
                .enumerate()
            {
                let errs = medddpm_kernels::conv::engine_vs_reference::<B::InnerBackend>(
                    &device, case, compute, i as u64,
                );
                if errs.iter().any(|e| !(*e < 1e-4)) {
                    bad.push(format!("{layout} {case:?}: {errs:?}"));
                }
            }
        }
        Ok(bad)
    }
}

#[test]
fn convolutions_and_their_gradients_agree_with_the_cpu() {
    let bad = on_wgpu(Convolutions);
    assert!(bad.is_empty(), "{bad:#?}");
}
