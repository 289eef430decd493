//! What a step's gradients become: Adam's update, or a skipped batch (a non-finite loss with
//! `skip`; f16 gradients that overflowed, in `scaler`).

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::{GradientsParams, Optimizer};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, ElementConversion, Tensor, TensorPrimitive};
use medddpm_kernels::marks::mark;
use medddpm_kernels::KernelBackend;
use medddpm_unet::{KernelAutodiffBackend, UNet};

use super::accumulate::AccumulatedStep;
use super::team::Team;
use crate::{ExperimentConfig, FusedAdamOptimizer, NonFiniteLoss, TrainError};

/// Batches skipped in a row after which `on_non_finite_loss = "skip"` gives up.
const MAX_SKIPPED_IN_A_ROW: usize = 10;

/// What became of one optimizer step's update.
pub(super) enum Update {
    /// Adam stepped; the step's mean loss (not finite: the run stops, and with loss scaling
    /// Adam did not step) and the norm of the gradients it took, where asked for
    /// ([`GradNorm`]).
    Applied { loss: f32, grad_norm: Option<f32> },
    /// The loss was not finite and `on_non_finite_loss = "skip"` left the weights alone.
    Skipped(f32),
    /// As `Skipped`, but too many in a row: the run stops as without `skip`.
    GaveUp(f32),
    /// f16's gradients overflowed: no update, the loss scale went from `from` to `to`.
    Overflow { from: f64, to: f64 },
}

