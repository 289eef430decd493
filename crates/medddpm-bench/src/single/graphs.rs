//! The training micro-step replayed from a CUDA graph (CUDA only): after the steps run as they
//! come, the same case again through [`MicroStepGraphs`], timed, traced, and one micro-step
//! replayed against the same micro-step run as it comes, gradient by gradient.

use burn::module::{ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Distribution, Tensor};
use medddpm_backend::KernelAutodiffBackend;
use medddpm_train::{micro_step, MicroBatch, MicroStepGraphs};

use super::case::Case as _;
use super::case::{step, timed_steps};
use super::training::Training;
use super::{median, Run};
use crate::error::Result;
use crate::record::GraphRun;

/// Untimed micro-steps before a graph replays: two warm-up steps and the capture.
const GRAPH_START: usize = 3;

/// The micro-steps replayed from a graph into the record (`train_graph`).
pub(super) fn measure<B: KernelAutodiffBackend>(
    run: &mut Run<B>,
    case: &mut Training<B>,
) -> Result<()> {
    run.say("training micro-steps replayed from a CUDA graph (two warm-up steps, the capture)");
    // The pools' free buffers of the steps run as they come go back first: the graph's
    // stream has a pool of its own.
    B::memory_cleanup(case.device);
    case.graphs = Some(MicroStepGraphs::new(true));
    for _ in 0..GRAPH_START {
        step(case)?;
    }
    let status = case.graphs.as_ref().expect("just set").status();
    let mut record = GraphRun {
        step_median_ms: None,
        issue_median_ms: None,
        nodes: status.nodes,
        node_kinds: status.node_kinds.clone(),
        threads_ms: Default::default(),
        off: status.off.clone(),
        max_abs_diff: None,
        values_differing: None,
        gpu: None,
    };
    if let Some(why) = status.off {
        run.say(&format!("CUDA graphs off: {why}"));
    } else {
        case.host_phases.clear();
        let (timed, _) = timed_steps(case, 0, run.config.steps, || {
            crate::threads::reset();
            Ok(())
        })?;
        record.threads_ms = crate::threads::per_step(timed.len());
        let ms: Vec<f64> = timed.iter().map(|s| s.ms).collect();
        let issue: Vec<f64> = timed.iter().map(|s| s.output).collect();
        record.step_median_ms = Some(median(&ms));
        record.issue_median_ms = Some(median(&issue));
        record.gpu = run.trace_gpu(case, "replayed training micro-step")?;
        let (diff, differing) = replay_against_eager(case)?;
        record.max_abs_diff = Some(diff);
        record.values_differing = Some(differing);
        let phase = |i: usize| median(&case.host_phases.iter().map(|p| p[i]).collect::<Vec<_>>());
        run.say(&format!(
            "host per replayed step: {:.2} ms in all, {:.2} in the micro-step, {:.2} after it",
            phase(0),
            phase(1),
            phase(2)
        ));
        run.say(&format!(
            "graph nodes: {}; per replayed step: {}",
            record.node_kinds,
            record
                .threads_ms
                .iter()
                .map(|(k, v)| format!("{k} {v:.1} ms"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        run.say(&format!(
            "replayed training micro-step median {:.2} ms over {} steps, {:.2} ms of it to enqueue \
             ({} graph nodes); one micro-step replayed against run as it comes: {differing} \
             values of the loss and gradients differ, largest difference {diff:e}",
            median(&ms),
            ms.len(),
            median(&issue),
            record.nodes
        ));
    }
    case.graphs = None;
    run.record.train_graph = Some(record);
    run.save("the replayed training micro-steps");
    Ok(())
}

/// One micro-step on one batch, replayed and run as it comes: the largest absolute difference
/// of the loss and gradients, and how many of their values differ.
fn replay_against_eager<B: KernelAutodiffBackend>(case: &mut Training<B>) -> Result<(f64, usize)> {
    let model = case
        .model
        .take()
        .expect("the model is back after each step");
    let work = case.optim.working_model(&model, case.compute_dtype);
    let noise = Tensor::<B, 5>::random(case.x0.dims(), Distribution::Normal(0.0, 1.0), case.device);
    let batch = || MicroBatch {
        x0: case.x0.clone(),
        cond: Some(case.cond.clone()),
        timesteps: case.timesteps.clone(),
        noise: noise.clone(),
    };
    let how = (&case.objective, 1.0, case.checkpointing);
    let graphs = case.graphs.as_mut().expect("graphs replay");
    let (replayed, replayed_loss) = graphs.micro_step(&work, &case.schedule, batch(), how);
    let (eager, eager_loss) = micro_step(&work, &case.schedule, batch(), how.0, how.1, how.2);
    let mut compare = Compare::<B> {
        a: &replayed,
        b: &eager,
        diff: 0.0,
        differing: 0,
        _b: core::marker::PhantomData,
    };
    compare.values(values(replayed_loss.inner()), values(eager_loss.inner()));
    burn::module::Module::visit(&work, &mut compare);
    let out = (compare.diff, compare.differing);
    drop(work);
    case.model = Some(model);
    case.sync()?;
    Ok(out)
}

fn values<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .expect("f32 data")
}

/// Two sets of gradients compared parameter by parameter (a missing gradient on one side
/// counts as all its values differing).
struct Compare<'a, B: AutodiffBackend> {
    a: &'a GradientsParams,
    b: &'a GradientsParams,
    diff: f64,
    differing: usize,
    _b: core::marker::PhantomData<B>,
}

impl<B: AutodiffBackend> Compare<'_, B> {
    fn values(&mut self, a: Vec<f32>, b: Vec<f32>) {
        if a.len() != b.len() {
            self.differing += a.len().max(b.len());
            return;
        }
        for (x, y) in a.iter().zip(&b) {
            if x.to_bits() != y.to_bits() {
                self.differing += 1;
                self.diff = self.diff.max(f64::from((x - y).abs()));
            }
        }
    }
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Compare<'_, B> {
    fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<B, D>>) {
        let a = self.a.get::<B::InnerBackend, D>(p.id).map(values);
        let b = self.b.get::<B::InnerBackend, D>(p.id).map(values);
        match (a, b) {
            (Some(a), Some(b)) => self.values(a, b),
            (None, None) => {}
            (a, b) => self.differing += a.or(b).map_or(0, |v| v.len()),
        }
    }
}
