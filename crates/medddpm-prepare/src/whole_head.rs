//! `prepare whole-head`: image/mask pairs resampled to the model grid, in the trainer's
//! whole-head layout (`out/{image,mask}/<stem>.nii.gz`).
//!
//! Without a spacing the field of view is kept and the voxel size becomes extent / grid
//! (torchio `Resize`, [`Volume::resize`]); with one, the grid is centred on the volume's centre
//! at that spacing, cropping or padding the field of view. Either way the output affine is the
//! input's composed with the index map, so every output voxel centre names the world point it
//! was sampled at.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use medddpm_mask::LabelScheme;
use medddpm_nifti::{Interpolation, Volume};
use serde::{Deserialize, Serialize};

use crate::report::{Report, Skipped};
use crate::resample::{centred_index_map, resample};
use crate::runner::{run_cases, Progress};
use crate::{files, CaseProblem, PrepareError};

/// Intensity scaling of the images written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scaling {
    /// Intensities as read: the trainer normalises them (its `normalization` setting).
    #[default]
    None,
    /// Whole-volume min-max to [-1, 1].
    MinusOneOne,
}

/// `prepare whole-head` settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WholeHeadConfig {
    /// Model grid, NIfTI (i, j, k) order.
    pub grid: [usize; 3],
    /// Voxel size in mm along i, j, k; `None` keeps the field of view (spacing = extent / grid).
    pub spacing: Option<[f64; 3]>,
    /// Labels a mask may hold; a case with others is skipped. Default: the whole-head scheme's
    /// (0 background, 1 head, 2 tumour).
    pub labels: Vec<i64>,
    /// Intensity scaling of the images.
    pub scale: Scaling,
    /// Cases prepared at once (0: the machine's cores, up to 4).
    pub jobs: usize,
    /// Replace existing outputs.
    pub overwrite: bool,
}

impl Default for WholeHeadConfig {
    fn default() -> Self {
        Self {
            grid: [128; 3],
            spacing: None,
            labels: LabelScheme::whole_head().allowed_labels(),
            scale: Scaling::None,
            jobs: 0,
            overwrite: false,
        }
    }
}

impl WholeHeadConfig {
    fn validate(&self) -> Result<(), PrepareError> {
        if self.grid.contains(&0) {
            return Err(PrepareError::setting(
                "grid",
                self.grid,
                "every axis needs a voxel",
            ));
        }
        if let Some(s) = self.spacing {
            if s.iter().any(|x| !(x.is_finite() && *x > 0.0)) {
                return Err(PrepareError::setting(
                    "spacing",
                    s,
                    "voxel sizes must be > 0 mm",
                ));
            }
        }
        if self.labels.is_empty() {
            return Err(PrepareError::setting(
                "labels",
                &self.labels,
                "list at least one label",
            ));
        }
        Ok(())
    }
}

/// What the report records about a run.
#[derive(Debug, Clone, Serialize)]
pub struct WholeHeadRun {
    /// The image folder.
    pub images: PathBuf,
    /// The mask folder.
    pub masks: PathBuf,
    /// The output folder.
    pub out: PathBuf,
    /// The settings used.
    pub config: WholeHeadConfig,
}

/// A prepared pair.
#[derive(Debug, Clone, Serialize)]
pub struct WholeHeadDone {
    /// The file stem.
    pub case: String,
    /// The input grid.
    pub input_dims: [usize; 3],
    /// The input voxel size (mm).
    pub input_spacing: [f64; 3],
    /// The output voxel size (mm).
    pub output_spacing: [f64; 3],
    /// Output voxels per label.
    pub labels: BTreeMap<i64, u64>,
    /// Output image intensity range.
    pub image_range: [f32; 2],
}

crate::report::case_details_by_field!(WholeHeadDone);

/// One volume on the model grid: [`Volume::resize`] or the centred grid at `spacing`.
/// Positions outside the input take `fill`.
pub fn to_model_grid(
    v: &Volume,
    grid: [usize; 3],
    spacing: Option<[f64; 3]>,
    interp: Interpolation,
    fill: f32,
) -> Result<Volume, medddpm_nifti::NiftiError> {
    match spacing {
        None => v.resize(grid, interp),
        Some(s) => resample(v, grid, &centred_index_map(v, grid, s), interp, fill),
    }
}

/// A stem with its image and mask.
type Pair = (String, PathBuf, PathBuf);