/// Steps Adam on the team's average of the accumulated gradients. Reading a loss waits for
/// the device: without `skip`, only after the whole step (backward passes, average and update)
/// and the next step's working model are queued, so that the GPU never waits for the host to
/// issue the optimizer's launches; with `skip` the loss (every replica's) decides whether the
/// update happens, so it is read first.
pub(super) fn update<B: KernelAutodiffBackend>(
    optim: &mut FusedAdamOptimizer<UNet<B>, B>,
    model: UNet<B>,
    mut step: AccumulatedStep<B>,
    (config, lr, skipped_in_a_row): (&ExperimentConfig, f64, &mut usize),
    (team, compute_dtype): (&Team<'_>, DType),
    device: &B::Device,
) -> Result<(UNet<B>, Update), TrainError> {
    let norm = GradNorm::<B>::wanted(config, team);
    if config.train.on_non_finite_loss != NonFiniteLoss::Skip {
        let grads = team.average(&model, step.accumulator.grads(), device)?;
        let norm = norm.queue(&model, &grads);
        let model = optim.step(lr, model, grads);
        // The next step's working weights while the GPU computes this one's update.
        optim.prepare_working_model(&model, compute_dtype);
        mark("update enqueued");
        let (mean, grad_norm) = norm.read_with(step.losses);
        let loss = team.mean_loss(mean)?;
        mark("losses read");
        return Ok((model, Update::Applied { loss, grad_norm }));
    }
    let loss = team.mean_loss(read_mean(step.losses))?;
    if loss.is_finite() {
        *skipped_in_a_row = 0;
        let grads = team.average(&model, step.accumulator.grads(), device)?;
        let norm = norm.queue(&model, &grads);
        let model = optim.step(lr, model, grads);
        return Ok((model, norm.applied(loss)));
    }
    Ok((model, skip_batch(loss, skipped_in_a_row)))
}

/// The mean of a step's micro-batch losses, summed in f32 in their order on the device and
/// read once (one wait for the device, not one per micro-batch; the same sum as the host's).
pub(super) fn read_mean<B: KernelAutodiffBackend>(losses: Vec<Tensor<B, 1>>) -> f32 {
    let n = losses.len() as f32;
    loss_sum(losses).map_or(0.0, |s| s.into_scalar().elem::<f32>()) / n
}

/// The losses' sum in f32, in their order, still on the device.
fn loss_sum<B: KernelAutodiffBackend>(
    losses: Vec<Tensor<B, 1>>,
) -> Option<Tensor<B::InnerBackend, 1>> {
    losses
        .into_iter()
        .map(|l| l.inner().cast(DType::F32))
        .reduce(|sum, l| sum + l)
}

/// What a non-finite loss does when `skip` is set: the batch is skipped, until too many in
/// a row.
pub(super) fn skip_batch(loss: f32, skipped_in_a_row: &mut usize) -> Update {
    *skipped_in_a_row += 1;
    if *skipped_in_a_row < MAX_SKIPPED_IN_A_ROW {
        Update::Skipped(loss)
    } else {
        Update::GaveUp(loss)
    }
}

/// The global L2 norm of the gradients Adam takes (all of them as one vector, in f32, after
/// the replicas' average and f16's unscaling), for the log: `[train] grad_norm`, computed by
/// the lead alone (the replicas hold the same average). Queued on the device before the
/// update and read after it, with the loss, so the GPU does not wait for the host; one
/// backend operation for all the gradients (`KernelBackend::squared_norm_f32`), not a few per
/// parameter tensor on the thread that now sets a training step's pace.
pub(super) enum GradNorm<B: KernelAutodiffBackend> {
    /// Not asked for, or not this replica's job.
    Off,
    /// To be queued.
    Wanted,
    /// The sum of squares, queued.
    Queued(FloatTensor<B::InnerBackend>),
}

impl<B: KernelAutodiffBackend> GradNorm<B> {
    pub fn wanted(config: &ExperimentConfig, team: &Team<'_>) -> Self {
        if config.train.grad_norm && team.shard.rank == 0 {
            Self::Wanted
        } else {
            Self::Off
        }
    }

    /// Queues the sum of squares of `grads` (those of `model`'s parameters).
    pub fn queue<M: Module<B>>(self, model: &M, grads: &GradientsParams) -> Self {
        if !matches!(self, Self::Wanted) {
            return self;
        }
        let mut visitor = Gathered::<B> {
            grads,
            tensors: Vec::new(),
        };
        model.visit(&mut visitor);
        if visitor.tensors.is_empty() {
            return Self::Off;
        }
        Self::Queued(B::InnerBackend::squared_norm_f32(visitor.tensors))
    }

    /// The mean of `losses` (as [`read_mean`]) and the norm, read from the device together:
    /// one wait a step where two reads would leave the GPU idle between them.
    pub fn read_with(self, losses: Vec<Tensor<B, 1>>) -> (f32, Option<f32>) {
        let n = losses.len() as f32;
        match (loss_sum(losses), self) {
            (Some(sum), Self::Queued(norm)) => {
                let norm = Tensor::from_primitive(TensorPrimitive::Float(norm));
                let values = crate::host::f32_values(Tensor::cat(vec![sum, norm], 0));
                (values[0] / n, Some(values[1].sqrt()))
            }
            (sum, norm) => (
                sum.map_or(0.0, |s| s.into_scalar().elem::<f32>()) / n,
                norm.read(),
            ),
        }
    }

    /// The norm, where queued (reading it waits for the device).
    fn read(self) -> Option<f32> {
        match self {
            Self::Queued(sum) => {
                let sum = Tensor::<B::InnerBackend, 1>::from_primitive(TensorPrimitive::Float(sum));
                Some(sum.into_scalar().elem::<f32>().sqrt())
            }
            _ => None,
        }
    }

    /// The update's outcome, reading the norm (which waits for the device).
    pub fn applied(self, loss: f32) -> Update {
        Update::Applied {
            loss,
            grad_norm: self.read(),
        }
    }
}

/// The gradients of a model's parameters, in its order.
struct Gathered<'a, B: AutodiffBackend> {
    grads: &'a GradientsParams,
    tensors: Vec<FloatTensor<B::InnerBackend>>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Gathered<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if let Some(g) = self.grads.get::<B::InnerBackend, D>(param.id) {
            self.tensors.push(g.into_primitive().tensor());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, Flex};
    use burn::nn::{Linear, LinearConfig};
    use burn::tensor::DType;

    type B = Autodiff<Flex>;

    fn values<const D: usize>(t: Tensor<Flex, D>) -> Vec<f64> {
        t.into_data().convert::<f64>().to_vec::<f64>().unwrap()
    }

    /// A small model and the gradients of a loss of two examples.
    fn model_and_grads() -> (Linear<B>, GradientsParams) {
        let _turn = medddpm_diffusion::autodiff_turn();
        let device = Default::default();
        let model: Linear<B> = LinearConfig::new(3, 2).init(&device);
        let x = Tensor::<B, 2>::from_floats([[1.0, -2.0, 0.5], [0.25, 3.0, -1.0]], &device);
        let loss = model.forward(x).powi_scalar(2).sum();
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        (model, grads)
    }

    /// The norm is that of every gradient of the model as one vector, a bf16 one in f32.
    #[test]
    fn grad_norm_is_the_l2_norm_of_all_gradients() {
        let (model, mut grads) = model_and_grads();
        let bias = model.bias.as_ref().unwrap().id;
        let w = grads.remove::<Flex, 2>(model.weight.id).unwrap();
        let w = medddpm_kernels::cast_to(w, DType::BF16);
        grads.register(model.weight.id, w.clone());
        let b = grads.get::<Flex, 1>(bias).unwrap();
        let mut all = values(medddpm_kernels::cast_to(w, DType::F32));
        all.extend(values(b));
        let expected = all.iter().map(|g| g * g).sum::<f64>().sqrt();
        assert!(expected > 0.0);

        let Update::Applied { loss, grad_norm } =
            GradNorm::<B>::Wanted.queue(&model, &grads).applied(0.5)
        else {
            panic!("not applied")
        };
        assert_eq!(loss, 0.5);
        let got = grad_norm.unwrap() as f64;
        assert!(
            (got - expected).abs() < 1e-5 * expected,
            "{got} vs {expected}"
        );

        // Not wanted: nothing queued, nothing read.
        let Update::Applied { grad_norm, .. } =
            GradNorm::<B>::Off.queue(&model, &grads).applied(0.5)
        else {
            panic!("not applied")
        };
        assert_eq!(grad_norm, None);
    }

    /// Read together, the losses' mean and the norm are what reading them one by one gives,
    /// bit for bit: the mean is the host's f32 sum of the losses in their order, over their
    /// count; without a norm, the mean alone.
    #[test]
    fn losses_and_norm_read_together_equal_their_separate_reads() {
        let device = Default::default();
        let (model, grads) = model_and_grads();
        let values = [0.1f32, 0.7, 0.30000004];
        let losses = || {
            values
                .iter()
                .map(|&v| Tensor::<B, 1>::from_floats([v], &device))
                .collect::<Vec<_>>()
        };
        let host_mean = values.iter().fold(0f32, |s, v| s + v) / values.len() as f32;
        let Update::Applied { grad_norm, .. } =
            GradNorm::<B>::Wanted.queue(&model, &grads).applied(0.0)
        else {
            panic!("not applied")
        };
        let (mean, norm) = GradNorm::<B>::Wanted
            .queue(&model, &grads)
            .read_with(losses());
        assert_eq!(mean.to_bits(), host_mean.to_bits());
        assert_eq!(mean.to_bits(), read_mean(losses()).to_bits());
        assert_eq!(norm.map(f32::to_bits), grad_norm.map(f32::to_bits));
        let (mean, norm) = GradNorm::<B>::Off.read_with(losses());
        assert_eq!((mean.to_bits(), norm), (host_mean.to_bits(), None));
    }
}
