//! The training micro-step as a measured case: the trainer's own micro-step (forward, L1 loss
//! on the predicted noise, backward) and the Adam step on the f32 master weights; and one
//! micro-step split into its phases.

use std::time::Instant;

use burn::optim::{GradientsParams, Optimizer};
use burn::tensor::{DType, Distribution, ElementConversion, Tensor};
use medddpm_backend::KernelAutodiffBackend;
use medddpm_diffusion::CosineSchedule;
use medddpm_kernels::conv::backward_profile;
use medddpm_kernels::MemoryStats;
use medddpm_train::{
    micro_step, micro_step_forward, DiffusionConfig, FusedAdamOptimizer, MicroBatch,
    MicroStepGraphs,
};
use medddpm_unet::{ActivationCheckpointing, UNet};

use super::case::{back_to_back, step, timed_steps, Case};
use super::{median, ms_since, sync, Inputs, Run, MEMORY_IN_USE, MEMORY_RESERVED};
use crate::error::{Error, FileAction, Result};
use crate::gpu_trace::mark;
use crate::host_profile::HostProfile;

/// Training micro-steps of one batch on backend `B`: the same images, condition and
/// timesteps every step, fresh noise.
pub(super) struct Training<'a, B: KernelAutodiffBackend> {
    /// The f32 master weights (taken while a step runs).
    pub(super) model: Option<UNet<B>>,
    /// Adam (PyTorch's epsilon; the whole model's update as one operation, as the trainer
    /// runs it), with the working copies of the weights in the compute precision.
    pub(super) optim: FusedAdamOptimizer<UNet<B>, B>,
    pub(super) x0: Tensor<B, 5>,
    pub(super) cond: Tensor<B, 5>,
    pub(super) timesteps: Vec<usize>,
    pub(super) schedule: CosineSchedule,
    /// The reference's objective: L1 on the predicted noise.
    pub(super) objective: DiffusionConfig,
    pub(super) compute_dtype: DType,
    /// What the backward pass recomputes instead of keeping.
    pub(super) checkpointing: ActivationCheckpointing,
    pub(super) lr: f64,
    /// Read the loss back after the step (a synchronisation: only outside the timed steps).
    pub(super) read_loss: bool,
    /// The micro-step through CUDA graphs (the steps after the ones run as they come).
    pub(super) graphs: Option<MicroStepGraphs<B>>,
    /// Per step, the host's ms until the micro-step, in it, and after it (Adam).
    pub(super) host_phases: Vec<[f64; 3]>,
    pub(super) last_loss: f32,
    pub(super) device: &'a B::Device,
}

impl<'a, B: KernelAutodiffBackend> Training<'a, B> {
    /// A fresh optimizer over the master weights of `inputs`.
    pub(super) fn prepare(inputs: Inputs<B>, run: &Run<'a, B>) -> Self {
        Self {
            model: Some(inputs.model),
            optim: medddpm_train::FusedAdam::default().init::<B, UNet<B>>(),
            x0: inputs.x0,
            cond: inputs.cond,
            timesteps: inputs.timesteps,
            schedule: inputs.schedule,
            objective: DiffusionConfig::default(),
            compute_dtype: run.env.compute_dtype(),
            checkpointing: run.config.workload.activation_checkpointing,
            lr: run.config.lr,
            read_loss: false,
            graphs: None,
            host_phases: Vec::new(),
            last_loss: f32::NAN,
            device: run.device,
        }
    }

    /// The Adam step, then (as the trainer does) the next step's working model while the GPU
    /// runs the update.
    fn update(&mut self, model: UNet<B>, grads: GradientsParams) {
        let model = self.optim.step(self.lr, model, grads);
        self.optim.prepare_working_model(&model, self.compute_dtype);
        self.model = Some(model);
    }

    /// The batch with fresh noise.
    fn new_batch(&self) -> MicroBatch<B> {
        MicroBatch {
            x0: self.x0.clone(),
            cond: Some(self.cond.clone()),
            timesteps: self.timesteps.clone(),
            noise: Tensor::<B, 5>::random(
                self.x0.dims(),
                Distribution::Normal(0.0, 1.0),
                self.device,
            ),
        }
    }
}

