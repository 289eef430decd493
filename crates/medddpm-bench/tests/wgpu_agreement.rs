//! wgpu against the CPU (`cargo test -p medddpm-bench --features wgpu --test wgpu_agreement`;
//! CI runs it on lavapipe, Mesa's software Vulkan driver). The kernels are tuned afresh, in a
//! temporary tuning cache, so the ones autotune picks on the machine are the ones checked.
#![cfg(feature = "wgpu")]

use burn::tensor::backend::Backend;
use burn::tensor::{DType, Tensor};
use medddpm_backend::KernelAutodiffBackend;
use medddpm_backend::{run_on, BackendKind, BackendTask, ComputeSettings, RunEnv};
use medddpm_bench::probe::{Probe, ProbeCase};
use medddpm_bench::Model;
use medddpm_kernels::{ConvEngine, Precision};
use medddpm_unet::{Compute, Layout};

fn on_wgpu<T: BackendTask<Error = anyhow::Error>>(task: T) -> T::Output {
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

/// A comparison on wgpu that lists what disagrees.
trait Check {
    fn run<B: KernelAutodiffBackend>(self, device: B::Device, env: &RunEnv) -> Vec<String>;
}

/// A [`Check`] as the task [`on_wgpu`] runs.
struct CheckTask<C>(C);

impl<C: Check> BackendTask for CheckTask<C> {
    type Output = Vec<String>;
    type Error = anyhow::Error;
    fn run<B: KernelAutodiffBackend>(
        self,
        device: B::Device,
        env: &RunEnv,
    ) -> anyhow::Result<Vec<String>> {
        Ok(self.0.run::<B>(device, env))
    }
}

/// Runs `check` on wgpu and wants nothing to disagree.
fn assert_agrees(check: impl Check) {
    let bad = on_wgpu(CheckTask(check));
    assert!(bad.is_empty(), "{bad:#?}");
}

/// Normal values from a generator of the caller's own (xorshift and Box-Muller): burn's CPU
/// generator is one for the whole process, shared by the tests that run in parallel, so its
/// draws, and with them the inputs and the errors compared here, changed from run to run.
fn normal<B: Backend, const D: usize>(
    shape: [usize; D],
    mean: f32,
    std: f32,
    seed: u64,
    device: &B::Device,
) -> Tensor<B, D> {
    let mut z = medddpm_testdata::xorshift_normal(seed);
    let n = shape.iter().product::<usize>();
    let values: Vec<f32> = (0..n).map(|_| mean + std * z() as f32).collect();
    Tensor::from_data(burn::tensor::TensorData::new(values, shape), device)
}

/// Adds to `bad`, as `{at} {what}: {e:e}`, each named error that is NaN or reaches `tol`.
fn flag(
    bad: &mut Vec<String>,
    at: impl std::fmt::Display,
    errors: impl IntoIterator<Item = (&'static str, f64)>,
    tol: f64,
) {
    for (what, e) in errors {
        if e.is_nan() || e >= tol {
            bad.push(format!("{at} {what}: {e:e}"));
        }
    }
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

impl Check for Products {
    fn run<B: KernelAutodiffBackend>(self, device: B::Device, _: &RunEnv) -> Vec<String> {
        type Cpu = burn::backend::Flex;
        let cpu = Default::default();
        let mut bad = Vec::new();
        for m in [512, 4096] {
            for k in [8, 16, 24, 40, 48] {
                let n = 16;
                let x = normal::<Cpu, 3>([1, m, k], 0.0, 1.0, 8, &cpu);
                let w = normal::<Cpu, 2>([n, k], 0.0, 1.0, 1, &cpu);
                let expected = product(x.clone(), w.clone());
                let got = product(
                    Tensor::<B::InnerBackend, 3>::from_data(x.to_data(), &device),
                    Tensor::<B::InnerBackend, 2>::from_data(w.to_data(), &device),
                );
                let e = rel_l2(
                    got.into_data().to_vec().unwrap(),
                    expected.into_data().to_vec().unwrap(),
                );
                if e.is_nan() || e >= 1e-5 {
                    bad.push(format!("[1, {m}, {k}] x [{k}, 16]: rel. L2 {e:.2e}"));
                }
            }
        }
        bad
    }
}

#[test]
fn matrix_products_with_an_odd_number_of_k_stages_are_right() {
    assert_agrees(Products);
}

/// `x · wᵀ`, the right operand a transposed view.
fn product<Bk: Backend>(x: Tensor<Bk, 3>, w: Tensor<Bk, 2>) -> Tensor<Bk, 3> {
    let [n, k] = w.dims();
    x.matmul(w.reshape([1, n, k]).swap_dims(1, 2))
}

/// The agreement probe of the small network in `precision` (fp32, or f16: Vulkan's 16-bit
/// format) in both layouts with both convolution engines (burn's kernels, ours), and per
/// operation.
struct TinyProbe(Precision);

impl BackendTask for TinyProbe {
    type Output = Vec<(String, f64, Option<String>)>;
    type Error = anyhow::Error;
    fn run<B: KernelAutodiffBackend>(
        self,
        device: B::Device,
        _: &RunEnv,
    ) -> anyhow::Result<Self::Output> {
        let dtype = self.0.compute_dtype();
        anyhow::ensure!(
            <B::InnerBackend as Backend>::supports_dtype(&device, dtype),
            "this Vulkan device has no {dtype:?} tensors"
        );
        let unet = Model::Tiny.config();
        let probe = Probe::new(&unet, [16; 3], 0, None)?;
        let mut out = Vec::new();
        for conv_engine in [ConvEngine::Burn, ConvEngine::Cubecl] {
            for layout in Layout::ALL {
                let case = ProbeCase {
                    unet: &unet,
                    dtype,
                    compute: Compute {
                        layout,
                        conv_engine,
                        ..Compute::default()
                    },
                    tolerance: self.0.agreement_tolerance(),
                };
                let result = probe.run::<B::InnerBackend>(&case, &device)?;
                let located = probe.locate_deviation::<B::InnerBackend>(&case, &device)?;
                let first = located.first_over().map(|_| located.summary());
                out.push((
                    format!("{} {conv_engine} {layout}", self.0),
                    result.rel_l2,
                    first,
                ));
            }
        }
        Ok(out)
    }
}

#[test]
fn the_small_network_agrees_with_float64_in_both_layouts() {
    check_tiny_probe(Precision::Fp32);
}

fn check_tiny_probe(precision: Precision) {
    let results = on_wgpu(TinyProbe(precision));
    assert_eq!(results.len(), 4);
    for (what, rel_l2, first_deviating) in results {
        assert!(
            rel_l2 < precision.agreement_tolerance() && first_deviating.is_none(),
            "{what}: rel. L2 {rel_l2:.2e}; {first_deviating:?}"
        );
        eprintln!("{what}: rel. L2 {rel_l2:.2e}");
    }
}

#[test]
fn the_small_network_agrees_with_float64_in_f16() {
    check_tiny_probe(Precision::F16);
}

/// The convolutions through the kernels extension, burn's CubeCL kernels and ours (forward,
/// data and weight gradient, both layouts), against the f32 CPU convolution, on the U-Net's
/// geometries and odd ones.
struct Convolutions;

impl Check for Convolutions {
    fn run<B: KernelAutodiffBackend>(self, device: B::Device, env: &RunEnv) -> Vec<String> {
        let mut bad = Vec::new();
        for conv_engine in [ConvEngine::Burn, ConvEngine::Cubecl] {
            for layout in Layout::ALL {
                let compute = medddpm_kernels::Compute {
                    layout,
                    conv_engine,
                    ..env.compute()
                };
                for (i, case) in medddpm_kernels::conv::ConvCase::standard(1)
                    .into_iter()
                    .enumerate()
                {
                    let errs = medddpm_kernels::conv::engine_vs_reference::<B::InnerBackend>(
                        &device, case, compute, i as u64, 2,
                    );
                    if errs.iter().any(|e| e.is_nan() || *e >= 1e-4) {
                        bad.push(format!("{conv_engine} {layout} {case:?}: {errs:?}"));
                    }
                }
            }
        }
        bad
    }
}

#[test]
fn convolutions_and_their_gradients_agree_with_the_cpu() {
    assert_agrees(Convolutions);
}

/// GroupNorm (SiLU fused) through the extension on wgpu: output and the three gradients against
/// the CPU, both layouts; and burn's memory statistics are read.
struct GroupNormAndMemory;

impl BackendTask for GroupNormAndMemory {
    type Output = (Vec<String>, Option<medddpm_kernels::MemoryStats>);
    type Error = anyhow::Error;

    fn run<B: KernelAutodiffBackend>(
        self,
        device: B::Device,
        _: &RunEnv,
    ) -> anyhow::Result<Self::Output> {
        use medddpm_kernels::{group_norm, GroupNormSpec};
        type Cpu = burn::backend::Autodiff<burn::backend::Flex>;
        let cpu = Default::default();
        let mut bad = Vec::new();
        for layout in Layout::ALL {
            let spec = GroupNormSpec {
                num_groups: 4,
                epsilon: 1e-5,
                silu: true,
                layout,
                engine: medddpm_kernels::NormEngine::Kernel,
            };
            let shape = match layout {
                Layout::Ncdhw => [2, 8, 6, 5, 7],
                Layout::Ndhwc => [2, 6, 5, 7, 8],
            };
            let x = normal::<Cpu, 5>(shape, 0.3, 2.0, 2, &cpu);
            let gamma = normal::<Cpu, 1>([8], 1.0, 0.5, 3, &cpu);
            let beta = normal::<Cpu, 1>([8], 0.0, 0.5, 4, &cpu);
            let probe = normal::<Cpu, 5>(shape, 0.0, 1.0, 5, &cpu);
            let data = |t: Tensor<Cpu, 5>| t.into_data().to_vec::<f32>().unwrap();
            // CPU.
            let (xc, gc, bc) = (
                x.clone().require_grad(),
                gamma.clone().require_grad(),
                beta.clone().require_grad(),
            );
            let yc = group_norm(xc.clone(), gc.clone(), bc.clone(), spec);
            let grads = yc.clone().mul(probe.clone()).sum().backward();
            let inner = |t: burn::tensor::TensorData| t.to_vec::<f32>().unwrap();
            let want = [
                data(yc),
                inner(xc.grad(&grads).unwrap().into_data()),
                inner(gc.grad(&grads).unwrap().into_data()),
                inner(bc.grad(&grads).unwrap().into_data()),
            ];
            // wgpu.
            let to5 = |t: Tensor<Cpu, 5>| {
                Tensor::<B, 5>::from_data(t.into_data(), &device).require_grad()
            };
            let to1 = |t: Tensor<Cpu, 1>| {
                Tensor::<B, 1>::from_data(t.into_data(), &device).require_grad()
            };
            let (xg, gg, bg) = (to5(x), to1(gamma), to1(beta));
            let yg = group_norm(xg.clone(), gg.clone(), bg.clone(), spec);
            let grads = yg
                .clone()
                .mul(Tensor::from_data(probe.into_data(), &device))
                .sum()
                .backward();
            let v5 = |t: Tensor<B::InnerBackend, 5>| t.into_data().to_vec::<f32>().unwrap();
            let v1 = |t: Tensor<B::InnerBackend, 1>| t.into_data().to_vec::<f32>().unwrap();
            let got = [
                yg.into_data().to_vec::<f32>().unwrap(),
                v5(xg.grad(&grads).unwrap()),
                v1(gg.grad(&grads).unwrap()),
                v1(bg.grad(&grads).unwrap()),
            ];
            let errs = got.into_iter().zip(want).map(|(g, w)| rel_l2(g, w));
            flag(
                &mut bad,
                layout,
                ["y", "dx", "dgamma", "dbeta"].into_iter().zip(errs),
                1e-4,
            );
        }
        // A tensor alive and written while the pools are read: in use is then this test's own
        // memory, not whatever the process's other tests hold at that moment (all of this
        // test's tensors are gone by now; with nothing alive the pools report none in use).
        let held = Tensor::<B, 1>::ones([4096], &device);
        let _ = held.to_data();
        let memory = B::memory_usage(&device);
        drop(held);
        Ok((bad, memory))
    }
}

#[test]
fn group_norm_agrees_with_the_cpu_and_memory_statistics_are_read() {
    let (bad, memory) = on_wgpu(GroupNormAndMemory);
    assert!(bad.is_empty(), "{bad:#?}");
    let memory = memory.expect("wgpu reports burn's memory statistics");
    assert!(
        memory.in_use > 0 && memory.reserved >= memory.in_use,
        "{memory:?}"
    );
}

/// The CubeCL GroupNorm kernels (and, for comparison, burn's ops on wgpu) against the plain-op
/// twin on the CPU: every standard case, both layouts, forward and the three gradients, f32.
struct GroupNormKernels;

impl Check for GroupNormKernels {
    fn run<B: KernelAutodiffBackend>(self, device: B::Device, _: &RunEnv) -> Vec<String> {
        use medddpm_kernels::norm::{engine_vs_reference, NormCase};
        use medddpm_kernels::NormEngine;
        let mut bad = Vec::new();
        for engine in NormEngine::ALL {
            for layout in Layout::ALL {
                for (i, case) in NormCase::standard(1).into_iter().enumerate() {
                    let errs = engine_vs_reference::<B::InnerBackend>(
                        &device,
                        case,
                        layout,
                        engine,
                        DType::F32,
                        i as u64,
                    );
                    let at = format!("{engine} {layout} {case:?}");
                    let names = ["y", "dx", "dgamma", "dbeta", "dshift"];
                    flag(&mut bad, at, names.into_iter().zip(errs), 5e-6);
                }
            }
        }
        bad
    }
}

#[test]
fn group_norm_kernels_agree_with_their_reference_twin() {
    assert_agrees(GroupNormKernels);
}

/// The CubeCL trilinear x2 upsampling and its backward against the plain-op twins on the CPU:
/// both layouts, axes of 1 to 5 voxels, f32.
struct UpsampleKernels;

impl Check for UpsampleKernels {
    fn run<B: KernelAutodiffBackend>(self, device: B::Device, _: &RunEnv) -> Vec<String> {
        use burn::tensor::ops::FloatTensor;
        use medddpm_kernels::upsample::{
            upsample_trilinear_x2_backward_in, upsample_trilinear_x2_in,
        };
        type Cpu = burn::backend::Flex;
        type G<B> = <B as burn::tensor::backend::AutodiffBackend>::InnerBackend;
        let cpu = Default::default();
        let prim = |t: Tensor<G<B>, 5>| -> FloatTensor<G<B>> { t.into_primitive().tensor() };
        let back = |t: FloatTensor<G<B>>| {
            Tensor::<G<B>, 5>::from_primitive(burn::tensor::TensorPrimitive::Float(t))
                .into_data()
                .to_vec::<f32>()
                .unwrap()
        };
        let mut bad = Vec::new();
        for layout in Layout::ALL {
            for [b, c, d, h, w] in [[1, 8, 3, 4, 5], [2, 3, 1, 2, 3], [1, 16, 2, 2, 2]] {
                let shape = match layout {
                    Layout::Ncdhw => [b, c, d, h, w],
                    Layout::Ndhwc => [b, d, h, w, c],
                };
                let big = match layout {
                    Layout::Ncdhw => [b, c, 2 * d, 2 * h, 2 * w],
                    Layout::Ndhwc => [b, 2 * d, 2 * h, 2 * w, c],
                };
                let x = normal::<Cpu, 5>(shape, 0.0, 1.0, 6, &cpu);
                let dy = normal::<Cpu, 5>(big, 0.0, 1.0, 7, &cpu);
                let want_y = upsample_trilinear_x2_in(x.clone(), layout);
                let want_dx = upsample_trilinear_x2_backward_in(dy.clone(), layout);
                let on = |t: Tensor<Cpu, 5>| Tensor::<G<B>, 5>::from_data(t.into_data(), &device);
                let got_y = back(
                    <G<B> as medddpm_kernels::KernelBackend>::upsample_trilinear_x2(
                        prim(on(x)),
                        layout,
                    ),
                );
                let got_dx = back(
                    <G<B> as medddpm_kernels::KernelBackend>::upsample_trilinear_x2_backward(
                        prim(on(dy)),
                        layout,
                    ),
                );
                let errs = [
                    (
                        "y",
                        rel_l2(got_y, want_y.into_data().to_vec::<f32>().unwrap()),
                    ),
                    (
                        "dx",
                        rel_l2(got_dx, want_dx.into_data().to_vec::<f32>().unwrap()),
                    ),
                ];
                flag(&mut bad, format!("{layout} {shape:?}"), errs, 1e-6);
            }
        }
        bad
    }
}

#[test]
fn upsampling_kernels_agree_with_their_reference_twins() {
    assert_agrees(UpsampleKernels);
}

/// f32, and f16 where the device stores it (lavapipe has no bf16).
fn float_dtypes<B: Backend>(device: &B::Device) -> Vec<DType> {
    let mut dtypes = vec![DType::F32];
    if B::supports_dtype(device, DType::F16) {
        dtypes.push(DType::F16);
    }
    dtypes
}

/// The CubeCL join of two activations along the last axis, its split and the zero-padding of
/// channels, against burn's `cat`, slices and zeros: channel counts that allow vectors of 8, 4
/// and only 1, f32 and (where the device stores it) f16; exact copies.
struct ChannelKernels;

impl Check for ChannelKernels {
    fn run<B: KernelAutodiffBackend>(self, device: B::Device, _: &RunEnv) -> Vec<String> {
        let mut bad = Vec::new();
        for dtype in float_dtypes::<B::InnerBackend>(&device) {
            for (i, (rows, a, b)) in [(5, 8, 8), (7, 3, 5), (3, 16, 24), (999, 64, 12)]
                .into_iter()
                .enumerate()
            {
                let errs = medddpm_kernels::channels::engine_vs_reference::<B::InnerBackend>(
                    &device, rows, a, b, dtype, i as u64,
                );
                if errs != [0.0, 0.0, 0.0] {
                    bad.push(format!(
                        "{dtype:?} {rows} rows, {a} + {b} channels: [join, split, pad] {errs:?}"
                    ));
                }
            }
        }
        bad
    }
}

#[test]
fn channel_join_split_and_pad_kernels_copy_exactly() {
    assert_agrees(ChannelKernels);
}

/// The CubeCL Adam update against its plain-op twin on the CPU: four steps with the learning
/// rate and step count changing (each launch must use its own scalars), 70 tensors of uneven
/// sizes per call (more than one launch's worth), f32 and f16 gradients; and the gradient sum
/// of micro-batches (`sum_f32`) and the gradients' squared norm (`squared_norm_f32`) over the
/// same tensors.
struct AdamKernel;

impl Check for AdamKernel {
    fn run<B: KernelAutodiffBackend>(self, device: B::Device, _: &RunEnv) -> Vec<String> {
        let mut bad = Vec::new();
        // f32 gradients; and f16 ones with an f16 working copy (mixed precision; lavapipe
        // has no bf16), where the device stores f16.
        let works: Vec<Option<DType>> = float_dtypes::<B::InnerBackend>(&device)
            .into_iter()
            .map(|d| (d != DType::F32).then_some(d))
            .collect();
        eprintln!("Adam gradients and working copies: {works:?} (None: f32)");
        for work in works {
            for (i, len) in [1usize, 257, 40_000].into_iter().enumerate() {
                let errs = medddpm_kernels::adam::engine_vs_reference::<B::InnerBackend>(
                    &device, len, 4, i as u64, work,
                );
                let [p, m, v, copy] = errs;
                if ![p, m, v].iter().all(|e| *e <= 1e-6) || copy != 0.0 {
                    bad.push(format!("{len} values, working copy {work:?}: {errs:?}"));
                }
                // The micro-batches' gradient sums, exact.
                let grads = work.unwrap_or(DType::F32);
                let err = medddpm_kernels::adam::sum::engine_vs_reference::<B::InnerBackend>(
                    &device,
                    len,
                    20 + i as u64,
                    grads,
                );
                if err != 0.0 {
                    bad.push(format!(
                        "{len} values, sums of {grads:?} gradients: {err:e}"
                    ));
                }
                // Their squared norm, to the f32 additions' rounding.
                let err = medddpm_kernels::adam::sum::squared_norm_vs_reference::<B::InnerBackend>(
                    &device,
                    len,
                    40 + i as u64,
                    grads,
                );
                if err > 1e-5 {
                    bad.push(format!("{len} values, squared norm of {grads:?}: {err:e}"));
                }
            }
        }
        bad
    }
}

#[test]
fn adam_and_gradient_sum_kernels_agree_with_their_reference_twins() {
    assert_agrees(AdamKernel);
}
