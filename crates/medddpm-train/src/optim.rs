//! Adam with the whole model's update as one backend operation
//! ([`medddpm_kernels::KernelBackend::adam_steps`]: a kernel launch per few dozen parameter
//! tensors on the GPU backends), on f32 master weights, writing the 16-bit working copies of a
//! mixed-precision forward pass in the same operation.
//!
//! The arithmetic, the state and its records are burn's Adam's (`burn::optim::Adam` without
//! weight decay or AMSGrad), so checkpoints written with either load into the other; only the
//! number of operations per step changes (about a dozen per parameter tensor in burn's Adam,
//! one per tensor in this optimizer's first version, which took the H100's bf16 optimizer phase
//! from 15.7 to 9.9 ms, and now one for all), and in bf16 the casts between the master weights
//! and the network (one per parameter tensor in the forward pass and one per gradient in the
//! backward) are gone.

use std::collections::HashMap;
use std::marker::PhantomData;

use burn::module::{AutodiffModule, ModuleMapper, Param, ParamId, ParamMapper};
use burn::optim::adaptor::{GradAdaptor, OptimizerAdaptor};
use burn::optim::record::AdaptorRecord;
use burn::optim::{
    AdamState, AdaptiveMomentumState, GradientsParams, LearningRate, MultiGradientsParams,
    Optimizer, SimpleOptimizer,
};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Tensor, TensorMetadata, TensorPrimitive};
use medddpm_kernels::{AdamOutput, AdamStep, AdamTensors, KernelBackend};

/// Adam's hyper-parameters (PyTorch's names and defaults: betas 0.9 and 0.999, eps 1e-8).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FusedAdam {
    /// Decay of the first moment.
    pub beta_1: f32,
    /// Decay of the second moment.
    pub beta_2: f32,
    /// Added to the square root of the second moment.
    pub epsilon: f32,
}

impl Default for FusedAdam {
    fn default() -> Self {
        Self {
            beta_1: 0.9,
            beta_2: 0.999,
            epsilon: 1e-8,
        }
    }
}

impl FusedAdam {
    /// The experiment's Adam (`[train] adam_beta1`, `adam_beta2`, `adam_epsilon`).
    pub fn from_settings(settings: &crate::TrainSettings) -> Self {
        Self {
            beta_1: settings.adam_beta1,
            beta_2: settings.adam_beta2,
            epsilon: settings.adam_epsilon,
        }
    }

    /// The scalars of the update numbered `time` (1-based) at learning rate `lr`.
    fn at(&self, lr: LearningRate, time: usize) -> AdamStep {
        AdamStep {
            lr,
            beta_1: self.beta_1,
            beta_2: self.beta_2,
            epsilon: self.epsilon,
            time,
        }
    }

    /// The optimizer for module `M` trained on autodiff backend `B`.
    pub fn init<B, M>(self) -> FusedAdamOptimizer<M, B>
    where
        B: AutodiffBackend<InnerBackend: KernelBackend>,
        M: AutodiffModule<B>,
    {
        FusedAdamOptimizer {
            adam: self,
            records: Default::default(),
            copies: HashMap::new(),
            handed_out: HashMap::new(),
            prepared: None,
            _module: PhantomData,
        }
    }
}

impl<B: KernelBackend> SimpleOptimizer<B> for FusedAdam {
    type State<const D: usize> = AdamState<B, D>;

    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<B, D>,
        grad: Tensor<B, D>,
        state: Option<Self::State<D>>,
    ) -> (Tensor<B, D>, Option<Self::State<D>>) {
        let (time, moment_1, moment_2) = next_moments(state, &tensor);
        let [tensor, moment_1, moment_2] =
            medddpm_kernels::adam_step(tensor, grad, moment_1, moment_2, self.at(lr, time));
        let momentum = AdaptiveMomentumState::new(time, moment_1, moment_2);
        (tensor, Some(AdamState::new(momentum)))
    }

    fn to_device<const D: usize>(mut state: Self::State<D>, device: &B::Device) -> Self::State<D> {
        state.momentum = state.momentum.to_device(device);
        state
    }
}

