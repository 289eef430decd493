//! The sampling step as a measured case: the network's forward pass and the DDPM update, no
//! autodiff, walking down the schedule from its last timestep; and the forward pass split by
//! operation class.

use std::cell::RefCell;

use burn::module::AutodiffModule;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Distribution, ElementConversion, Tensor};
use medddpm_backend::KernelAutodiffBackend;
use medddpm_diffusion::{network_input, DdpmSampler};
use medddpm_unet::{cast_compute_params, ForwardGraphs, OpProfile, UNet};

use super::case::{back_to_back, step, timed_steps, Case};
use super::{median, sync, Inputs, Run, TIMESTEPS};
use crate::error::{Error, Result};
use crate::record::GraphRun;

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
    /// The network's calls through CUDA graphs (the steps after the ones run as they come).
    graphs: Option<ForwardGraphs<Inner<A>>>,
    steps_done: usize,
    batch: usize,
    device: &'a A::Device,
}

impl<'a, A: KernelAutodiffBackend> Sampling<'a, A> {
    /// The inference copy of the network and a pure-noise start.
    pub(super) fn prepare(inputs: &Inputs<A>, run: &Run<'a, A>) -> Self {
        let unet = &run.config.unet;
        let [d, h, w] = run.config.workload.size;
        let b = run.config.workload.batch;
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
            graphs: None,
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
        let timesteps = vec![t; self.batch];
        let eps = match &self.graphs {
            Some(graphs) => graphs.forward(&self.model, input, &timesteps),
            None => self.model.forward(input, &timesteps),
        };
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
    run.record.first_sample_step_s = Some(run.first_step(case, "sampling step", "kernels")?);
    let (steps, _) = timed_steps(case, run.config.warmup, run.config.steps, || Ok(()))?;
    let sample_ms: Vec<f64> = steps.iter().map(|s| s.ms).collect();
    // The chain walks down the schedule: back to back only while timesteps remain.
    if case.steps_done + 2 * run.config.steps + super::TRACED_STEPS < TIMESTEPS {
        run.record.sample_back_to_back_ms = Some(back_to_back(case, run.config.steps)?);
    }
    // The chain walks down the schedule: trace only while timesteps remain.
    if run.traces_gpu() && case.steps_done + super::TRACED_STEPS < TIMESTEPS {
        run.record.sample_gpu = run.trace_gpu(case, "sampling step")?;
    }
    if run.traces_gpu() && run.config.cuda_graphs {
        run.record.sample_graph = Some(graph_steps(run, case)?);
        run.save("the replayed sampling steps");
    }
    let x_t = case.x_t.take().expect("the chain's sample");
    let largest: f32 = x_t.abs().max().into_scalar().elem();
    if !largest.is_finite() {
        return Err(Error::NonFiniteSamples);
    }
    run.record.sample_step_median_ms = Some(median(&sample_ms));
    run.save("the sampling steps");
    run.say(&format!(
        "sampling step median {:.2} ms over {} steps; back to back {:.2} ms a step",
        median(&sample_ms),
        sample_ms.len(),
        run.record.sample_back_to_back_ms.unwrap_or(f64::NAN),
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
    let [d, h, w] = run.config.workload.size;
    let profile = RefCell::new(OpProfile::default());
    let input = Tensor::<A::InnerBackend, 5>::random(
        [
            run.config.workload.batch,
            run.config.unet.in_channels,
            d,
            h,
            w,
        ],
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

/// Untimed calls before a graph replays: the warm-up passes and the capture.
const GRAPH_START: usize = 3;

/// The sampling steps again with the network replayed from a CUDA graph (after its warm-up and
/// capture, untimed), their GPU time, and one network call replayed against the same call run
/// as it comes.
fn graph_steps<A: KernelAutodiffBackend>(
    run: &mut Run<A>,
    case: &mut Sampling<A>,
) -> Result<GraphRun> {
    let steps = run.config.steps;
    let mut record = GraphRun {
        step_median_ms: None,
        issue_median_ms: None,
        nodes: 0,
        node_kinds: String::new(),
        threads_ms: Default::default(),
        off: None,
        max_abs_diff: None,
        values_differing: None,
        gpu: None,
    };
    if case.steps_done + GRAPH_START + steps + 1 + super::TRACED_STEPS >= TIMESTEPS {
        record.off = Some("too few timesteps left in the chain".into());
        return Ok(record);
    }
    run.say("sampling steps replayed from a CUDA graph (two warm-up passes, the capture)");
    case.graphs = Some(ForwardGraphs::new(true));
    for _ in 0..GRAPH_START {
        step(case)?;
    }
    let status = case.graphs.as_ref().expect("just set").status();
    record.nodes = status.nodes;
    record.node_kinds = status.node_kinds.clone();
    if let Some(why) = status.off {
        run.say(&format!("CUDA graphs off: {why}"));
        record.off = Some(why);
        case.graphs = None;
        return Ok(record);
    }
    let (timed, _) = timed_steps(case, 0, steps, || Ok(()))?;
    let ms: Vec<f64> = timed.iter().map(|s| s.ms).collect();
    record.step_median_ms = Some(median(&ms));
    record.gpu = run.trace_gpu(case, "replayed sampling step")?;
    let (diff, differing) = replay_against_eager(case)?;
    record.max_abs_diff = Some(diff);
    record.values_differing = Some(differing);
    run.say(&format!(
        "replayed sampling step median {:.2} ms over {steps} steps ({} graph nodes); one call \
         replayed against run as it comes: {differing} values differ, largest difference {diff:e}",
        median(&ms),
        record.nodes
    ));
    case.graphs = None;
    Ok(record)
}

/// The network on the chain's current input, replayed and run as it comes: the largest absolute
/// difference and how many values differ.
fn replay_against_eager<A: KernelAutodiffBackend>(case: &Sampling<A>) -> Result<(f64, usize)> {
    let x_t = case.x_t.clone().expect("the chain holds its sample");
    let input = network_input(x_t, Some(case.cond.clone()));
    let timesteps = vec![TIMESTEPS - 1 - case.steps_done; case.batch];
    let graphs = case.graphs.as_ref().expect("graphs replay");
    let replayed = graphs.forward(&case.model, input.clone(), &timesteps);
    let eager = case.model.forward(input, &timesteps);
    let values = |t: Tensor<Inner<A>, 5>| -> Vec<f32> {
        t.into_data()
            .convert::<f32>()
            .to_vec::<f32>()
            .expect("f32 data")
    };
    let (a, b) = (values(replayed), values(eager));
    let differing = a
        .iter()
        .zip(&b)
        .filter(|(x, y)| x.to_bits() != y.to_bits())
        .count();
    let diff = a
        .iter()
        .zip(&b)
        .map(|(x, y)| f64::from((x - y).abs()))
        .fold(0.0, f64::max);
    case.sync()?;
    Ok((diff, differing))
}
