//! f16 training's loss scaling: the gradients come back multiplied by the loss scale, and are
//! checked for overflow and divided by it in f32 here, before the team's average reaches Adam.

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::{GradientsParams, Optimizer};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{DType, ElementConversion, Tensor};
use medddpm_unet::{KernelAutodiffBackend, UNet};

use super::accumulate::AccumulatedStep;
use super::team::Team;
use super::update::{read_mean, skip_batch, GradNorm, Update};
use crate::checkpoint::LossScale;
use crate::{ExperimentConfig, FusedAdamOptimizer, NonFiniteLoss, TrainError};

/// The update of a step trained with loss scaling. The losses are read first (the overflow
/// check waits for the device anyway); a non-finite loss is handled as without scaling; the
/// team's averaged gradients, back in f32 and unscaled, are checked as one, so every replica
/// takes the same decision: an overflow skips the update and halves the scale.
pub(super) fn scaled_update<B: KernelAutodiffBackend>(
    optim: &mut FusedAdamOptimizer<UNet<B>, B>,
    model: UNet<B>,
    mut step: AccumulatedStep<B>,
    (config, lr, skipped_in_a_row): (&ExperimentConfig, f64, &mut usize),
    (team, device): (&Team<'_>, &B::Device),
    scale: &mut LossScale,
) -> Result<(UNet<B>, Update), TrainError> {
    let loss = team.mean_loss(read_mean(std::mem::take(&mut step.losses)))?;
    if !loss.is_finite() {
        if config.train.on_non_finite_loss == NonFiniteLoss::Skip {
            return Ok((model, skip_batch(loss, skipped_in_a_row)));
        }
        // The run stops on this loss (`stop_on_failure`), so nothing is updated.
        let grad_norm = None;
        return Ok((model, Update::Applied { loss, grad_norm }));
    }
    *skipped_in_a_row = 0;
    let grads = team.average(&model, step.accumulator.grads(), device)?;
    let (grads, finite) = unscale(&model, grads, scale.per_replica(team.shard.world));
    let from = scale.scale;
    if scale.update(finite, config.train.loss_scale_growth_interval) {
        let norm = GradNorm::<B>::wanted(config, team).queue(&model, &grads);
        return Ok((optim.step(lr, model, grads), norm.applied(loss)));
    }
    Ok((
        model,
        Update::Overflow {
            from,
            to: scale.scale,
        },
    ))
}

/// `grads` (the loss scaled by `scale`) in f32 divided by `scale`, and whether every one of
/// them is finite (one read of the device for the whole model: a sum of `g * 0` over every
/// gradient is NaN exactly when some element is infinite or NaN).
pub(super) fn unscale<B: AutodiffBackend>(
    model: &UNet<B>,
    mut grads: GradientsParams,
    scale: f64,
) -> (GradientsParams, bool) {
    let mut visitor = Unscale::<B> {
        grads: &mut grads,
        factor: 1.0 / scale,
        probe: None,
    };
    model.visit(&mut visitor);
    let finite = visitor
        .probe
        .take()
        .is_none_or(|p| p.into_scalar().elem::<f32>().is_finite());
    (grads, finite)
}

struct Unscale<'a, B: AutodiffBackend> {
    grads: &'a mut GradientsParams,
    factor: f64,
    probe: Option<Tensor<B::InnerBackend, 1>>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Unscale<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let Some(g) = self.grads.remove::<B::InnerBackend, D>(param.id) else {
            return;
        };
        let g = medddpm_kernels::cast_to(g, DType::F32);
        let zero = g.clone().mul_scalar(0.0).sum();
        self.probe = Some(match self.probe.take() {
            None => zero,
            Some(p) => p + zero,
        });
        self.grads.register(param.id, g.mul_scalar(self.factor));
    }
}

#[cfg(test)]
mod tests {
    use crate::checkpoint::LossScale;

    #[test]
    fn overflow_halves_and_good_steps_double() {
        let mut s = LossScale::new(65536.0);
        assert!(!s.update(false, 3));
        assert_eq!(s.scale, 32768.0);
        assert!(s.update(true, 3) && s.update(true, 3));
        assert_eq!((s.scale, s.good_steps), (32768.0, 2));
        assert!(s.update(true, 3));
        assert_eq!((s.scale, s.good_steps), (65536.0, 0));
        // An overflow restarts the count.
        assert!(s.update(true, 3));
        assert!(!s.update(false, 3));
        assert_eq!((s.scale, s.good_steps), (32768.0, 0));
    }
}
