//! What a step's gradients become: Adam's update, or a skipped batch (a non-finite loss with
//! `skip`; f16 gradients that overflowed, in `scaler`).

use burn::optim::Optimizer;
use burn::tensor::{ElementConversion, Tensor};
use medddpm_unet::{KernelAutodiffBackend, UNet};

use super::accumulate::AccumulatedStep;
use super::team::Team;
use crate::{ExperimentConfig, FusedAdamOptimizer, NonFiniteLoss, TrainError};

/// Batches skipped in a row after which `on_non_finite_loss = "skip"` gives up.
const MAX_SKIPPED_IN_A_ROW: usize = 10;

/// What became of one optimizer step's update.
pub(super) enum Update {
    /// Adam stepped; the step's mean loss (not finite: the run stops, and with loss scaling
    /// Adam did not step).
    Applied(f32),
    /// The loss was not finite and `on_non_finite_loss = "skip"` left the weights alone.
    Skipped(f32),
    /// As `Skipped`, but too many in a row: the run stops as without `skip`.
    GaveUp(f32),
    /// f16's gradients overflowed: no update, the loss scale went from `from` to `to`.
    Overflow { from: f64, to: f64 },
}

/// Steps Adam on the team's average of the accumulated gradients. Reading a loss waits for
/// the device: without `skip`, only after the whole step (backward passes, average and update)
/// is queued, so that the GPU never waits for the host to issue the optimizer's launches; with
/// `skip` the loss (every replica's) decides whether the update happens, so it is read first.
pub(super) fn update<B: KernelAutodiffBackend>(
    optim: &mut FusedAdamOptimizer<UNet<B>, B>,
    model: UNet<B>,
    mut step: AccumulatedStep<B>,
    (config, lr, skipped_in_a_row): (&ExperimentConfig, f64, &mut usize),
    team: &Team<'_>,
    device: &B::Device,
) -> Result<(UNet<B>, Update), TrainError> {
    if config.train.on_non_finite_loss != NonFiniteLoss::Skip {
        let grads = team.average(&model, step.accumulator.grads(), device)?;
        let model = optim.step(lr, model, grads);
        let loss = team.mean_loss(read_mean(step.losses))?;
        return Ok((model, Update::Applied(loss)));
    }
    let loss = team.mean_loss(read_mean(step.losses))?;
    if loss.is_finite() {
        *skipped_in_a_row = 0;
        let grads = team.average(&model, step.accumulator.grads(), device)?;
        let model = optim.step(lr, model, grads);
        return Ok((model, Update::Applied(loss)));
    }
    Ok((model, skip_batch(loss, skipped_in_a_row)))
}

/// The mean of a step's micro-batch losses (reading them waits for the device).
pub(super) fn read_mean<B: KernelAutodiffBackend>(losses: Vec<Tensor<B, 1>>) -> f32 {
    let n = losses.len() as f32;
    let sum: f32 = losses
        .into_iter()
        .map(|l| l.inner().into_scalar().elem::<f32>())
        .sum();
    sum / n
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
