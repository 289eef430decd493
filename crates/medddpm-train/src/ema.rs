//! Exponential moving average of the network weights, as the reference keeps it.

use std::collections::HashMap;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::tensor::{backend::Backend, Tensor};

/// The reference's EMA rule (`trainer.py` `step_ema`): every `every` optimizer steps, before
/// `start` the average is overwritten with the live weights, from `start` on it is updated as
/// ema = decay * ema + (1 - decay) * live. Parameters only; buffers are never averaged (our
/// networks have none).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EmaSchedule {
    /// Averaging decay.
    pub decay: f64,
    /// Update cadence in optimizer steps.
    pub every: usize,
    /// First step at which the average is blended rather than copied.
    pub start: usize,
}

/// What an EMA update does at a given step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum EmaAction {
    /// Not an update step.
    Skip,
    /// Copy the live weights.
    Copy,
    /// Blend with this decay.
    Blend(f64),
}

impl EmaSchedule {
    /// The action after the optimizer step with 0-based index `step`: the reference tests its
    /// step counter after the optimizer step and before incrementing it, so the very first
    /// optimizer step (index 0) already copies the weights.
    pub fn action(&self, step: usize) -> EmaAction {
        if !step.is_multiple_of(self.every) {
            EmaAction::Skip
        } else if step < self.start {
            EmaAction::Copy
        } else {
            EmaAction::Blend(self.decay)
        }
    }
}

/// Applies `action` to `ema` given the live weights `live` (same architecture, same parameter
/// ids: the EMA starts as a copy of the model).
pub fn update_ema<B: Backend, M: Module<B>>(ema: M, live: &M, action: EmaAction) -> M {
    let decay = match action {
        EmaAction::Skip => return ema,
        EmaAction::Copy => 0.0,
        EmaAction::Blend(decay) => decay,
    };
    let mut collector = Collect::<B> {
        tensors: HashMap::new(),
    };
    live.visit(&mut collector);
    let mut blender = Blend::<B> {
        live: collector.tensors,
        decay,
    };
    ema.map(&mut blender)
}

struct Collect<B: Backend> {
    tensors: HashMap<ParamId, Tensor<B, 1>>,
}

impl<B: Backend> ModuleVisitor<B> for Collect<B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let t = param.val();
        let n = t.shape().num_elements();
        self.tensors.insert(param.id, t.reshape([n]));
    }
}

struct Blend<B: Backend> {
    live: HashMap<ParamId, Tensor<B, 1>>,
    decay: f64,
}

impl<B: Backend> ModuleMapper<B> for Blend<B> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let Some(live) = self.live.remove(&param.id) else {
            panic!("EMA parameter {} has no live counterpart: the EMA must start as a copy of the model", param.id);
        };
        let decay = self.decay;
        param.map(|ema| {
            let live = live.reshape(ema.shape());
            if decay == 0.0 {
                live
            } else {
                ema.mul_scalar(decay) + live.mul_scalar(1.0 - decay)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::nn::{Linear, LinearConfig};

    #[test]
    fn schedule_copies_then_blends_every_n_steps() {
        let s = EmaSchedule {
            decay: 0.995,
            every: 10,
            start: 2000,
        };
        assert_eq!(s.action(5), EmaAction::Skip);
        assert_eq!(s.action(10), EmaAction::Copy);
        assert_eq!(s.action(1990), EmaAction::Copy);
        assert_eq!(s.action(2000), EmaAction::Blend(0.995));
        assert_eq!(s.action(2001), EmaAction::Skip);
    }

    #[test]
    fn blend_is_the_weighted_average() {
        let device = Default::default();
        let live: Linear<Flex> = LinearConfig::new(2, 3).init(&device);
        let ema = live.clone().map(
            &mut Blend::<Flex> {
                live: HashMap::new(),
                decay: 0.0,
            }
            .with_zeros(&live),
        );
        let blended = update_ema(ema, &live, EmaAction::Blend(0.9));
        let w = blended.weight.val().into_data().to_vec::<f32>().unwrap();
        let l = live.weight.val().into_data().to_vec::<f32>().unwrap();
        for (a, b) in w.iter().zip(&l) {
            assert!((a - 0.1 * b).abs() < 1e-6, "{a} vs 0.1 * {b}");
        }
        let copied = update_ema(blended, &live, EmaAction::Copy);
        assert_eq!(copied.weight.val().into_data().to_vec::<f32>().unwrap(), l);
    }

    impl Blend<Flex> {
        /// Test helper: a mapper that sets every parameter of `module` to zero.
        fn with_zeros(mut self, module: &Linear<Flex>) -> Self {
            let mut c = Collect::<Flex> {
                tensors: HashMap::new(),
            };
            module.visit(&mut c);
            self.live = c
                .tensors
                .into_iter()
                .map(|(k, v)| (k, v.zeros_like()))
                .collect();
            self
        }
    }
}
