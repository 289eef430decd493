//! Grid policies: images and masks onto the model grid for training and sampling, and samples
//! back onto their mask's own grid.

use std::path::Path;

use medddpm_mask::LabelScheme;
use medddpm_nifti::{Interpolation, Normalization, Volume};

use super::{DataError, GridPolicy};

/// Normalisation and grid policy for one image channel (crop/pad before, resize after the
/// intensity mapping, as the reference's BraTS and whole-head pipelines do).
pub(super) fn prepare_image(
    vol: Volume,
    path: &Path,
    norm: Normalization,
    grid: [usize; 3],
    policy: GridPolicy,
) -> Result<Volume, DataError> {
    if vol.dims() == grid {
        return Ok(vol.normalized(norm)?);
    }
    Ok(match policy {
        GridPolicy::Exact => return Err(wrong_grid(path, &vol, grid)),
        GridPolicy::Resize => vol.normalized(norm)?.resize(grid, Interpolation::Linear)?,
        GridPolicy::CropOrPad => {
            let fill = vol
                .data()
                .iter()
                .copied()
                .filter(|x| x.is_finite())
                .fold(f32::INFINITY, f32::min);
            let fill = if fill.is_finite() { fill } else { 0.0 };
            vol.crop_or_pad(grid, fill)?.normalized(norm)?
        }
    })
}

/// Grid policy for a label map: nearest neighbour or crop/pad with background 0.
pub fn regrid_mask(
    vol: Volume,
    path: &Path,
    grid: [usize; 3],
    policy: GridPolicy,
) -> Result<Volume, DataError> {
    if vol.dims() == grid {
        return Ok(vol);
    }
    Ok(match policy {
        GridPolicy::Exact => return Err(wrong_grid(path, &vol, grid)),
        GridPolicy::Resize => vol.resize(grid, Interpolation::Nearest)?,
        GridPolicy::CropOrPad => vol.crop_or_pad(grid, 0.0)?,
    })
}

fn wrong_grid(path: &Path, vol: &Volume, grid: [usize; 3]) -> DataError {
    DataError::WrongGrid {
        path: path.to_path_buf(),
        found: vol.dims(),
        expected: grid,
    }
}

/// Encodes one mask for sampling: reads it, applies the grid policy (nearest / crop-pad with
/// 0) and the label scheme. Returns the channel-major condition `(C, nk, nj, ni)`, its network
/// shape `[nk, nj, ni]`, and the mask volume as read (its affine and header are what the
/// generated images should carry).
pub fn load_condition(
    mask_path: &Path,
    scheme: &LabelScheme,
    grid: [usize; 3],
    policy: GridPolicy,
) -> Result<(Vec<f32>, [usize; 3], Volume), DataError> {
    condition_of(Volume::read(mask_path)?, mask_path, scheme, grid, policy)
}

/// [`load_condition`] of a label map already read (and perhaps completed, e.g. with a brain
/// label) from `mask_path`.
pub fn condition_of(
    original: Volume,
    mask_path: &Path,
    scheme: &LabelScheme,
    grid: [usize; 3],
    policy: GridPolicy,
) -> Result<(Vec<f32>, [usize; 3], Volume), DataError> {
    if grid.contains(&0) {
        return Err(DataError::InvalidConfig(format!(
            "grid {grid:?} has an empty axis"
        )));
    }
    let mask = regrid_mask(original.clone(), mask_path, grid, policy)?;
    let cond = scheme.encode(&mask, mask_path)?;
    Ok((cond, mask.network_shape(), original))
}

/// Brings a sample computed on `model_grid` (the mask after the grid policy) back to the mask's
/// own grid `original`, channel by channel: the inverse resize (linear) or crop-or-pad (with
/// the background value -1).
pub fn to_mask_grid(
    values: Vec<f32>,
    model_grid: &Volume,
    original: &Volume,
    policy: GridPolicy,
) -> Result<Vec<f32>, DataError> {
    let voxels = model_grid.voxel_count();
    let mut out = Vec::with_capacity(values.len() / voxels * original.voxel_count());
    for channel in values.chunks(voxels) {
        let on_model = model_grid.with_data(channel.to_vec())?;
        let back = match policy {
            GridPolicy::CropOrPad => on_model.crop_or_pad(original.dims(), -1.0)?,
            _ => on_model.resize(original.dims(), Interpolation::Linear)?,
        };
        out.extend(back.into_data());
    }
    Ok(out)
}
