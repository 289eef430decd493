//! One configuration of the matrix, measured in this process on backend `B`.

use std::cell::RefCell;
use std::time::Instant;

use anyhow::Context;

use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, Optimizer};
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, ElementConversion, Tensor};
use medddpm_backend::KernelAutodiffBackend;
use medddpm_backend::{Precision, RunEnv};
use medddpm_diffusion::{network_input, CosineSchedule, DdpmSampler};
use medddpm_train::{micro_step, micro_step_loss, MicroBatch};
use medddpm_unet::{cast_compute_params, OpProfile, UNet, UNetConfig};
use serde::{Deserialize, Serialize};

use crate::memory::{nvidia_gpu_name, PeakMemory};
use crate::probe::{probe_key, read_f64, write_f64, Probe, ProbeCase};
use crate::record::{BenchRecord, RecordStatus};

/// What to measure for one configuration.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SingleConfig {
    /// Model name for the report.
    pub model: String,
    /// The network.
    pub unet: UNetConfig,
    /// Volume size (d, h, w).
    pub size: [usize; 3],
    /// Batch size.
    pub batch: usize,
    /// Untimed steps after the first one.
    pub warmup: usize,
    /// Timed steps; the median is reported.
    pub steps: usize,
    /// Adam learning rate (the reference's 1e-5).
    pub lr: f64,
    /// Run the per-operation breakdown (profiled forwards).
    pub breakdown: bool,
    /// Only run the agreement probe (no timings).
    pub check_only: bool,
    /// Seed of weights, inputs and the probe.
    pub seed: u64,
    /// Convolution engine asked for (`auto` resolves per backend when the process starts).
    #[serde(default)]
    pub conv_engine: medddpm_backend::ConvEngine,
    /// GroupNorm code asked for.
    #[serde(default)]
    pub norm_engine: medddpm_backend::NormEngine,
    /// Folder that keeps the agreement probe's float64 reference between runs.
    #[serde(default)]
    pub probe_cache: Option<std::path::PathBuf>,
    /// When the probe's output disagrees but is finite, compare every operation's output with
    /// the float64 reference's and write the per-operation deviations into this folder
    /// (`locate-<backend>-<precision>-<layout>.json`).
    #[serde(default)]
    pub locate: Option<std::path::PathBuf>,
    /// Sample the host's threads while the timed training micro-steps run and write their
    /// call stacks, folded (one `frame;frame;... count` line each), into this folder
    /// (`host-profile-<backend>-<precision>-<layout>.folded`). Needs the `host-profile` feature.
    #[serde(default)]
    pub host_profile: Option<std::path::PathBuf>,
}

/// Median of `values` (NaN when empty).
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => 0.5 * (v[n / 2 - 1] + v[n / 2]),
    }
}

fn sync<B: Backend>(device: &B::Device) -> anyhow::Result<()> {
    B::sync(device).map_err(|e| anyhow::anyhow!("device synchronisation failed: {e:?}"))?;
    match medddpm_kernels::device_error() {
        Some(message) => anyhow::bail!("{message}"),
        None => Ok(()),
    }
}

fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}

/// Measures `config` under `env` (backend, precision, layout) and returns its record.
///
/// Order: first sampling step, timed sampling steps, breakdown, the agreement probe, first
/// training micro-step, timed training micro-steps. The probe is the same network with fixed
/// random weights, one forward at the benchmarked size (so it runs the forward kernels just
/// measured, already tuned), against a float64 CPU forward of the same weights and input. It
/// runs after the first sampling step so that first-step times are not shortened by kernels it
/// compiled; a probe that disagrees turns the record into [`RecordStatus::Disagrees`], stops the
/// run, and its timings are withheld.
pub fn bench_one<B: KernelAutodiffBackend>(
    device: &B::Device,
    env: &RunEnv,
    config: &SingleConfig,
    progress: impl FnMut(&str),
) -> anyhow::Result<BenchRecord> {
    bench_one_with_partial::<B>(device, env, config, progress, |_| {})
}

