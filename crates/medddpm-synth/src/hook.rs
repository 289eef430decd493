//! The augmentation hook: where a pair's mask comes from. The default keeps the source mask;
//! an augmentation (e.g. `medddpm_mask`'s) returns a changed one and a record of what it did,
//! which the manifest keeps.

use medddpm_nifti::Volume;
use serde_json::Value;

/// What the hook can fail with (any error type; its message is reported with the pair).
pub type HookError = Box<dyn std::error::Error + Send + Sync>;

/// The mask a pair is made from, and what was done to get it.
#[derive(Debug, Clone)]
pub struct ChosenMask {
    /// The label map to condition on and to write as the pair's label (any grid the model's
    /// grid policy accepts; the image is written on this grid).
    pub mask: Volume,
    /// What was done to the source mask, for the manifest (`None`: nothing).
    pub record: Option<Value>,
}

/// Gives each pair its mask (`Sync`: the next batch's masks are made on a thread of their own
/// while the network samples; a pair's mask depends on its number and seed only).
pub trait MaskSource: Sync {
    /// The mask of pair `pair` (seeded `seed`) made from `source`, the source mask as read
    /// (with the brain label added for models that have one).
    fn mask_for(&self, source: Volume, pair: usize, seed: u64) -> Result<ChosenMask, HookError>;

    /// The settings this source was built with, compared when a run resumes so that one data
    /// set never mixes two augmentations (`None`: the identity).
    fn settings(&self) -> Option<Value> {
        None
    }
}

/// The source mask as it is: every variant of a mask differs only in its noise.
#[derive(Debug, Clone, Copy, Default)]
pub struct Identity;

impl MaskSource for Identity {
    fn mask_for(&self, source: Volume, _: usize, _: u64) -> Result<ChosenMask, HookError> {
        Ok(ChosenMask {
            mask: source,
            record: None,
        })
    }
}

/// A function as a [`MaskSource`], with the settings it stands for: how an augmentation
/// plugs in without a type of its own.
pub struct FnMaskSource<F> {
    f: F,
    settings: Option<Value>,
}

impl<F> FnMaskSource<F>
where
    F: Fn(Volume, usize, u64) -> Result<ChosenMask, HookError> + Sync,
{
    /// `f(source, pair, seed)` makes each mask; `settings` is what a resumed run must repeat.
    pub fn new(f: F, settings: Option<Value>) -> Self {
        Self { f, settings }
    }
}

impl<F> MaskSource for FnMaskSource<F>
where
    F: Fn(Volume, usize, u64) -> Result<ChosenMask, HookError> + Sync,
{
    fn mask_for(&self, source: Volume, pair: usize, seed: u64) -> Result<ChosenMask, HookError> {
        (self.f)(source, pair, seed)
    }

    fn settings(&self) -> Option<Value> {
        self.settings.clone()
    }
}
