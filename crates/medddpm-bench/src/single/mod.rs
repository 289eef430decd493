//! One configuration of the matrix, measured in this process on backend `B`.
//!
//! The measured cases follow burn's backend-comparison benchmarks: each is prepared once, then
//! run step by step as an `execute` and a `sync` (`case.rs`). The sampling step (`sampling.rs`)
//! and the training micro-step (`training.rs`) are such cases; the agreement probe
//! (`agreement.rs`) runs between them.

mod agreement;
mod case;
mod graphs;
mod sampling;
mod training;

use std::time::Instant;

use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Tensor};
use medddpm_backend::{BackendKind, KernelAutodiffBackend, RunEnv};
use medddpm_diffusion::CosineSchedule;
use medddpm_unet::{UNet, UNetConfig};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::memory::{nvidia_gpu_name, PeakMemory};
use crate::options::Workload;
use crate::record::{BenchRecord, RecordBackend, RecordStatus};

/// What to measure for one configuration.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SingleConfig {
    /// The network by name (for the report), volume size (d, h, w), batch size, and the
    /// activations the training micro-step recomputes instead of keeping.
    #[serde(flatten)]
    pub workload: Workload,
    /// The network.
    pub unet: UNetConfig,
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
    /// Also time the steps replayed from CUDA graphs (CUDA), after the steps run as they come.
    #[serde(default)]
    pub cuda_graphs: bool,
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

/// Waits for the device, and reports an error it raised meanwhile (cuDNN's, on CUDA).
fn sync<B: Backend>(device: &B::Device) -> Result<()> {
    B::sync(device).map_err(|e| Error::Sync {
        cause: format!("{e:?}"),
    })?;
    match medddpm_kernels::device_error() {
        Some(message) => Err(Error::Device { message }),
        None => Ok(()),
    }
}

fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}

pub(crate) use crate::options::TIMESTEPS;

/// Keys of [`BenchRecord::burn_memory_mib`].
pub(crate) const MEMORY_IN_USE: &str = "in use after the forward pass";
/// See [`MEMORY_IN_USE`].
pub(crate) const MEMORY_RESERVED: &str = "reserved after the forward pass";

fn size_label(size: [usize; 3]) -> String {
    format!("{}x{}x{}", size[0], size[1], size[2])
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
) -> Result<BenchRecord> {
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
) -> Result<BenchRecord> {
    let gpu = env.backend != BackendKind::Cpu;
    let memory = PeakMemory::start(gpu);
    let mut record = BenchRecord::new(
        RecordBackend::of(env),
        env.precision,
        env.layout,
        config.workload,
        RecordStatus::Ok,
    );
    record.device = device_name::<B>(device, gpu);
    record.tune_cache_warm = env.tune_cache.as_ref().map(|_| env.tuned_before > 0);
    let mut run: Run<B> = Run {
        device,
        env,
        config,
        record,
        memory: &memory,
        progress: &mut progress,
        partial: &mut partial,
    };
    run.save("start-up");
    if config.check_only {
        agreement::check(&mut run)?;
    } else {
        measure(&mut run)?;
    }
    let mut record = run.record;
    if !record.agrees() {
        withhold_timings(&mut record);
    }
    let (peak, source) = memory.finish();
    record.peak_memory_mib = peak;
    record.memory_source = Some(source);
    Ok(record)
}

/// The device as the report names it: the GPU's model, or the CPU and its threads.
fn device_name<B: Backend>(device: &B::Device, gpu: bool) -> String {
    if gpu {
        nvidia_gpu_name().unwrap_or_else(|| format!("{device:?}"))
    } else {
        format!(
            "CPU, {} threads",
            std::thread::available_parallelism().map_or(1, |n| n.get())
        )
    }
}

impl BenchRecord {
    /// Whether the agreement probe ran and the output was within tolerance.
    fn agrees(&self) -> bool {
        self.agreement_rel_l2
            .zip(self.agreement_tolerance)
            .is_some_and(|(e, tol)| e.is_finite() && e <= tol)
    }
}

/// A record whose output disagreed (or was never checked): the status says so, the message
/// gives the error, and no timing is kept.
fn withhold_timings(record: &mut BenchRecord) {
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
    record.train_gpu = None;
    record.sample_gpu = None;
}

/// One configuration being measured: where it runs, what it measures, the record so far, and
/// who hears of its progress.
pub(crate) struct Run<'a, B: Backend> {
    device: &'a B::Device,
    env: &'a RunEnv,
    config: &'a SingleConfig,
    record: BenchRecord,
    memory: &'a PeakMemory,
    progress: &'a mut dyn FnMut(&str),
    partial: &'a mut dyn FnMut(&BenchRecord),
}

/// Steps traced for the GPU's time per step (CUDA only).
pub(crate) const TRACED_STEPS: usize = 3;

