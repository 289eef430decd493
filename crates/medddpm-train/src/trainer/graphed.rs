//! The training micro-step replayed from a CUDA graph (`medddpm_kernels::graph`): forward pass,
//! loss and backward pass recorded once per batch shape after two warm-up steps, then each
//! micro-step copies its batch, its timesteps' coefficients and sinusoid, and the working
//! weights into the graph's buffers, replays it, and gets back the loss and the gradients.
//!
//! Everything the step reads that changes between steps is an input: the weights too (Adam
//! writes new tensors every step), so a replay copies them in (a few tens of MB on the GPU).
//! The loss divisor is part of the graph (a new divisor, f16's loss scale changing, is a new
//! graph). Activation checkpointing is not captured: its backward pass runs each block's
//! recomputation as a graph of its own from the host, and steps with it run as they come.

use std::cell::RefCell;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::Tensor;
use medddpm_diffusion::{training_loss_at, CosineSchedule};
use medddpm_kernels::primitive::{float, tensor};
use medddpm_kernels::StepGraphs;
use medddpm_unet::{ActivationCheckpointing, GraphStatus, KernelAutodiffBackend, UNet};

use super::step::{micro_step, MicroBatch};
use crate::DiffusionConfig;

type Inner<B> = <B as AutodiffBackend>::InnerBackend;
type Prim<B> = FloatTensor<Inner<B>>;

/// A parameter as the graph takes it: its id, shape and whether it has a gradient.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Slot {
    id: ParamId,
    shape: Vec<usize>,
    require_grad: bool,
}

/// Which graph a micro-step replays: the batch's shapes and the loss divisor.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    x0: [usize; 5],
    cond: Option<[usize; 5]>,
    divisor: u64,
}

/// What a graph is kept with: the parameters it takes, and the indices of those with a
/// gradient, in the order the graph returns them.
type Kept = (Vec<Slot>, Vec<usize>);

/// CUDA graphs of the training micro-step, one per batch shape and divisor.
pub struct MicroStepGraphs<B: KernelAutodiffBackend> {
    graphs: StepGraphs<Inner<B>, Key, Kept>,
}

impl<B: KernelAutodiffBackend> MicroStepGraphs<B> {
    /// Graphs when `enabled` (else every step as it comes, the status saying it was asked).
    pub fn new(enabled: bool) -> Self {
        Self {
            graphs: StepGraphs::new(enabled),
        }
    }

    /// What the graphs did so far.
    pub fn status(&self) -> GraphStatus {
        self.graphs.status().clone()
    }

    /// [`micro_step`], warmed up, captured or replayed: the same gradients and loss.
    pub fn micro_step(
        &mut self,
        work: &UNet<B>,
        schedule: &CosineSchedule,
        batch: MicroBatch<B>,
        (objective, divisor, checkpointing): (&DiffusionConfig, f64, ActivationCheckpointing),
    ) -> (GradientsParams, Tensor<B, 1>) {
        if checkpointing != ActivationCheckpointing::None && !self.graphs.is_off() {
            self.graphs.turn_off(format!(
                "activation checkpointing ({checkpointing}) is not captured"
            ));
        }
        if self.graphs.is_off() {
            return micro_step(work, schedule, batch, objective, divisor, checkpointing);
        }
        let key = Key {
            x0: batch.x0.dims(),
            cond: batch.cond.as_ref().map(|c| c.dims()),
            divisor: divisor.to_bits(),
        };
        let (slots, weights) = params_of(work);
        // Another model's parameters: a graph of its own after a warm-up.
        if self
            .graphs
            .kept(&key)
            .is_some_and(|(kept, _)| *kept != slots)
        {
            self.graphs.forget(&key);
        }
        let inputs = step_inputs(work, schedule, &batch, weights);
        let graded = RefCell::new(Vec::new());
        let has_cond = key.cond.is_some();
        let mut step = |inputs: Vec<Prim<B>>| {
            let (loss, grads, with_grad) =
                graph_step(work, &slots, inputs, has_cond, (objective, divisor));
            *graded.borrow_mut() = with_grad;
            std::iter::once(loss).chain(grads).collect()
        };
        let device = batch.x0.device();
        let keep = || (slots.clone(), graded.borrow().clone());
        match self
            .graphs
            .run(key.clone(), &device, inputs, &mut step, keep)
        {
            Ok(outputs) => {
                // Replayed, the step did not run: the graph's own list says which slots.
                let graded = match self.graphs.kept(&key) {
                    Some((_, kept)) => kept.clone(),
                    None => graded.into_inner(),
                };
                gradients(&slots, &graded, outputs)
            }
            Err(_) => micro_step(work, schedule, batch, objective, divisor, checkpointing),
        }
    }
}