/// The number of the next update and the moments it starts from: burn's first step starts
/// from zero moments (0 * beta + (1 - beta) g).
fn next_moments<B: KernelBackend, const D: usize>(
    state: Option<AdamState<B, D>>,
    param: &Tensor<B, D>,
) -> (usize, Tensor<B, D>, Tensor<B, D>) {
    match state {
        Some(state) => (
            state.momentum.time + 1,
            state.momentum.moment_1,
            state.momentum.moment_2,
        ),
        None => (1, param.zeros_like(), param.zeros_like()),
    }
}

/// [`FusedAdam`] over a module's parameters (what burn's [`OptimizerAdaptor`] does, with the
/// same record, so checkpoints of either load into the other). A parameter whose gradient
/// comes in a lower dtype than its own (a bf16 forward pass through
/// [`medddpm_unet::working_params`]) also gets its updated value in that dtype, written by the
/// same kernel; [`FusedAdamOptimizer::working_model`] hands those copies to the next forward
/// pass.
pub struct FusedAdamOptimizer<M, B>
where
    B: AutodiffBackend<InnerBackend: KernelBackend>,
    M: AutodiffModule<B>,
{
    adam: FusedAdam,
    records: Records<M, B>,
    /// Working copies written by the last step, by parameter.
    copies: HashMap<ParamId, FloatTensor<B::InnerBackend>>,
    /// The copies [`FusedAdamOptimizer::working_model`] handed out, kept so that the next
    /// update consumes them (see [`FusedAdamOptimizer::step_common`]).
    handed_out: HashMap<ParamId, FloatTensor<B::InnerBackend>>,
    /// The next step's working model, made ahead ([`FusedAdamOptimizer::prepare_working_model`]).
    prepared: Option<(DType, M)>,
    _module: PhantomData<M>,
}

/// burn's Adam records, by parameter (the type burn's [`OptimizerAdaptor`] keeps).
pub(crate) type Records<M, B> = <OptimizerAdaptor<FusedAdam, M, B> as Optimizer<M, B>>::Record;

impl<M, B> Clone for FusedAdamOptimizer<M, B>
where
    B: AutodiffBackend<InnerBackend: KernelBackend>,
    M: AutodiffModule<B>,
{
    fn clone(&self) -> Self {
        Self {
            adam: self.adam,
            records: self.records.clone(),
            copies: self.copies.clone(),
            handed_out: self.handed_out.clone(),
            prepared: self.prepared.clone(),
            _module: PhantomData,
        }
    }
}

impl<M, B> FusedAdamOptimizer<M, B>
where
    B: AutodiffBackend<InnerBackend: KernelBackend>,
    M: AutodiffModule<B>,
{
    /// The Adam state by parameter, as a checkpoint stores it.
    pub(crate) fn records(&self) -> &Records<M, B> {
        &self.records
    }

    /// The module a forward pass in `dtype` runs (see [`medddpm_unet::working_params`]), with
    /// the working copies the last [`Optimizer::step`] wrote: call it with the module that step
    /// returned. Parameters without a copy (before the first step, after a resume) are cast.
    ///
    /// Drop the working model before the next [`Optimizer::step`] (after its backward pass):
    /// that step then consumes the copies and the parameters it replaces instead of leaving
    /// them to be freed one by one afterwards, which on burn's fused backends is one queued
    /// operation per tensor (about 10 ms of host time per 246 tensors on the H100's host).
    pub fn working_model(&mut self, model: &M, dtype: DType) -> M {
        if let Some((made_in, work)) = self.prepared.take() {
            if made_in == dtype {
                return work;
            }
        }
        self.handed_out = self.copies.clone();
        medddpm_unet::working_params(model, dtype, std::mem::take(&mut self.copies))
    }

    /// Makes the next step's working model now, from the module the last
    /// [`Optimizer::step`] returned: the next [`FusedAdamOptimizer::working_model`] in `dtype`
    /// hands it out. Called between an update and the wait for its loss, its host time (a
    /// few ms for the U-Net's parameters) runs while the GPU still computes the update,
    /// instead of while the GPU waits for the next step's first launch.
    pub fn prepare_working_model(&mut self, model: &M, dtype: DType) {
        self.prepared = None;
        let work = self.working_model(model, dtype);
        self.prepared = Some((dtype, work));
    }
}