/// [`bench_one`], handing `partial` the record as it stands after every phase (status
/// `Failed`, the message naming the last finished phase), so that a run killed mid-way still
/// leaves what it measured.
pub fn bench_one_with_partial<B: KernelAutodiffBackend>(
    device: &B::Device,
    env: &RunEnv,
    config: &SingleConfig,
    mut progress: impl FnMut(&str),
    mut partial: impl FnMut(&BenchRecord),
) -> anyhow::Result<BenchRecord> {
    let gpu = env.backend != medddpm_backend::BackendKind::Cpu;
    let memory = PeakMemory::start(gpu);
    let device_name = if gpu {
        nvidia_gpu_name().unwrap_or_else(|| format!("{device:?}"))
    } else {
        format!(
            "CPU, {} threads",
            std::thread::available_parallelism().map_or(1, |n| n.get())
        )
    };
    // The engine is part of what is measured: cuDNN rows are labelled `cuda+cudnn`.
    let mut backend_label = match env.conv_engine {
        medddpm_backend::ConvEngine::Cudnn => format!("{}+cudnn", env.backend.name()),
        _ => env.backend.name().to_string(),
    };
    if env.norm_engine == medddpm_backend::NormEngine::Ops {
        backend_label.push_str("+normops");
    }
    let mut record = BenchRecord::new(
        &backend_label,
        &device_name,
        env.precision.name(),
        &env.layout.to_string(),
        &config.model,
        config.size,
        config.batch,
        RecordStatus::Ok,
    );
    record.tune_cache_warm = env.tune_cache.as_ref().map(|_| env.tuned_before > 0);
    let mut save = |record: &mut BenchRecord, phase: &str| {
        let (peak, source) = memory.current();
        let mut snapshot = record.clone();
        snapshot.peak_memory_mib = peak;
        snapshot.memory_source = Some(source);
        snapshot.status = RecordStatus::Failed;
        snapshot.message = Some(match snapshot.agreement_rel_l2 {
            Some(e) => format!(
                "incomplete: the last phase finished was {phase}; the agreement probe passed (rel. L2 {e:.2e}) and the timings so far are kept"
            ),
            None => format!(
                "incomplete: the last phase finished was {phase}; timings so far are kept but the agreement probe did not run"
            ),
        });
        partial(&snapshot);
    };
    save(&mut record, "start-up");
    if config.check_only {
        agreement::<B>(device, env, config, &mut record, &mut progress)?;
    } else {
        measure::<B>(device, env, config, &mut record, &mut progress, &mut save)?;
    }
    let agrees = record
        .agreement_rel_l2
        .zip(record.agreement_tolerance)
        .is_some_and(|(e, tol)| e.is_finite() && e <= tol);
    if !agrees {
        let (e, tol) = (
            record.agreement_rel_l2.unwrap_or(f64::NAN),
            record.agreement_tolerance.unwrap_or(f64::NAN),
        );
        record.status = RecordStatus::Disagrees;
        let detail = record
            .message
            .take()
            .map(|m| format!(" ({m})"))
            .unwrap_or_default();
        record.message = Some(format!(
            "output differs from the float64 CPU reference by rel. L2 {e:.3e} > {tol:.0e}{detail}: timings withheld"
        ));
        record.first_sample_step_s = None;
        record.first_train_step_s = None;
        record.train_step_median_ms = None;
        record.sample_step_median_ms = None;
        record.breakdown_ms.clear();
    }
    let (peak, source) = memory.finish();
    record.peak_memory_mib = peak;
    record.memory_source = Some(source);
    Ok(record)
}

/// Timesteps of the schedule the benchmark's sampling steps walk down (the reference's T).
pub(crate) const TIMESTEPS: usize = 250;

/// Keys of [`BenchRecord::burn_memory_mib`].
pub(crate) const MEMORY_IN_USE: &str = "in use after the forward pass";
/// See [`MEMORY_IN_USE`].
pub(crate) const MEMORY_RESERVED: &str = "reserved after the forward pass";

fn size_label(size: [usize; 3]) -> String {
    format!("{}x{}x{}", size[0], size[1], size[2])
}

/// The float64 probe's size: at most 32 per axis, a multiple of the network's size divisor.
fn small_probe_size(unet: &medddpm_unet::UNetConfig, size: [usize; 3]) -> [usize; 3] {
    let divisor = unet.size_divisor();
    let cap = 32usize.max(divisor).div_ceil(divisor) * divisor;
    size.map(|s| s.min(cap))
}