impl<B: KernelAutodiffBackend> Case for Training<'_, B> {
    /// The host's time to enqueue the step (before its synchronisation), in ms.
    type Output = f64;

    /// The trainer's own micro-step (medddpm_train::micro_step), then the Adam step.
    fn execute(&mut self) -> Result<f64> {
        let start = Instant::now();
        let model = self
            .model
            .take()
            .expect("the model is back after each step");
        // The working copies the previous step prepared (cast on the first step).
        let work = self.optim.working_model(&model, self.compute_dtype);
        let batch = self.new_batch();
        let how = (&self.objective, 1.0, self.checkpointing);
        mark("batch ready");
        let t0 = Instant::now();
        let (grads, loss) = match self.graphs.as_mut() {
            Some(graphs) => graphs.micro_step(&work, &self.schedule, batch, how),
            None => micro_step(&work, &self.schedule, batch, how.0, how.1, how.2),
        };
        let t1 = Instant::now();
        mark("micro-step enqueued");
        // As the trainer does: the update consumes the working copies.
        drop(work);
        self.update(model, grads);
        self.host_phases
            .push([ms_since(start), ms_since(t0) - ms_since(t1), ms_since(t1)]);
        if self.read_loss {
            self.last_loss = loss.inner().into_scalar().elem();
        }
        Ok(ms_since(start))
    }

    fn sync(&self) -> Result<()> {
        sync::<B>(self.device)
    }
}

/// The first training micro-step, then the timed ones (the host's threads counted and, when
/// asked, sampled), then one more that reads the loss: their times into the record.
pub(super) fn measure<B: KernelAutodiffBackend>(
    run: &mut Run<B>,
    case: &mut Training<B>,
) -> Result<()> {
    let first = run.first_step(case, "training micro-step", "backward kernels")?;
    run.record.first_train_step_s = Some(first);
    run.save("the first training micro-step");
    let (steps, profile) = timed_steps(case, run.config.warmup, run.config.steps, || {
        crate::threads::reset();
        start_host_profile(run)
    })?;
    let train_ms: Vec<f64> = steps.iter().map(|s| s.ms).collect();
    let issue_ms: Vec<f64> = steps.iter().map(|s| s.output).collect();
    run.record.train_threads_ms = crate::threads::per_step(train_ms.len());
    run.record.train_back_to_back_ms = Some(back_to_back(case, run.config.steps)?);
    if let Some(profile) = profile.flatten() {
        profile.finish()?;
    }
    if run.traces_gpu() {
        run.record.train_gpu = run.trace_gpu(case, "training micro-step")?;
    }
    case.read_loss = true;
    step(case)?;
    case.read_loss = false;
    run.record.train_issue_median_ms = Some(median(&issue_ms));
    let loss = case.last_loss;
    if !loss.is_finite() {
        return Err(Error::NonFiniteLoss { loss });
    }
    run.record.train_step_median_ms = Some(median(&train_ms));
    run.save("the training micro-steps");
    run.say(&format!(
        "training micro-step median {:.2} ms over {} steps, {:.2} ms of it to enqueue (loss {loss:.4}); back to back {:.2} ms a step",
        median(&train_ms),
        train_ms.len(),
        run.record.train_issue_median_ms.unwrap_or(f64::NAN),
        run.record.train_back_to_back_ms.unwrap_or(f64::NAN),
    ));
    report_threads(run);
    Ok(())
}

/// Starts sampling the host's threads when the configuration asks for it.
fn start_host_profile<B: KernelAutodiffBackend>(run: &Run<B>) -> Result<Option<HostProfile>> {
    let Some(dir) = &run.config.host_profile else {
        return Ok(None);
    };
    std::fs::create_dir_all(dir).map_err(Error::io(FileAction::CreateDir, dir))?;
    let env = run.env;
    let path = dir.join(format!(
        "host-profile-{}-{}-{}.folded",
        env.backend, env.precision, env.layout
    ));
    Ok(Some(HostProfile::start(&path)?))
}

/// Says how busy the host's threads were per step (the CubeCL backends count them).
fn report_threads<B: KernelAutodiffBackend>(run: &mut Run<B>) {
    if run.record.train_threads_ms.is_empty() {
        return;
    }
    let threads = &run.record.train_threads_ms;
    let t = |k: &str| threads.get(k).copied().unwrap_or(f64::NAN);
    let message = format!(
        "per step: fusion thread running {:.1} ms ({:.1} of it waiting for the device thread), device thread running {:.1} ms, caller waiting for the fusion thread {:.1} ms",
        t("fusion thread running"),
        t("fusion thread waiting for the device thread"),
        t("device thread running"),
        t("caller waiting for the fusion thread"),
    );
    run.say(&message);
}