impl<M, B> Optimizer<M, B> for FusedAdamOptimizer<M, B>
where
    B: AutodiffBackend<InnerBackend: KernelBackend>,
    M: AutodiffModule<B>,
{
    type Record = Records<M, B>;

    fn step(&mut self, lr: LearningRate, module: M, grads: GradientsParams) -> M {
        self.step_common(lr, module, grads.into())
    }

    fn step_multi(&mut self, lr: LearningRate, module: M, grads: MultiGradientsParams) -> M {
        self.step_common(lr, module, grads.into())
    }

    fn to_record(&self) -> Self::Record {
        self.records.clone()
    }

    fn load_record(mut self, record: Self::Record) -> Self {
        self.records = record;
        self.copies.clear();
        self.handed_out.clear();
        self.prepared = None;
        self
    }
}

impl<M, B> FusedAdamOptimizer<M, B>
where
    B: AutodiffBackend<InnerBackend: KernelBackend>,
    M: AutodiffModule<B>,
{
    /// Takes every parameter that has a gradient out of the module with its state, updates
    /// them all with one [`KernelBackend::adam_steps`] per step count and dtype pair (in bf16
    /// two: the weights with bf16 gradients and copies, GroupNorm's f32 parameters), and puts
    /// the results back.
    ///
    /// Parameters, moments, gradients and the working copies handed out for this step go into
    /// the update by move where nothing else holds them (the working model dropped), so the
    /// update consumes them: on burn's fused backends a tensor freed by its last holder costs a
    /// queued operation of its own, and a model has hundreds (H100: the bf16 optimizer step
    /// spent 8-12 ms of host time freeing the replaced master weights alone).
    fn step_common(&mut self, lr: LearningRate, module: M, mut grads: GradAdaptor) -> M {
        self.copies.clear();
        let mut recycle = std::mem::take(&mut self.handed_out);
        let mut take = Take::<M, B> {
            grads: &mut grads,
            records: &mut self.records,
            pending: Vec::new(),
        };
        let module = module.map(&mut take);
        let pending = take.pending;

        let mut groups: Vec<(GroupKey, Vec<Pending<B::InnerBackend>>)> = Vec::new();
        for p in pending {
            let key = (p.time, p.tensors.param.dtype(), p.tensors.grad.dtype());
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, group)) => group.push(p),
                None => groups.push((key, vec![p])),
            }
        }
        let mut updated = HashMap::new();
        for ((time, dtype, grad_dtype), group) in groups {
            let step = self.adam.at(lr, time);
            let copy = (grad_dtype != dtype).then_some(grad_dtype);
            let mut taken = Vec::with_capacity(group.len());
            let items = group
                .into_iter()
                .map(|mut p| {
                    if copy.is_some() {
                        p.tensors.recycle = recycle.remove(&p.id);
                    }
                    taken.push((p.id, p.restore));
                    p.tensors
                })
                .collect();
            let outputs = B::InnerBackend::adam_steps(items, step, copy);
            for ((id, restore), out) in taken.into_iter().zip(outputs) {
                updated.insert(id, (time, out, restore));
            }
        }
        module.map(&mut Replace::<M, B> {
            records: &mut self.records,
            copies: &mut self.copies,
            updated,
        })
    }
}

/// The step count, parameter dtype and gradient dtype an update group shares.
type GroupKey = (usize, DType, DType);

/// A parameter waiting for its update.
struct Pending<B: KernelBackend> {
    id: ParamId,
    /// Updates so far, this one included.
    time: usize,
    tensors: AdamTensors<B>,
    /// A `Restore` of the parameter's tensor type (its rank is not known here).
    restore: Box<dyn std::any::Any>,
}

