//! The sampling step as a measured case: the network's forward pass and the DDPM update, no
//! autodiff, walking down the schedule from its last timestep; and the forward pass split by
//! operation class.

use std::cell::RefCell;

use burn::module::AutodiffModule;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Distribution, ElementConversion, Tensor};
use medddpm_backend::KernelAutodiffBackend;
use medddpm_diffusion::{network_input, DdpmSampler};
use medddpm_unet::{cast_compute_params, OpProfile, UNet};

use super::case::{first_step, timed_steps, Case};
use super::{median, sync, Inputs, Run, TIMESTEPS};
use crate::error::{Error, Result};

/// Autodiff's inner backend: sampling runs without autodiff.
type Inner<A> = <A as AutodiffBackend>::InnerBackend;

/// The sampling chain of one batch on backend `A`'s inner backend.
pub(super) struct Sampling<'a, A: KernelAutodiffBackend> {
    /// The network in the compute precision.
    model: UNet<Inner<A>>,
    cond: Tensor<Inner<A>, 5>,
    sampler: DdpmSampler,
    /// The chain's current sample (taken while a step runs).
    x_t: Option<Tensor<Inner<A>, 5>>,
    steps_done: usize,
    batch: usize,
    device: &'a A::Device,
}

impl<'a, A: KernelAutodiffBackend> Sampling<'a, A> {
    /// The inference copy of the network and a pure-noise start.
    pub(super) fn prepare(inputs: &Inputs<A>, run: &Run<'a, A>) -> Self {
        let unet = &run.config.unet;
        let [d, h, w] = run.config.size;
        let b = run.config.batch;
        let model = cast_compute_params(inputs.model.valid(), run.env.compute_dtype());
        let cond = inputs.cond.clone().inner();
        let x_t = Tensor::<Inner<A>, 5>::random(
            [b, unet.out_channels, d, h, w],
            Distribution::Normal(0.0, 1.0),
            run.device,
        );
        Self {
            model,
            cond,
            sampler: DdpmSampler::new(inputs.schedule.clone()),
            x_t: Some(x_t),
            steps_done: 0,
            batch: b,
            device: run.device,
        }
    }
}

impl<A: KernelAutodiffBackend> Case for Sampling<'_, A> {
    type Output = ();

    /// One step down the schedule, from timestep 249 on.
    fn execute(&mut self) -> Result<()> {
        let t = TIMESTEPS - 1 - self.steps_done;
        let x_t = self
            .x_t
            .take()
            .expect("the chain holds its sample between steps");
        let input = network_input(x_t.clone(), Some(self.cond.clone()));
        let eps = self.model.forward(input, &vec![t; self.batch]);
        let noise = Tensor::random(x_t.shape(), Distribution::Normal(0.0, 1.0), self.device);
        self.x_t = Some(self.sampler.step(eps, t, x_t, noise).prev_sample);
        self.steps_done += 1;
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        sync::<Inner<A>>(self.device)
    }
}

/// The first sampling step, then the timed ones: their times into the record.
pub(super) fn measure<A: KernelAutodiffBackend>(
    run: &mut Run<A>,
    case: &mut Sampling<A>,
) -> Result<()> {
    run.say("first sampling step (compiles and autotunes kernels)");
    let first = first_step(case)?;
    run.record.first_sample_step_s = Some(first);
    run.say(&format!(
        "first sampling step took {first:.2} s; timing sampling steps"
    ));
    let (steps, _) = timed_steps(case, run.config.warmup, run.config.steps, || Ok(()))?;
    let sample_ms: Vec<f64> = steps.iter().map(|s| s.ms).collect();
    // The chain walks down the schedule: trace only while timesteps remain.
    if run.traces_gpu() && case.steps_done + super::TRACED_STEPS < TIMESTEPS {
        run.record.sample_gpu = run.trace_gpu(case, "sampling step")?;
    }
    let x_t = case.x_t.take().expect("the chain's sample");
    let largest: f32 = x_t.abs().max().into_scalar().elem();
    if !largest.is_finite() {
        return Err(Error::NonFiniteSamples);
    }
    run.record.sample_step_median_ms = Some(median(&sample_ms));
    run.save("the sampling steps");
    run.say(&format!(
        "sampling step median {:.2} ms over {} steps",
        median(&sample_ms),
        sample_ms.len()
    ));
    Ok(())
}

/// The forward pass split by operation class (two profiled forwards, each operation
/// synchronised on its own), into the record.
pub(super) fn forward_breakdown<A: KernelAutodiffBackend>(
    run: &mut Run<A>,
    case: &Sampling<A>,
    timesteps: &[usize],
) -> Result<()> {
    run.say("per-operation breakdown (2 profiled forwards)");
    let [d, h, w] = run.config.size;
    let profile = RefCell::new(OpProfile::default());
    let input = Tensor::<A::InnerBackend, 5>::random(
        [run.config.batch, run.config.unet.in_channels, d, h, w],
        Distribution::Normal(0.0, 1.0),
        run.device,
    );
    for _ in 0..2 {
        let out = case
            .model
            .forward_profiled(input.clone(), timesteps, &profile);
        sync::<A::InnerBackend>(run.device)?;
        drop(out);
    }
    let p = profile.into_inner().scaled(2);
    if p.sync_failed {
        return Err(Error::ProfileSync);
    }
    run.record.breakdown_ms = p.ms.clone();
    run.save("the per-operation breakdown");
    run.say(&format!(
        "breakdown: {}",
        p.ms.iter()
            .map(|(k, v)| format!("{k} {v:.1} ms"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    Ok(())
}
