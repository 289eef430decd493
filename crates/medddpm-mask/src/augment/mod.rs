//! New masks from given ones, for synthetic datasets: seeded, every drawn value recorded,
//! labels never blended (nearest neighbour), and each new mask checked before it is returned.
//!
//! [`augment`] applies, in this order:
//! 1. **Left-right flip.** The voxel axis that runs left-right is the one whose affine column
//!    points most along world x; the data are mirrored along it and the affine is kept, so
//!    the anatomy is mirrored in world space: a label at world `(x, y, z)` moves to
//!    `(2 x_c - x, y, z)`, `x_c` being the grid centre's x (for an oblique affine, the mirror
//!    is that voxel axis's mid-plane). Keeping the affine, rather than negating its column,
//!    is what makes it a new mask on the same grid as its images; negating would only
//!    relabel the same anatomy.
//! 2. **Rotation and scaling** about the grid's centre, in world space (mm), so voxels that
//!    are not cubes are not sheared: rotations about world x, y, z, then one isotropic scale.
//!    Labels sampled from beyond the grid's edge are background. Drawn again while a tumour
//!    voxel would leave the grid.
//! 3. **Tumour move and scaling** (with [`TumourLabels`] and a tumour in the mask): the union
//!    of the tumour labels, moved by whole voxels and scaled about its centroid as one body;
//!    the place it left takes the brain label. Drawn again while a tumour voxel would leave
//!    the grid or land on background.
//!
//! [`check_mask`] then checks the result: the same grid and affine, no label the original
//! lacks, not empty, the tumour kept and inside the brain.
//!
//! # Example
//! ```
//! use medddpm_mask::augment::{augment, AugmentConfig, TumourLabels};
//! use medddpm_nifti::{Volume, IDENTITY};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // A 16^3 head (label 1) with a 2-voxel tumour (label 2).
//! let mut data = vec![0.0; 16 * 16 * 16];
//! for (at, v) in data.iter_mut().enumerate() {
//!     let ijk = [at % 16, at / 16 % 16, at / 256];
//!     if ijk.iter().all(|x| (3..13).contains(x)) {
//!         *v = 1.0;
//!     }
//! }
//! data[8 + 16 * (8 + 16 * 8)] = 2.0;
//! data[9 + 16 * (8 + 16 * 8)] = 2.0;
//! let mask = Volume::new([16, 16, 16], data, IDENTITY)?;
//! let labels = TumourLabels::whole_head();
//! let cfg = AugmentConfig { max_tumour_shift: 3, ..AugmentConfig::default() };
//! let (variant, record) = augment(&mask, Some(&labels), &cfg, 7)?;
//! assert_eq!(variant.affine(), mask.affine());
//! assert_eq!(record.seed, 7);
//! # Ok(())
//! # }
//! ```

mod check;
mod config;
mod draw;
mod error;
mod geometry;
mod stages;
mod tumour;

use medddpm_nifti::Volume;

pub use check::check_mask;
pub use config::{AugmentConfig, TumourLabels};
pub use draw::AugmentRecord;
pub use error::{AugmentError, MaskProblem, Stage};
pub use geometry::rotation;

/// A new mask from `mask`, drawn from `seed` under `cfg`, on the same grid, affine and header;
/// `labels` says which labels are the tumour and the brain (`None`: no tumour move, and no
/// tumour check). The same mask, labels, settings and seed always give the same variant.
///
/// Errors: invalid settings or labels, a volume that is no label map, an affine without
/// usable axes, no draw fitting in `cfg.max_tries` ([`AugmentError::NoFit`]), or a variant
/// failing [`check_mask`]. None names a file: callers add the mask's path.
pub fn augment(
    mask: &Volume,
    labels: Option<&TumourLabels>,
    cfg: &AugmentConfig,
    seed: u64,
) -> Result<(Volume, AugmentRecord), AugmentError> {
    cfg.validate()?;
    if let Some(l) = labels {
        l.validate()?;
    }
    if let Err(value) = check::label_counts(mask.data()) {
        let count = mask
            .data()
            .iter()
            .filter(|x| x.to_bits() == value.to_bits())
            .count();
        return Err(AugmentError::NotALabelMap { value, count });
    }
    let flip_axis = geometry::lr_axis(mask.affine())?;
    geometry::VoxelMap::new(mask.affine(), [0.0; 3], 1.0)?;
    let mut draws = draw::Draws::new(seed);
    // Whether each transform happens is drawn once; retries draw only the values.
    let flip = draws.chance(cfg.flip_probability);
    let rotate = draws.chance(cfg.rotation_probability);
    let rescale = draws.chance(cfg.scale_probability);
    let move_tumour = draws.chance(cfg.tumour_probability);
    let dims = mask.dims();
    let start = match flip {
        true => geometry::mirror(mask.data(), dims, flip_axis),
        false => mask.data().to_vec(),
    };
    let transforms = (rotate, rescale);
    let geo = stages::geometry(
        start,
        dims,
        mask.affine(),
        labels,
        transforms,
        cfg,
        &mut draws,
    )?;
    let moved = match labels {
        Some(l) if move_tumour => stages::tumour(&geo.data, dims, l, cfg, &mut draws)?,
        _ => None,
    };
    let record = AugmentRecord {
        seed,
        flip,
        flip_axis,
        rotation_deg: geo.rotation_deg,
        scale: geo.scale,
        tumour_shift: moved.as_ref().map_or([0; 3], |m| m.shift),
        tumour_scale: moved.as_ref().map_or(1.0, |m| m.scale),
        geometry_tries: geo.tries,
        tumour_tries: moved.as_ref().map_or(0, |m| m.tries),
    };
    let brain = mask.with_data(geo.data)?;
    let variant = match moved {
        Some(m) => mask.with_data(m.data)?,
        None => brain.clone(),
    };
    check_mask(mask, &variant, &brain, labels)?;
    Ok((variant, record))
}

#[cfg(test)]
mod picture;
#[cfg(test)]
mod tests;