/// What [`Replace`] needs to rebuild a parameter [`Take`] took out.
struct Restore<T: burn::module::Parameter> {
    mapper: ParamMapper<T>,
    require_grad: bool,
}

/// Takes each parameter that has a gradient out of the module (leaving a placeholder that
/// [`Replace`] swaps without ever initialising it), with its gradient and Adam state (zero
/// moments before its first update).
struct Take<'a, M, B>
where
    B: AutodiffBackend<InnerBackend: KernelBackend>,
    M: AutodiffModule<B>,
{
    grads: &'a mut GradAdaptor,
    records: &'a mut Records<M, B>,
    pending: Vec<Pending<B::InnerBackend>>,
}

impl<M, B> ModuleMapper<B> for Take<'_, M, B>
where
    B: AutodiffBackend<InnerBackend: KernelBackend>,
    M: AutodiffModule<B>,
{
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let Some((grad, device)) = self.grads.remove::<B::InnerBackend, D>(param.id) else {
            return param;
        };
        let (id, tensor, mapper) = param.consume();
        let require_grad = tensor.is_require_grad();
        let shape = tensor.shape();
        let tensor = tensor.inner().to_device(&device);
        let state: Option<AdamState<B::InnerBackend, D>> = self.records.remove(&id).map(|record| {
            <FusedAdam as SimpleOptimizer<B::InnerBackend>>::to_device(record.into_state(), &device)
        });
        let (time, moment_1, moment_2) = next_moments(state, &tensor);
        let prim = |t: Tensor<B::InnerBackend, D>| t.into_primitive().tensor();
        self.pending.push(Pending {
            id,
            time,
            tensors: AdamTensors {
                param: prim(tensor),
                grad: prim(grad),
                moment_1: prim(moment_1),
                moment_2: prim(moment_2),
                recycle: None,
            },
            restore: Box::new(Restore {
                mapper,
                require_grad,
            }),
        });
        let placeholder = |_: &B::Device, _: bool| -> Tensor<B, D> {
            unreachable!("the optimizer replaces every parameter it takes out")
        };
        Param::uninitialized(id, placeholder, device, require_grad, shape)
    }
}

/// One parameter's update: its step count, the update's results and what rebuilds it.
type Updated<B> = (
    usize,
    AdamOutput<<B as AutodiffBackend>::InnerBackend>,
    Box<dyn std::any::Any>,
);

/// Puts the updated parameters, their states and working copies in place of the
/// placeholders [`Take`] left.
struct Replace<'a, M, B>
where
    B: AutodiffBackend<InnerBackend: KernelBackend>,
    M: AutodiffModule<B>,
{
    records: &'a mut Records<M, B>,
    copies: &'a mut HashMap<ParamId, FloatTensor<B::InnerBackend>>,
    /// Per parameter: its step count, the update's results and what rebuilds it.
    updated: HashMap<ParamId, Updated<B>>,
}