/// The agreement probe; fills the record's agreement fields. Strict FP32 (and the CPU) is
/// compared with a float64 CPU evaluation at a small size; on a GPU its output at the
/// benchmarked size is then kept, and the other precisions are compared with it there.
fn agreement<B: KernelAutodiffBackend>(
    device: &B::Device,
    env: &RunEnv,
    config: &SingleConfig,
    record: &mut BenchRecord,
    progress: &mut impl FnMut(&str),
) -> anyhow::Result<()> {
    let tolerance = env.precision.agreement_tolerance();
    let case = ProbeCase {
        unet: &config.unet,
        dtype: env.compute_dtype(),
        compute: env.compute(),
        tolerance,
    };
    let gpu = env.backend != medddpm_backend::BackendKind::Cpu;
    // The strict-FP32 output of this backend at the benchmarked size, written by its fp32 run.
    let fp32_path = config.probe_cache.as_ref().map(|dir| -> anyhow::Result<_> {
        Ok(dir.join(format!(
            "{}-fp32-{}.f64",
            env.backend,
            probe_key(&config.unet, config.size, config.seed)?
        )))
    });
    let fp32_path = fp32_path.transpose()?;
    if env.precision != Precision::Fp32 {
        if let Some(path) = fp32_path.as_ref().filter(|p| p.is_file()) {
            progress(&format!(
                "agreement probe: {:?} on {} {} {} against this backend's strict-FP32 output",
                config.size, env.backend, env.precision, env.layout
            ));
            let probe = Probe::against(&config.unet, config.size, config.seed, read_f64(path)?)?;
            let out = probe.output::<B::InnerBackend>(&case, device)?;
            let result = probe.compare(&out, tolerance);
            record.agreement_rel_l2 = Some(result.rel_l2);
            record.agreement_tolerance = Some(tolerance);
            record.agreement_reference = Some(format!(
                "{} fp32 at {}",
                env.backend,
                size_label(config.size)
            ));
            progress(&format!(
                "agreement: rel. L2 {:.3e} (max abs {:.3e}) against {} fp32, tolerance {:.0e}",
                result.rel_l2, result.max_abs, env.backend, tolerance
            ));
            if !result.agrees() {
                record.message = Some(format!(
                    "output {:.2e} from the strict-FP32 output of the same backend (tolerance {tolerance:.0e})",
                    result.rel_l2
                ));
            }
            return Ok(());
        }
        if gpu {
            progress(&format!(
                "no strict-FP32 output of {} at {} is cached (run fp32 first): checking against float64 at the small size instead",
                env.backend,
                size_label(config.size)
            ));
        }
    }
    // Float64 on the CPU costs minutes at 128^3: check at a small size.
    let small = small_probe_size(&config.unet, config.size);
    progress(&format!(
        "agreement probe: float64 reference on the CPU at {} (cached after the first run)",
        size_label(small)
    ));
    let probe = Probe::new(
        &config.unet,
        small,
        config.seed,
        config.probe_cache.as_deref(),
    )?;
    progress(&format!(
        "agreement probe: {:?} on {} {} {}",
        probe.size, env.backend, env.precision, env.layout
    ));
    let result = probe.run::<B::InnerBackend>(&case, device)?;
    record.agreement_rel_l2 = Some(result.rel_l2);
    record.agreement_tolerance = Some(tolerance);
    record.agreement_reference = Some(format!("float64 cpu at {}", size_label(small)));
    progress(&format!(
        "agreement: rel. L2 {:.3e} (max abs {:.3e}) against float64, tolerance {:.0e}",
        result.rel_l2, result.max_abs, tolerance
    ));
    if env.precision == Precision::Fp32 && gpu && result.agrees() {
        if let Some(path) = &fp32_path {
            // The reference for this backend's other precisions at the benchmarked size.
            let at_size = Probe::against(&config.unet, config.size, config.seed, Vec::new())?;
            let out = at_size.output::<B::InnerBackend>(&case, device)?;
            write_f64(path, &out)?;
            progress(&format!(
                "kept the strict-FP32 output at {} as the other precisions' reference: {}",
                size_label(config.size),
                path.display()
            ));
        }
    }
    if !result.rel_l2.is_finite() {
        progress(
            "the output is not finite: locating the first operation that produced NaN or infinity",
        );
        let place = probe
            .locate_non_finite::<B::InnerBackend>(&case, device)?
            .unwrap_or_else(|| {
                "no single operation (every output was finite when run one by one)".into()
            });
        progress(&format!("first non-finite output: {place}"));
        record.message = Some(format!("non-finite output, first at: {place}"));
    } else if !result.agrees() {
        if let Some(dir) = &config.locate {
            progress("locating the first operation whose output deviates from float64");
            let located = probe.locate_deviation::<B::InnerBackend>(&case, device)?;
            if let Some(i) = located.first_over() {
                for (j, o) in located
                    .ops
                    .iter()
                    .enumerate()
                    .skip(i.saturating_sub(3))
                    .take(7)
                {
                    progress(&format!(
                        "  {:>4} {:<22} {:<24} deviation {:.2e}{}",
                        j + 1,
                        o.op,
                        format!("{:?}", o.dims),
                        o.deviation,
                        if j == i {
                            "  <- first over tolerance"
                        } else {
                            ""
                        }
                    ));
                }
            }
            let summary = located.summary();
            progress(&summary);
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            let path = dir.join(format!(
                "locate-{}-{}-{}.json",
                env.backend, env.precision, env.layout
            ));
            std::fs::write(&path, serde_json::to_vec_pretty(&located)?)
                .with_context(|| format!("writing {}", path.display()))?;
            progress(&format!("per-operation deviations: {}", path.display()));
            record.message = Some(summary);
        }
    }
    Ok(())
}