/// The pairs of `images` and `masks` by stem, and the files without a partner as skipped
/// cases.
fn pair(images: &Path, masks: &Path) -> Result<(Vec<Pair>, Vec<Skipped>), PrepareError> {
    let image_files = files::list_nifti(images, "image")?;
    let mut mask_files = files::list_nifti(masks, "mask")?;
    if image_files.is_empty() && mask_files.is_empty() {
        return Err(PrepareError::NothingFound {
            path: images.to_path_buf(),
            what: "NIfTI images (*.nii, *.nii.gz)".into(),
        });
    }
    let unpaired = |path: PathBuf, partner: &str, dir: &Path| {
        let expected_name = medddpm_nifti::file_name(&path);
        CaseProblem::Unpaired {
            path,
            partner: partner.into(),
            expected_name,
            partner_dir: dir.to_path_buf(),
        }
    };
    let (mut pairs, mut skipped) = (Vec::new(), Vec::new());
    for (stem, image) in image_files {
        match mask_files.remove(&stem) {
            Some(mask) => pairs.push((stem, image, mask)),
            None => skipped.push(Skipped::new(stem, unpaired(image, "mask", masks))),
        }
    }
    for (stem, mask) in mask_files {
        skipped.push(Skipped::new(stem, unpaired(mask, "image", images)));
    }
    Ok((pairs, skipped))
}

/// Resamples every image/mask pair of `images` and `masks` to the model grid in
/// `out/{image,mask}/<stem>.nii.gz`, then writes `out/prepare-report.json`.
pub fn prepare_whole_head(
    images: &Path,
    masks: &Path,
    out: &Path,
    config: &WholeHeadConfig,
    progress: &mut dyn Progress,
) -> Result<Report<WholeHeadRun, WholeHeadDone>, PrepareError> {
    config.validate()?;
    let (pairs, mut skipped) = pair(images, masks)?;
    // Each case writes an image and a mask on the grid.
    files::check_memory(
        config.grid,
        2,
        crate::runner::worker_count(config.jobs, pairs.len()),
    )?;
    let outputs = |stem: &str| {
        let name = format!("{stem}.nii.gz");
        (out.join("image").join(&name), out.join("mask").join(name))
    };
    let mut planned: Vec<PathBuf> = pairs
        .iter()
        .flat_map(|(s, _, _)| {
            let (a, b) = outputs(s);
            [a, b]
        })
        .collect();
    planned.push(out.join(crate::REPORT_FILE));
    files::check_outputs(&planned, config.overwrite)?;
    files::create_dirs(out, &["image", "mask"])?;
    let (done, failed) = run_cases(
        &pairs,
        config.jobs,
        |(stem, _, _)| stem.clone(),
        |(stem, image, mask)| {
            let (image_out, mask_out) = outputs(stem);
            prepare_pair(stem, image, mask, &image_out, &mask_out, config)
        },
        progress,
    );
    skipped.extend(failed);
    let run = WholeHeadRun {
        images: images.to_path_buf(),
        masks: masks.to_path_buf(),
        out: out.to_path_buf(),
        config: config.clone(),
    };
    Report::new("whole-head", run, done, skipped).written(out)
}

/// One pair: read, check, resample, scale, write.
fn prepare_pair(
    stem: &str,
    image_path: &Path,
    mask_path: &Path,
    image_out: &Path,
    mask_out: &Path,
    config: &WholeHeadConfig,
) -> Result<WholeHeadDone, CaseProblem> {
    let image = files::read_image(image_path)?;
    let mask = files::read(mask_path)?;
    files::same_grid(image_path, &image, mask_path, &mask)?;
    files::check_labels(mask_path, &mask, &config.labels)?;
    let (lo, _) = files::min_max(image.data()).unwrap_or((0.0, 0.0));
    let regrid = |v: &Volume, p: &Path, interp, fill| {
        to_model_grid(v, config.grid, config.spacing, interp, fill)
            .map_err(|e| CaseProblem::unreadable(p, e))
    };
    // Outside the input the image takes its minimum (its background) and the mask label 0.
    let mut image_grid = regrid(&image, image_path, Interpolation::Linear, lo)?;
    let mask_grid = regrid(&mask, mask_path, Interpolation::Nearest, 0.0)?;
    if config.scale == Scaling::MinusOneOne {
        files::scale_minus_one_one(image_path, &mut image_grid)?;
    }
    files::write_image(image_out, &image_grid)?;
    files::write_labels(mask_out, &mask_grid)?;
    let (a, b) = files::min_max(image_grid.data()).unwrap_or((0.0, 0.0));
    Ok(WholeHeadDone {
        case: stem.to_string(),
        input_dims: image.dims(),
        input_spacing: image.spacing(),
        output_spacing: image_grid.spacing(),
        labels: files::label_counts(mask_grid.data()),
        image_range: [a, b],
    })
}