impl<B: Backend> Run<'_, B> {
    /// Whether the GPU's time is traced (CUPTI: CUDA backends only).
    fn traces_gpu(&self) -> bool {
        self.env.backend == BackendKind::Cuda
    }

    /// Traces [`TRACED_STEPS`] steps of `case` and says what the GPU did in them; `None` (said
    /// why) when CUPTI cannot record.
    fn trace_gpu<C: case::Case>(
        &mut self,
        case: &mut C,
        what: &str,
    ) -> Result<Option<crate::gpu_trace::GpuTime>> {
        match case::traced_steps(case, TRACED_STEPS)? {
            Ok(t) => {
                self.say(&format!(
                    "GPU per {what}: busy {:.1} of {:.1} ms traced, {:.0} launches; kernels (ms): {}; {}",
                    t.busy_ms,
                    t.wall_ms,
                    t.launches,
                    t.classes_text(),
                    t.idle_text()
                ));
                if let Some(host) = t.host_text() {
                    self.say(&format!("host per {what}: {host}"));
                }
                Ok(Some(t))
            }
            Err(why) => {
                self.say(&format!("no GPU trace of the {what}: {why}"));
                Ok(None)
            }
        }
    }

    /// Tells the caller what is happening.
    fn say(&mut self, message: &str) {
        (self.progress)(message)
    }

    /// Runs the first step of `case` (`first {what}`, which compiles and tunes `kernels`) and
    /// says how long it took and where the host's threads spent it: with warm caches that is
    /// start-up work (libraries, plans, modules).
    fn first_step<C: case::Case>(
        &mut self,
        case: &mut C,
        what: &str,
        kernels: &str,
    ) -> Result<f64> {
        self.say(&format!("first {what} (compiles and autotunes {kernels})"));
        crate::threads::reset();
        let first = case::first_step(case)?;
        self.say(&format!("first {what} took {first:.2} s; timing {what}s"));
        let spent = crate::threads::largest_s(&crate::threads::per_step(1), 8);
        if !spent.is_empty() {
            self.say(&format!("first {what}, host threads (s): {spent}"));
        }
        Ok(first)
    }

    /// Hands the caller the record as it stands after `phase`: status `Failed`, the message
    /// naming the last finished phase, peak memory so far.
    fn save(&mut self, phase: &str) {
        let (peak, source) = self.memory.current();
        let mut snapshot = self.record.clone();
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
        (self.partial)(&snapshot);
    }
}

/// The network and the data both cases start from: f32 master weights, clean images, the
/// condition, and the timesteps of the training batch.
pub(crate) struct Inputs<B: Backend> {
    model: UNet<B>,
    x0: Tensor<B, 5>,
    cond: Tensor<B, 5>,
    timesteps: Vec<usize>,
    schedule: CosineSchedule,
}

impl<B: KernelAutodiffBackend> Inputs<B> {
    /// Seeds the device and draws the weights, images and condition.
    fn prepare(run: &mut Run<B>) -> Result<Self> {
        let [d, h, w] = run.config.workload.size;
        let b = run.config.workload.batch;
        let unet: &UNetConfig = &run.config.unet;
        let image_channels = unet.out_channels;
        let cond_channels = unet.in_channels - image_channels;
        let device = run.device;
        B::seed(device, run.config.seed);
        run.say("building the model");
        // f32 master weights; the working copy is cast per step (a no-op in fp32/tf32).
        let model: UNet<B> = unet.init::<B>(device)?.with_compute(run.env.compute());
        let uniform = Distribution::Uniform(-1.0, 1.0);
        let x0 = Tensor::<B, 5>::random([b, image_channels, d, h, w], uniform, device);
        let cond = Tensor::<B, 5>::random([b, cond_channels, d, h, w], uniform, device).sign();
        let timesteps: Vec<usize> = (0..b).map(|i| (100 + 37 * i) % TIMESTEPS).collect();
        model.check_input([b, unet.in_channels, d, h, w], b)?;
        Ok(Self {
            model,
            x0,
            cond,
            timesteps,
            schedule: CosineSchedule::new(TIMESTEPS),
        })
    }
}

/// The timed phases of a configuration, in order; the agreement probe between the sampling
/// and the training phases decides whether training is timed at all.
fn measure<B: KernelAutodiffBackend>(run: &mut Run<B>) -> Result<()> {
    let inputs = Inputs::prepare(run)?;
    let mut sampling = sampling::Sampling::prepare(&inputs, run);
    sampling::measure(run, &mut sampling)?;
    if run.config.breakdown {
        sampling::forward_breakdown(run, &sampling, &inputs.timesteps)?;
    }
    drop(sampling);

    // The probe runs the forward kernels measured above (tuned already) and none of the
    // backward ones, so the first training step below still pays its own compilation.
    agreement::check(run)?;
    if !run
        .record
        .agreement_rel_l2
        .zip(run.record.agreement_tolerance)
        .is_some_and(|(e, t)| e <= t)
    {
        return Ok(()); // disagrees: no point timing the training step
    }
    run.save("the agreement probe");

    let mut training = training::Training::prepare(inputs, run);
    training::measure(run, &mut training)?;
    if run.traces_gpu() && run.config.cuda_graphs {
        graphs::measure(run, &mut training)?;
    }
    if run.config.breakdown {
        training::breakdown(run, training)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::agreement::small_probe_size;
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