fn measure<B: KernelAutodiffBackend>(
    device: &B::Device,
    env: &RunEnv,
    config: &SingleConfig,
    record: &mut BenchRecord,
    progress: &mut impl FnMut(&str),
    save: &mut impl FnMut(&mut BenchRecord, &str),
) -> anyhow::Result<()> {
    let [d, h, w] = config.size;
    let b = config.batch;
    let unet: &UNetConfig = &config.unet;
    let image_channels = unet.out_channels;
    let cond_channels = unet.in_channels - image_channels;
    let schedule = CosineSchedule::new(TIMESTEPS);
    let sampler = DdpmSampler::new(schedule.clone());
    let compute = env.compute_dtype();
    B::seed(device, config.seed);

    progress("building the model");
    // f32 master weights; the working copy is cast per step (a no-op in fp32/tf32).
    let mut model: UNet<B> = unet.init::<B>(device)?.with_compute(env.compute());
    let x0 = Tensor::<B, 5>::random(
        [b, image_channels, d, h, w],
        Distribution::Uniform(-1.0, 1.0),
        device,
    );
    let cond = Tensor::<B, 5>::random(
        [b, cond_channels, d, h, w],
        Distribution::Uniform(-1.0, 1.0),
        device,
    )
    .sign();
    let timesteps: Vec<usize> = (0..b).map(|i| (100 + 37 * i) % TIMESTEPS).collect();
    model.check_input([b, unet.in_channels, d, h, w], b)?;

    // Sampling steps: network forward and DDPM update, no autodiff.
    let inference: UNet<B::InnerBackend> = cast_compute_params(model.valid(), compute);
    let cond_i = cond.clone().inner();
    let mut x_t = Tensor::<B::InnerBackend, 5>::random(
        [b, image_channels, d, h, w],
        Distribution::Normal(0.0, 1.0),
        device,
    );
    let mut t = TIMESTEPS - 1;
    let sample_step = |x_t: Tensor<B::InnerBackend, 5>, t: usize| {
        let input = network_input(x_t.clone(), Some(cond_i.clone()));
        let eps = inference.forward(input, &vec![t; b]);
        let noise = Tensor::random(x_t.shape(), Distribution::Normal(0.0, 1.0), device);
        sampler.step(eps, t, x_t, noise).prev_sample
    };
    progress("first sampling step (compiles and autotunes kernels)");
    let start = Instant::now();
    x_t = sample_step(x_t, t);
    sync::<B::InnerBackend>(device)?;
    record.first_sample_step_s = Some(start.elapsed().as_secs_f64());
    progress(&format!(
        "first sampling step took {:.2} s; timing sampling steps",
        record.first_sample_step_s.unwrap()
    ));
    let mut sample_ms = Vec::new();
    for i in 0..config.warmup + config.steps {
        t -= 1;
        let start = Instant::now();
        x_t = sample_step(x_t, t);
        sync::<B::InnerBackend>(device)?;
        if i >= config.warmup {
            sample_ms.push(ms_since(start));
        }
    }
    let finite: f32 = x_t.abs().max().into_scalar().elem();
    if !finite.is_finite() {
        anyhow::bail!("the sampling steps produced non-finite values");
    }
    record.sample_step_median_ms = Some(median(&sample_ms));
    save(record, "the sampling steps");
    progress(&format!(
        "sampling step median {:.2} ms over {} steps",
        median(&sample_ms),
        sample_ms.len()
    ));

    if config.breakdown {
        progress("per-operation breakdown (2 profiled forwards)");
        let profile = RefCell::new(OpProfile::default());
        let input = Tensor::<B::InnerBackend, 5>::random(
            [b, unet.in_channels, d, h, w],
            Distribution::Normal(0.0, 1.0),
            device,
        );
        for _ in 0..2 {
            let out = inference.forward_profiled(input.clone(), &timesteps, &profile);
            sync::<B::InnerBackend>(device)?;
            drop(out);
        }
        let p = profile.into_inner().scaled(2);
        if p.sync_failed {
            anyhow::bail!("device synchronisation failed while profiling");
        }
        record.breakdown_ms = p.ms.clone();
        save(record, "the per-operation breakdown");
        progress(&format!(
            "breakdown: {}",
            p.ms.iter()
                .map(|(k, v)| format!("{k} {v:.1} ms"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    drop(inference);

    // The probe runs the forward kernels measured above (tuned already) and none of the
    // backward ones, so the first training step below still pays its own compilation.
    agreement::<B>(device, env, config, record, progress)?;
    if !record
        .agreement_rel_l2
        .zip(record.agreement_tolerance)
        .is_some_and(|(e, t)| e <= t)
    {
        return Ok(()); // disagrees: no point timing the training step
    }
    save(record, "the agreement probe");

    // Training micro-steps: forward, L1 loss, backward, Adam (PyTorch's epsilon; the whole
    // model's update as one operation, as the trainer runs it) on the f32 master weights.
    let mut optim = medddpm_train::FusedAdam::default().init::<B, UNet<B>>();
    let compute_dtype = env.compute_dtype();
    let mut last_loss = f32::NAN;
    // The reference's objective: L1 on the predicted noise.
    let objective = medddpm_train::DiffusionConfig::default();
    // The same images, condition and timesteps every step, fresh noise.
    let new_batch = || MicroBatch {
        x0: x0.clone(),
        cond: Some(cond.clone()),
        timesteps: timesteps.clone(),
        noise: Tensor::<B, 5>::random(
            [b, image_channels, d, h, w],
            Distribution::Normal(0.0, 1.0),
            device,
        ),
    };
    // The trainer's own micro-step (medddpm_train::micro_step), then the Adam step. Returns
    // the model and the host's time to enqueue the step (before its synchronisation), in ms.
    let mut train_step = |model: UNet<B>, read_loss: bool| -> anyhow::Result<(UNet<B>, f64)> {
        let start = Instant::now();
        // The working copies of the previous step's update (cast on the first step).
        let work = optim.working_model(&model, compute_dtype);
        let (grads, loss) = micro_step(&work, &schedule, new_batch(), &objective, 1.0);
        // As the trainer does: the update consumes the working copies.
        drop(work);
        let model = optim.step(config.lr, model, grads);
        if read_loss {
            last_loss = loss.inner().into_scalar().elem();
        }
        let issue_ms = ms_since(start);
        sync::<B>(device)?;
        Ok((model, issue_ms))
    };
    progress("first training micro-step (compiles and autotunes backward kernels)");
    let start = Instant::now();
    model = train_step(model, false)?.0;
    record.first_train_step_s = Some(start.elapsed().as_secs_f64());
    save(record, "the first training micro-step");
    progress(&format!(
        "first training micro-step took {:.2} s; timing training micro-steps",
        record.first_train_step_s.unwrap()
    ));
    let (mut train_ms, mut issue_ms) = (Vec::new(), Vec::new());
    let mut host_profile = None;
    for i in 0..config.warmup + config.steps {
        if i == config.warmup {
            crate::threads::reset();
            if let Some(dir) = &config.host_profile {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
                let path = dir.join(format!(
                    "host-profile-{}-{}-{}.folded",
                    env.backend, env.precision, env.layout
                ));
                host_profile = Some(crate::host_profile::HostProfile::start(&path)?);
            }
        }
        let start = Instant::now();
        let issued;
        (model, issued) = train_step(model, false)?;
        if i >= config.warmup {
            train_ms.push(ms_since(start));
            issue_ms.push(issued);
        }
    }
    record.train_threads_ms = crate::threads::per_step(train_ms.len());
    if let Some(profile) = host_profile {
        profile.finish()?;
    }
    let model = train_step(model, true)?.0;
    record.train_issue_median_ms = Some(median(&issue_ms));
    if !last_loss.is_finite() {
        anyhow::bail!("the training loss is not finite ({last_loss})");
    }
    record.train_step_median_ms = Some(median(&train_ms));
    save(record, "the training micro-steps");
    progress(&format!(
        "training micro-step median {:.2} ms over {} steps, {:.2} ms of it to enqueue (loss {last_loss:.4})",
        median(&train_ms),
        train_ms.len(),
        record.train_issue_median_ms.unwrap_or(f64::NAN),
    ));
    if !record.train_threads_ms.is_empty() {
        let t = |k: &str| record.train_threads_ms.get(k).copied().unwrap_or(f64::NAN);
        progress(&format!(
            "per step: fusion thread running {:.1} ms ({:.1} of it waiting for the device thread), device thread running {:.1} ms, caller waiting for the fusion thread {:.1} ms",
            t("fusion thread running"),
            t("fusion thread waiting for the device thread"),
            t("device thread running"),
            t("caller waiting for the fusion thread"),
        ));
    }

    if config.breakdown {
        // Two more micro-steps, synchronised between their phases, with the convolution
        // gradients of the backward pass timed on their own; the second is reported. (The
        // synchronisations cut burn-fusion's streams differently from an unprofiled step, so
        // the first profiled step compiles new fused kernels: on the H100 its Adam phase took
        // 730 ms in a 503 ms micro-step.)
        progress("training breakdown (2 profiled micro-steps, the second reported)");
        let mut model = model;
        let mut phases = [0.0f64; 6];
        let mut optim_issue_ms = 0.0;
        let mut memory = None;
        for _ in 0..2 {
            let batch = new_batch();
            sync::<B>(device)?;
            let t0 = Instant::now();
            let work = optim.working_model(&model, compute_dtype);
            let loss = micro_step_loss(&work, &schedule, batch, &objective);
            sync::<B>(device)?;
            let forward_ms = ms_since(t0);
            memory = B::memory_usage(device);
            let t1 = Instant::now();
            medddpm_kernels::conv::backward_profile::start();
            let grads = loss.backward();
            sync::<B>(device)?;
            let [data_ms, weight_ms] = medddpm_kernels::conv::backward_profile::stop();
            let backward_ms = ms_since(t1);
            let t2 = Instant::now();
            let grads = GradientsParams::from_grads(grads, &work);
            drop(work);
            sync::<B>(device)?;
            let grads_ms = ms_since(t2);
            let t3 = Instant::now();
            model = optim.step(config.lr, model, grads);
            optim_issue_ms = ms_since(t3);
            sync::<B>(device)?;
            let optim_ms = ms_since(t3);
            phases = [
                forward_ms,
                data_ms,
                weight_ms,
                backward_ms,
                grads_ms,
                optim_ms,
            ];
        }
        drop(model);
        let [forward_ms, data_ms, weight_ms, backward_ms, grads_ms, optim_ms] = phases;
        record.train_optimizer_issue_ms = Some(optim_issue_ms);
        if let Some(m) = memory {
            let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
            for (k, v) in [
                (MEMORY_IN_USE, mib(m.in_use)),
                (MEMORY_RESERVED, mib(m.reserved)),
            ] {
                record.burn_memory_mib.insert(k.to_string(), v);
            }
        }
        for (k, v) in [
            ("forward and loss", forward_ms),
            ("backward: convolution data gradients", data_ms),
            ("backward: convolution weight gradients", weight_ms),
            (
                "backward: everything else",
                (backward_ms - data_ms - weight_ms).max(0.0),
            ),
            ("gradients to the optimizer", grads_ms),
            ("Adam step", optim_ms),
        ] {
            record.train_breakdown_ms.insert(k.to_string(), v);
        }
        save(record, "the training breakdown");
        progress(&format!(
            "training breakdown: forward {forward_ms:.1} ms, backward {backward_ms:.1} ms (convolution data gradients {data_ms:.1}, weight gradients {weight_ms:.1}), gradients to the optimizer {grads_ms:.1} ms, Adam {optim_ms:.1} ms ({optim_issue_ms:.1} ms of it to enqueue)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::small_probe_size;
    use medddpm_unet::UNetConfig;

    #[test]
    fn the_float64_probe_is_small_and_fits_the_network() {
        let unet = UNetConfig::whole_head(); // size divisor 16
        assert_eq!(small_probe_size(&unet, [128, 128, 128]), [32, 32, 32]);
        assert_eq!(small_probe_size(&unet, [16, 48, 128]), [16, 32, 32]);
        let tiny = UNetConfig::tiny();
        assert_eq!(small_probe_size(&tiny, [8, 8, 8]), [8, 8, 8]);
        for s in small_probe_size(&unet, [64, 96, 160]) {
            assert_eq!(s % unet.size_divisor(), 0);
        }
    }
}