/// The graph's inputs: images, condition, noise, the timesteps' coefficients and sinusoid, then
/// the weights.
fn step_inputs<B: KernelAutodiffBackend>(
    work: &UNet<B>,
    schedule: &CosineSchedule,
    batch: &MicroBatch<B>,
    weights: Vec<Prim<B>>,
) -> Vec<Prim<B>> {
    let device = batch.x0.device();
    let c = schedule.coefficients::<Inner<B>, 5>(&batch.timesteps, &device);
    let sinusoid = work.sinusoid(&batch.timesteps, &device).inner();
    let mut inputs = vec![float(batch.x0.clone().inner())];
    inputs.extend(batch.cond.clone().map(|c| float(c.inner())));
    inputs.extend([
        float(batch.noise.clone().inner()),
        float(c.signal),
        float(c.noise),
        float(sinusoid),
    ]);
    inputs.extend(weights);
    inputs
}

/// The micro-step on the graph's inputs: the loss, the gradients of the slots that have one
/// (in slot order) and which slots those are.
fn graph_step<B: KernelAutodiffBackend>(
    work: &UNet<B>,
    slots: &[Slot],
    inputs: Vec<Prim<B>>,
    has_cond: bool,
    (objective, divisor): (&DiffusionConfig, f64),
) -> (Prim<B>, Vec<Prim<B>>, Vec<usize>) {
    let mut it = inputs.into_iter();
    let mut next5 = || Tensor::<B, 5>::from_inner(tensor(it.next().expect("an input")));
    let x0 = next5();
    let cond = has_cond.then(&mut next5);
    let noise = next5();
    let c = medddpm_diffusion::Coefficients {
        signal: next5(),
        noise: next5(),
    };
    let sinusoid = Tensor::<B, 2>::from_inner(tensor(it.next().expect("the sinusoid")));
    let module = with_params(work, slots, it.collect());
    let out = training_loss_at(
        |input| module.forward_sinusoid(input, sinusoid),
        (x0, cond, noise),
        &c,
        (objective.loss, objective.prediction),
    );
    let grads = out.loss.clone().div_scalar(divisor).backward();
    let grads = GradientsParams::from_grads(grads, &module);
    let mut with_grad = Vec::new();
    let mut values = Vec::new();
    for (i, slot) in slots.iter().enumerate() {
        if let Some(g) = grad_of::<B>(&grads, slot) {
            with_grad.push(i);
            values.push(g);
        }
    }
    (float(out.loss.inner()), values, with_grad)
}

/// The loss (on the autodiff backend, as [`micro_step`] returns it) and the gradients under the
/// slots' ids from a graph's outputs.
fn gradients<B: KernelAutodiffBackend>(
    slots: &[Slot],
    graded: &[usize],
    outputs: Vec<Prim<B>>,
) -> (GradientsParams, Tensor<B, 1>) {
    let mut it = outputs.into_iter();
    let loss = Tensor::<B, 1>::from_inner(tensor(it.next().expect("the loss")));
    let mut grads = GradientsParams::new();
    for (&i, g) in graded.iter().zip(it) {
        let slot = &slots[i];
        match slot.shape.len() {
            1 => grads.register::<Inner<B>, 1>(slot.id, tensor(g)),
            2 => grads.register::<Inner<B>, 2>(slot.id, tensor(g)),
            3 => grads.register::<Inner<B>, 3>(slot.id, tensor(g)),
            4 => grads.register::<Inner<B>, 4>(slot.id, tensor(g)),
            5 => grads.register::<Inner<B>, 5>(slot.id, tensor(g)),
            r => unreachable!("a parameter of rank {r}"),
        }
    }
    (grads, loss)
}

fn grad_of<B: KernelAutodiffBackend>(grads: &GradientsParams, slot: &Slot) -> Option<Prim<B>> {
    match slot.shape.len() {
        1 => grads.get::<Inner<B>, 1>(slot.id).map(float),
        2 => grads.get::<Inner<B>, 2>(slot.id).map(float),
        3 => grads.get::<Inner<B>, 3>(slot.id).map(float),
        4 => grads.get::<Inner<B>, 4>(slot.id).map(float),
        5 => grads.get::<Inner<B>, 5>(slot.id).map(float),
        _ => None,
    }
}

