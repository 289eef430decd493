//! The two stages of an augmentation, each drawing again until its result fits: the whole
//! mask's rotation and scaling (the tumour must stay on the grid), then the tumour's move
//! (it must stay on the grid and inside the brain).

use super::config::{AugmentConfig, TumourLabels};
use super::draw::Draws;
use super::error::{AugmentError, Stage};
use super::geometry::{off_grid, resample, VoxelMap};
use super::tumour::{Misfit, Tumour};
use crate::label_of;
use medddpm_nifti::Affine;

/// Draws that did not fit, by reason.
#[derive(Debug, Default)]
struct Misses {
    off_grid: u32,
    outside_brain: u32,
    vanished: u32,
}

impl Misses {
    fn count(&mut self, m: Misfit) {
        match m {
            Misfit::OffGrid => self.off_grid += 1,
            Misfit::OutsideBrain => self.outside_brain += 1,
            Misfit::Vanished => self.vanished += 1,
        }
    }

    fn error(self, stage: Stage, tries: u32) -> AugmentError {
        AugmentError::NoFit {
            stage,
            tries,
            off_grid: self.off_grid,
            outside_brain: self.outside_brain,
            vanished: self.vanished,
        }
    }
}

/// A mask rotated and scaled about the grid's centre.
pub(crate) struct Geometry {
    pub data: Vec<f32>,
    pub rotation_deg: [f64; 3],
    pub scale: f64,
    pub tries: u32,
}

/// Rotates (if `rotate`) and scales (if `rescale`) `data`, a mask on a grid of `dims` with
/// `affine`, drawing again while a tumour voxel would leave the grid or the tumour vanish.
/// Every try draws three angles and a scale, used or not, so switching one transform off does
/// not change the other's values.
pub(crate) fn geometry(
    data: Vec<f32>,
    dims: [usize; 3],
    affine: &Affine,
    labels: Option<&TumourLabels>,
    (rotate, rescale): (bool, bool),
    cfg: &AugmentConfig,
    draws: &mut Draws,
) -> Result<Geometry, AugmentError> {
    if !rotate && !rescale {
        return Ok(Geometry {
            data,
            rotation_deg: [0.0; 3],
            scale: 1.0,
            tries: 1,
        });
    }
    let is_tumour = |v: f32| labels.is_some_and(|t| label_of(v).is_some_and(|l| t.is_tumour(l)));
    let had_tumour = data.iter().any(|&v| is_tumour(v));
    let mut misses = Misses::default();
    for tries in 1..=cfg.max_tries {
        let deg = [0; 3].map(|_| draws.symmetric(cfg.max_rotation_deg));
        let scale = draws.within(cfg.scale_range);
        let rotation_deg = if rotate { deg } else { [0.0; 3] };
        let scale = if rescale { scale } else { 1.0 };
        let map = VoxelMap::new(affine, rotation_deg, scale)?;
        if had_tumour && off_grid(&data, dims, &map.forward, is_tumour) > 0 {
            misses.count(Misfit::OffGrid);
            continue;
        }
        let out = resample(&data, dims, &map.back);
        if had_tumour && !out.iter().any(|&v| is_tumour(v)) {
            misses.count(Misfit::Vanished);
            continue;
        }
        return Ok(Geometry {
            data: out,
            rotation_deg,
            scale,
            tries,
        });
    }
    Err(misses.error(Stage::Geometry, cfg.max_tries))
}

/// A mask whose tumour moved.
pub(crate) struct Moved {
    pub data: Vec<f32>,
    pub shift: [i64; 3],
    pub scale: f64,
    pub tries: u32,
}

/// Moves and scales the tumour of `data`, drawing again while it would leave the grid or the
/// brain or vanish; `None` when the mask has no tumour.
pub(crate) fn tumour(
    data: &[f32],
    dims: [usize; 3],
    labels: &TumourLabels,
    cfg: &AugmentConfig,
    draws: &mut Draws,
) -> Result<Option<Moved>, AugmentError> {
    let Some(tumour) = Tumour::find(data, dims, labels) else {
        return Ok(None);
    };
    let mut misses = Misses::default();
    for tries in 1..=cfg.max_tries {
        let shift = [0; 3].map(|_| draws.shift(cfg.max_tumour_shift));
        let scale = draws.within(cfg.tumour_scale_range);
        match tumour.place(data, dims, labels, shift, scale) {
            Ok(data) => {
                return Ok(Some(Moved {
                    data,
                    shift,
                    scale,
                    tries,
                }))
            }
            Err(m) => misses.count(m),
        }
    }
    Err(misses.error(Stage::Tumour, cfg.max_tries))
}