/// One training micro-step's phases, synchronised between them, in ms.
struct Phases {
    forward: f64,
    /// The convolutions' data gradients, timed on their own inside the backward pass.
    data: f64,
    /// The convolutions' weight gradients, likewise.
    weight: f64,
    backward: f64,
    grads: f64,
    optim: f64,
    /// Of `optim`, the host's time to enqueue the Adam step.
    optim_issue: f64,
    /// burn's memory statistics after the forward pass.
    memory: Option<MemoryStats>,
}

impl<B: KernelAutodiffBackend> Training<'_, B> {
    /// One micro-step, synchronised between its phases, with the convolution gradients of the
    /// backward pass timed on their own.
    fn profiled_step(&mut self) -> Result<Phases> {
        let device = self.device;
        let model = self
            .model
            .take()
            .expect("the model is back after each step");
        let batch = self.new_batch();
        sync::<B>(device)?;
        let t0 = Instant::now();
        let work = self.optim.working_model(&model, self.compute_dtype);
        // With checkpointing: the forward pass without a graph (what stays is in use below).
        let pending = micro_step_forward(
            &work,
            &self.schedule,
            batch,
            &self.objective,
            self.checkpointing,
        );
        sync::<B>(device)?;
        let forward = ms_since(t0);
        let memory = B::memory_usage(device);
        let t1 = Instant::now();
        backward_profile::start();
        // The gradients under the parameters' ids (with checkpointing, the blocks' recomputation
        // and backward passes, all timed as the backward phase).
        let grads = pending.backward(&work, 1.0);
        sync::<B>(device)?;
        let [data, weight] = backward_profile::stop();
        let backward = ms_since(t1);
        let t2 = Instant::now();
        drop(work);
        sync::<B>(device)?;
        let grads_ms = ms_since(t2);
        let t3 = Instant::now();
        self.update(model, grads);
        let optim_issue = ms_since(t3);
        sync::<B>(device)?;
        Ok(Phases {
            forward,
            data,
            weight,
            backward,
            grads: grads_ms,
            optim: ms_since(t3),
            optim_issue,
            memory,
        })
    }
}

/// Two more micro-steps, synchronised between their phases, the second reported: the phases
/// and burn's memory statistics into the record. (The synchronisations cut burn-fusion's
/// streams differently from an unprofiled step, so the first profiled step compiles new fused
/// kernels: on the H100 its Adam phase took 730 ms in a 503 ms micro-step.)
pub(super) fn breakdown<B: KernelAutodiffBackend>(
    run: &mut Run<B>,
    mut case: Training<B>,
) -> Result<()> {
    run.say("training breakdown (2 profiled micro-steps, the second reported)");
    case.profiled_step()?;
    let p = case.profiled_step()?;
    drop(case);
    let record = &mut run.record;
    record.train_optimizer_issue_ms = Some(p.optim_issue);
    if let Some(m) = p.memory {
        let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
        for (k, v) in [
            (MEMORY_IN_USE, mib(m.in_use)),
            (MEMORY_RESERVED, mib(m.reserved)),
        ] {
            record.burn_memory_mib.insert(k.to_string(), v);
        }
    }
    for (k, v) in [
        ("forward and loss", p.forward),
        ("backward: convolution data gradients", p.data),
        ("backward: convolution weight gradients", p.weight),
        (
            "backward: everything else",
            (p.backward - p.data - p.weight).max(0.0),
        ),
        ("gradients to the optimizer", p.grads),
        ("Adam step", p.optim),
    ] {
        record.train_breakdown_ms.insert(k.to_string(), v);
    }
    run.save("the training breakdown");
    run.say(&format!(
        "training breakdown: forward {:.1} ms, backward {:.1} ms (convolution data gradients {:.1}, weight gradients {:.1}), gradients to the optimizer {:.1} ms, Adam {:.1} ms ({:.1} ms of it to enqueue)",
        p.forward, p.backward, p.data, p.weight, p.grads, p.optim, p.optim_issue
    ));
    Ok(())
}