/// `work`'s parameters in module order: what each is, and its values.
fn params_of<B: KernelAutodiffBackend>(work: &UNet<B>) -> (Vec<Slot>, Vec<Prim<B>>) {
    struct Collect<B: KernelAutodiffBackend>(Vec<Slot>, Vec<Prim<B>>);
    impl<B: KernelAutodiffBackend> ModuleVisitor<B> for Collect<B> {
        fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<B, D>>) {
            let t = p.val();
            self.0.push(Slot {
                id: p.id,
                shape: t.dims().to_vec(),
                require_grad: t.is_require_grad(),
            });
            self.1.push(float(t.inner()));
        }
    }
    let mut c = Collect(Vec::new(), Vec::new());
    work.visit(&mut c);
    (c.0, c.1)
}

/// `work` with its parameters replaced, in module order, by `values` (new leaves under the same
/// ids, tracked where the slot says).
fn with_params<B: KernelAutodiffBackend>(
    work: &UNet<B>,
    slots: &[Slot],
    values: Vec<Prim<B>>,
) -> UNet<B> {
    struct Load<'a, B: KernelAutodiffBackend> {
        slots: std::slice::Iter<'a, Slot>,
        values: std::vec::IntoIter<Prim<B>>,
    }
    impl<B: KernelAutodiffBackend> ModuleMapper<B> for Load<'_, B> {
        fn map_float<const D: usize>(&mut self, p: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
            let slot = self.slots.next().expect("a slot per parameter");
            let value = self.values.next().expect("a value per parameter");
            let (id, _, mapper) = p.consume();
            debug_assert_eq!(id, slot.id);
            let leaf = Tensor::<B, D>::from_inner(tensor(value));
            let leaf = match slot.require_grad {
                true => leaf.require_grad(),
                false => leaf,
            };
            Param::from_mapped_value(id, leaf, mapper)
        }
    }
    work.clone().map(&mut Load::<B> {
        slots: slots.iter(),
        values: values.into_iter(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trainer::random_micro_batch;
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::backend::Backend;
    use medddpm_unet::UNetConfig;

    type B = Autodiff<Flex>;

    /// A gradient's values, flattened.
    fn flat(t: Prim<B>) -> burn::tensor::TensorData {
        use burn::tensor::ops::FloatTensorOps;
        use burn::tensor::TensorMetadata;
        let n = t.shape().num_elements();
        tensor::<Flex, 1>(Flex::float_reshape(t, [n].into())).into_data()
    }

    /// On the CPU (no graphs) the graphed micro-step runs its two warm-up steps through the
    /// graph's own packing of inputs and outputs, then turns itself off quietly: every step
    /// gives the loss and gradients of [`micro_step`], value for value.
    #[test]
    fn graphed_micro_steps_equal_micro_steps_and_the_cpu_turns_them_off() {
        let _turn = medddpm_diffusion::autodiff_turn();
        let device = Default::default();
        B::seed(&device, 3);
        let model: UNet<B> =
            medddpm_unet::randomize_weights(UNetConfig::tiny().init(&device).unwrap());
        let schedule = CosineSchedule::new(100);
        let objective = DiffusionConfig::default();
        let batch = |step: u64| random_micro_batch::<B>(&device, 50 + step, 7 + 30 * step as usize);
        let how = (&objective, 2.0, ActivationCheckpointing::None);
        let mut graphs = MicroStepGraphs::<B>::new(true);
        let (slots, _) = params_of(&model);
        for step in 0..(medddpm_kernels::graph::WARM_UP as u64 + 2) {
            let (got, got_loss) = graphs.micro_step(&model, &schedule, batch(step), how);
            let (want, want_loss) = micro_step(&model, &schedule, batch(step), how.0, how.1, how.2);
            assert_eq!(got_loss.into_data(), want_loss.into_data(), "step {step}");
            let mut compared = 0;
            for slot in &slots {
                let (g, w) = (grad_of::<B>(&got, slot), grad_of::<B>(&want, slot));
                assert_eq!(g.is_some(), w.is_some(), "step {step}: {:?}", slot.id);
                if let (Some(g), Some(w)) = (g, w) {
                    assert_eq!(flat(g), flat(w), "step {step}: {:?}", slot.id);
                    compared += 1;
                }
            }
            assert!(compared > 20, "step {step}: {compared} gradients");
        }
        let status = graphs.status();
        assert_eq!((status.captured, status.replays), (0, 0));
        assert!(status.unsupported && status.requested);
        assert_eq!(status.summary(), None);
    }
}