impl<M, B> ModuleMapper<B> for Replace<'_, M, B>
where
    B: AutodiffBackend<InnerBackend: KernelBackend>,
    M: AutodiffModule<B>,
{
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let Some((time, out, restore)) = self.updated.remove(&param.id) else {
            return param;
        };
        let id = param.id;
        // The placeholder: dropped uninitialised.
        drop(param);
        let restore = restore
            .downcast::<Restore<Tensor<B, D>>>()
            .expect("every updated parameter was taken out with its rank");
        let [inner, moment_1, moment_2] = out
            .updated
            .map(|t| Tensor::<B::InnerBackend, D>::from_primitive(TensorPrimitive::Float(t)));
        let momentum = AdaptiveMomentumState::new(time, moment_1, moment_2);
        self.records
            .insert(id, AdaptorRecord::from_state(AdamState::new(momentum)));
        if let Some(copy) = out.copy {
            self.copies.insert(id, copy);
        }
        let mut tensor = Tensor::from_inner(inner);
        if restore.require_grad {
            tensor = tensor.require_grad();
        }
        Param::from_mapped_value(id, tensor, restore.mapper)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, Flex};
    use burn::nn::{Linear, LinearConfig};
    use burn::optim::{AdamConfig, GradientsParams, Optimizer};
    use burn::tensor::Distribution;

    type B = Autodiff<Flex>;

    /// Five steps of FusedAdam and of burn's Adam on the same parameter with the same
    /// gradients give the same parameter and moments, bit for bit (the CPU runs the plain-op
    /// twin; the GPU kernels are compared with the twin in the wgpu agreement tests and
    /// `medddpm check-kernels`).
    #[test]
    fn fused_adam_is_burns_adam() {
        type C = Flex;
        let device = Default::default();
        let ours = FusedAdam::default();
        let burns = AdamConfig::new().with_epsilon(1e-8).build();
        let start = Tensor::<C, 2>::random([7, 5], Distribution::Normal(0.0, 1.0), &device);
        let (mut a, mut b) = (start.clone(), start.clone());
        let (mut state_a, mut state_b) = (None, None);
        for step in 0..5 {
            // Gradients of every scale, some tiny (where epsilon matters).
            let scale = 10f64.powi(step - 4);
            let grad = Tensor::<C, 2>::random([7, 5], Distribution::Normal(0.0, scale), &device);
            let lr = 1e-2 / (step + 1) as f64;
            (a, state_a) = ours.step(lr, a, grad.clone(), state_a);
            (b, state_b) = SimpleOptimizer::<C>::step(&burns, lr, b, grad, state_b);
        }
        assert_eq!(a.clone().into_data(), b.into_data());
        let (sa, sb) = (state_a.unwrap().momentum, state_b.unwrap().momentum);
        assert_eq!(sa.time, sb.time);
        assert_eq!(sa.moment_1.into_data(), sb.moment_1.into_data());
        assert_eq!(sa.moment_2.into_data(), sb.moment_2.into_data());
        // And the parameter moved.
        assert!((a - start).abs().sum().into_scalar() > 0.0);
    }

    /// bf16 training through the working copies (no casts in the graph; bf16 gradients into
    /// the update) moves the f32 master weights exactly as the recorded-cast path with burn's
    /// per-tensor adaptor does, and each working copy is the cast of its master weight.
    #[test]
    fn working_copies_train_like_recorded_casts() {
        let _turn = medddpm_diffusion::autodiff_turn();
        use crate::trainer::{micro_step, micro_step_loss};
        use crate::DiffusionConfig;
        use burn::tensor::backend::Backend;
        use medddpm_diffusion::CosineSchedule;
        use medddpm_unet::{cast_compute_params, Compute, Precision, UNet, UNetConfig};

        let device = Default::default();
        B::seed(&device, 7);
        let compute = Compute {
            precision: Precision::Bf16,
            ..Default::default()
        };
        let start: UNet<B> = UNetConfig::tiny()
            .init(&device)
            .unwrap()
            .with_compute(compute);
        let start = medddpm_unet::randomize_weights(start);
        let schedule = CosineSchedule::new(100);
        let batch = |step: usize| {
            crate::trainer::random_micro_batch::<B>(&device, 100 + step as u64, 10 + 20 * step)
        };
        let mut ours = FusedAdam::default().init::<B, UNet<B>>();
        let mut reference: OptimizerAdaptor<FusedAdam, UNet<B>, B> = FusedAdam::default().into();
        let (mut a, mut b) = (start.clone(), start);
        for step in 0..3 {
            let work = ours.working_model(&a, DType::BF16);
            let (grads, _) = micro_step(
                &work,
                &schedule,
                batch(step),
                &DiffusionConfig::default(),
                1.0,
                medddpm_unet::ActivationCheckpointing::None,
            );
            a = ours.step(1e-3, a, grads);
            // Every convolution and linear parameter came back with its bf16 copy.
            assert!(ours.copies.len() > 20, "{} copies", ours.copies.len());
            assert!(ours.copies.values().all(|c| c.dtype() == DType::BF16));
            if step == 0 {
                // The trainer's order: the next working model made right after the update.
                ours.prepare_working_model(&a, DType::BF16);
            }
            // The casts recorded in the graph: f32 gradients for the master weights.
            let cast = cast_compute_params(b.clone(), DType::BF16);
            let loss = micro_step_loss(&cast, &schedule, batch(step), &DiffusionConfig::default());
            let grads = GradientsParams::from_grads(loss.backward(), &b);
            b = reference.step(1e-3, b, grads);
        }
        let (wa, wb) = (
            medddpm_unet::weight_values(&a),
            medddpm_unet::weight_values(&b),
        );
        assert_eq!(wa, wb);
        // The copies of the last step are the casts of the master weights.
        let work = ours.working_model(&a, DType::BF16);
        let cast = cast_compute_params(a.valid(), DType::BF16);
        assert_eq!(
            medddpm_unet::weight_values(&work.valid()),
            medddpm_unet::weight_values(&cast)
        );
    }

    /// The optimizer takes out and puts back only the parameters that have a gradient: the
    /// others come back as they were (not as the placeholders the updated ones pass through),
    /// and every parameter keeps its id and its gradient requirement.
    #[test]
    fn parameters_without_gradients_are_left_as_they_are() {
        let device = Default::default();
        let model: Linear<B> = LinearConfig::new(4, 2).init(&device);
        let bias = model.bias.as_ref().unwrap();
        let (weight_id, bias_id) = (model.weight.id, bias.id);
        let (weight_before, bias_before) = (model.weight.val(), bias.val());
        let mut grads = GradientsParams::new();
        grads.register(
            weight_id,
            Tensor::<Flex, 2>::random([4, 2], Distribution::Normal(0.0, 1.0), &device),
        );
        let mut optim = FusedAdam::default().init::<B, Linear<B>>();
        let model = optim.step(1e-2, model, grads);
        let bias = model.bias.as_ref().unwrap();
        assert_eq!((model.weight.id, bias.id), (weight_id, bias_id));
        assert!(model.weight.val().is_require_grad() && bias.val().is_require_grad());
        assert_ne!(
            model.weight.val().into_data(),
            weight_before.into_data(),
            "the weight had a gradient"
        );
        assert_eq!(bias.val().into_data(), bias_before.into_data());
        // Only the updated parameter has Adam state.
        let records = optim.to_record();
        assert!(records.contains_key(&weight_id) && !records.contains_key(&bias_id));
    }

    /// A checkpointed burn Adam state loads into FusedAdam (the records serialise alike) and
    /// the next step is the one burn's Adam takes.
    #[test]
    fn burns_adam_checkpoints_load_into_fused_adam() {
        use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
        let device = Default::default();
        let recorder = BinBytesRecorder::<FullPrecisionSettings>::default();
        let model: Linear<B> = LinearConfig::new(4, 2).init(&device);
        // Fixed gradients (a backward pass on the CPU need not be bit-reproducible).
        let grad_w = Tensor::<Flex, 2>::random([4, 2], Distribution::Normal(0.0, 1.0), &device);
        let grad_b = Tensor::<Flex, 1>::random([2], Distribution::Normal(0.0, 1.0), &device);
        let grads = |model: &Linear<B>| {
            let mut grads = GradientsParams::new();
            grads.register(model.weight.id, grad_w.clone());
            grads.register(model.bias.as_ref().unwrap().id, grad_b.clone());
            grads
        };
        let mut burns = AdamConfig::new().with_epsilon(1e-8).init::<B, Linear<B>>();
        let model = burns.step(1e-2, model.clone(), grads(&model));
        let bytes = recorder.record(burns.to_record(), ()).unwrap();
        let mut ours = FusedAdam::default()
            .init::<B, Linear<B>>()
            .load_record(recorder.load(bytes, &device).unwrap());
        let a = ours.step(1e-2, model.clone(), grads(&model));
        let b = burns.step(1e-2, model.clone(), grads(&model));
        assert_eq!(a.weight.val().into_data(), b.weight.val().into_data());
        assert_ne!(a.weight.val().into_data(), model.weight.val().into_data());
    }
}
