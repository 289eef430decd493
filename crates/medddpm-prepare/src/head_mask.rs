//! `prepare head-mask`: a head (and optionally brain) label map from a T1 by thresholds and
//! morphology, with the thresholds reported in the image's own units.

use std::path::{Path, PathBuf};

use medddpm_nifti::Volume;
use serde::{Deserialize, Serialize};

use crate::morphology::{
    close, dilate, erode, fill_holes, largest_component, open, otsu, otsu_multi,
};
use crate::report::{CaseDetails, Report};
use crate::runner::{run_cases, Progress};
use crate::{files, CaseProblem, PrepareError};

/// Label of background, head and brain in the maps written.
pub const BACKGROUND: u8 = 0;
/// The head (everything inside the scalp that is not brain).
pub const HEAD: u8 = 1;
/// The brain, with `brain` on.
pub const BRAIN: u8 = 2;

/// How the head and brain are found. Distances are in mm, so they mean the same at any voxel
/// size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HeadMaskSettings {
    /// Histogram bins for Otsu's thresholds (between the image's minimum and maximum).
    pub bins: usize,
    /// Radius of the closing that smooths the head outline and closes the ear canals, nostrils
    /// and sinuses, so the head label is solid.
    pub closing_mm: f64,
    /// Also label the brain (2) inside the head (1).
    pub brain: bool,
    /// Radius of the closing of the head whose erosion bounds the brain search: smaller than
    /// `closing_mm`, so the air of the sinuses stays out of the dark class of the brain's
    /// threshold (with 8 mm the Colin27 brain's Dice fell from 0.976 to 0.956).
    pub brain_head_closing_mm: f64,
    /// The brain's threshold and core are found only deeper than this below the head's
    /// surface, which keeps scalp fat (bright on a T1) out of them; the core then grows back
    /// by this distance through voxels above the threshold.
    pub brain_erosion_mm: f64,
    /// Classes of Otsu's method inside the eroded head; the brain is above the lowest
    /// threshold. 2 (dark: skull, CSF; bright: brain) suits whole-head T1s; 3 (dark, grey,
    /// white matter) suits skull-stripped images such as the nilearn MNI152 template, where
    /// 2 classes split grey from white matter.
    pub brain_classes: usize,
    /// Radius of the opening that cuts the thin bridges between the brain's core and the
    /// tissue around it before its largest component is kept.
    pub brain_opening_mm: f64,
    /// Radius of the final closing, which takes in the CSF of the sulci as a skull-stripping
    /// tool's brain mask does.
    pub brain_closing_mm: f64,
}

/// Opening that detaches what the brain's core picked up while growing back (mm).
const REGROW_OPENING_MM: f64 = 1.5;

impl Default for HeadMaskSettings {
    fn default() -> Self {
        Self {
            bins: 256,
            closing_mm: 8.0,
            brain: false,
            brain_head_closing_mm: 4.0,
            brain_erosion_mm: 8.0,
            brain_classes: 2,
            brain_opening_mm: 2.0,
            brain_closing_mm: 8.0,
        }
    }
}

impl HeadMaskSettings {
    /// Refuses settings that cannot work (negative distances, fewer than 2 bins).
    pub fn validate(&self) -> Result<(), PrepareError> {
        if self.bins < 2 {
            return Err(PrepareError::setting("bins", self.bins, "need at least 2"));
        }
        if !(2..=3).contains(&self.brain_classes) {
            return Err(PrepareError::setting(
                "brain_classes",
                self.brain_classes,
                "must be 2 or 3",
            ));
        }
        for (name, v) in [
            ("closing_mm", self.closing_mm),
            ("brain_head_closing_mm", self.brain_head_closing_mm),
            ("brain_erosion_mm", self.brain_erosion_mm),
            ("brain_opening_mm", self.brain_opening_mm),
            ("brain_closing_mm", self.brain_closing_mm),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(PrepareError::setting(name, v, "must be a distance >= 0 mm"));
            }
        }
        Ok(())
    }
}

/// A label map and how it was found.
#[derive(Debug, Clone, PartialEq)]
pub struct HeadMask {
    /// Labels in file order: [`BACKGROUND`], [`HEAD`], [`BRAIN`].
    pub labels: Vec<u8>,
    /// Otsu's threshold of the whole image (head = above it), in the image's units.
    pub head_threshold: f64,
    /// Otsu's threshold inside the eroded head (brain = above it), with `brain` on.
    pub brain_threshold: Option<f64>,
}

impl HeadMask {
    /// The labels as a volume on the image's grid (same affine and header).
    pub fn to_volume(&self, image: &Volume) -> Result<Volume, medddpm_nifti::NiftiError> {
        image.with_data(self.labels.iter().map(|&l| l as f32).collect())
    }
}

/// Finds the head, and with `settings.brain` the brain, in a T1 `image` (`path` names it in
/// errors). Head: Otsu's threshold of the whole image, the largest connected component, a
/// closing, holes filled (background is what connects to the grid's border). Brain: see
/// [`brain_in_head`], inside the head closed by `brain_head_closing_mm` only.
pub fn head_mask(
    image: &Volume,
    path: &Path,
    settings: &HeadMaskSettings,
) -> Result<HeadMask, CaseProblem> {
    let (dims, spacing, data) = (image.dims(), image.spacing(), image.data());
    let Some(t_head) = otsu(data.iter().copied(), settings.bins) else {
        let value = data.first().copied().unwrap_or(0.0);
        return Err(CaseProblem::ConstantImage {
            path: path.to_path_buf(),
            value,
        });
    };
    let above: Vec<bool> = data.iter().map(|&v| v as f64 > t_head).collect();
    let component = largest_component(&above, dims);
    if !component.iter().any(|&h| h) {
        return Err(empty_label(path, "head", t_head));
    }
    let closed = |mask: &[bool], mm: f64| fill_holes(&close(mask, dims, spacing, mm), dims);
    // Closing by the larger ball after the smaller equals closing by the larger alone.
    let brain_head = settings.brain.then(|| {
        closed(
            &component,
            settings.brain_head_closing_mm.min(settings.closing_mm),
        )
    });
    let head = closed(
        brain_head.as_ref().unwrap_or(&component),
        settings.closing_mm,
    );
    let mut labels: Vec<u8> = head
        .iter()
        .map(|&h| if h { HEAD } else { BACKGROUND })
        .collect();
    let mut brain_threshold = None;
    if let Some(brain_head) = brain_head {
        let (brain, t_brain) = brain_in_head(image, path, &brain_head, settings)?;
        for (l, &b) in labels.iter_mut().zip(&brain) {
            if b {
                *l = BRAIN;
            }
        }
        brain_threshold = Some(t_brain);
    }
    Ok(HeadMask {
        labels,
        head_threshold: t_head,
        brain_threshold,
    })
}

fn empty_label(path: &Path, what: &str, threshold: f64) -> CaseProblem {
    CaseProblem::EmptyLabel {
        path: path.to_path_buf(),
        what: what.into(),
        threshold,
    }
}

/// The brain inside `head` and its threshold: the head eroded by `brain_erosion_mm`, Otsu's
/// (lowest) threshold of the voxels there, the voxels above it opened and their largest
/// component kept with its holes filled (the core); the core grown back by the erosion
/// distance through head voxels above the threshold, lightly opened, its largest component
/// closed and filled.
pub fn brain_in_head(
    image: &Volume,
    path: &Path,
    head: &[bool],
    settings: &HeadMaskSettings,
) -> Result<(Vec<bool>, f64), CaseProblem> {
    let (dims, spacing, data) = (image.dims(), image.spacing(), image.data());
    let inner = erode(head, dims, spacing, settings.brain_erosion_mm);
    let inside = || data.iter().zip(&inner).filter(|(_, &m)| m).map(|(&v, _)| v);
    let t = otsu_multi(inside(), settings.bins, settings.brain_classes)
        .map(|t| t[0])
        .ok_or_else(|| empty_label(path, "brain", f64::NAN))?;
    let tissue: Vec<bool> = data
        .iter()
        .zip(head)
        .map(|(&v, &h)| h && v as f64 > t)
        .collect();
    let core: Vec<bool> = tissue.iter().zip(&inner).map(|(&a, &b)| a && b).collect();
    let core = open(&core, dims, spacing, settings.brain_opening_mm);
    let core = fill_holes(&largest_component(&core, dims), dims);
    if !core.iter().any(|&b| b) {
        return Err(empty_label(path, "brain", t));
    }
    let reach = dilate(&core, dims, spacing, settings.brain_erosion_mm);
    let grown: Vec<bool> = core
        .iter()
        .zip(&reach)
        .zip(&tissue)
        .map(|((&c, &r), &t)| c || (r && t))
        .collect();
    let grown = largest_component(&open(&grown, dims, spacing, REGROW_OPENING_MM), dims);
    let brain = fill_holes(
        &close(&grown, dims, spacing, settings.brain_closing_mm),
        dims,
    );
    Ok((brain, t))
}

/// `prepare head-mask` settings.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct HeadMaskConfig {
    /// How heads and brains are found.
    #[serde(flatten)]
    pub settings: HeadMaskSettings,
    /// Cases prepared at once (0: the machine's cores, up to 4).
    pub jobs: usize,
    /// Replace existing outputs.
    pub overwrite: bool,
}

/// What the report records about a run.
#[derive(Debug, Clone, Serialize)]
pub struct HeadMaskRun {
    /// The folder of T1 images.
    pub images: PathBuf,
    /// The output folder.
    pub out: PathBuf,
    /// The settings used.
    pub config: HeadMaskConfig,
}

/// A label map written.
#[derive(Debug, Clone, Serialize)]
pub struct HeadMaskDone {
    /// The file stem.
    pub case: String,
    /// The output file.
    pub output: PathBuf,
    /// Head threshold, in the image's units.
    pub head_threshold: f64,
    /// Brain threshold, in the image's units.
    pub brain_threshold: Option<f64>,
    /// Voxels labelled head (1), brain excluded.
    pub head_voxels: u64,
    /// Voxels labelled brain (2).
    pub brain_voxels: u64,
}

impl CaseDetails for HeadMaskDone {
    fn case(&self) -> &str {
        &self.case
    }
    fn summary(&self) -> Option<String> {
        let mut s = format!(
            "head threshold {:.4} ({} head voxels)",
            self.head_threshold, self.head_voxels
        );
        if let Some(t) = self.brain_threshold {
            s += &format!(
                ", brain threshold {t:.4} ({} brain voxels)",
                self.brain_voxels
            );
        }
        Some(s)
    }
}

/// Writes `out/<stem>.nii.gz` for every image of `images`, on the image's grid, and
/// `out/prepare-report.json`.
pub fn prepare_head_masks(
    images: &Path,
    out: &Path,
    config: &HeadMaskConfig,
    progress: &mut dyn Progress,
) -> Result<Report<HeadMaskRun, HeadMaskDone>, PrepareError> {
    config.settings.validate()?;
    let inputs: Vec<(String, PathBuf)> = files::list_nifti(images, "image")?.into_iter().collect();
    if inputs.is_empty() {
        return Err(PrepareError::NothingFound {
            path: images.to_path_buf(),
            what: "NIfTI images (*.nii, *.nii.gz)".into(),
        });
    }
    let output = |stem: &str| out.join(format!("{stem}.nii.gz"));
    let mut planned: Vec<PathBuf> = inputs.iter().map(|(s, _)| output(s)).collect();
    planned.push(out.join(crate::REPORT_FILE));
    files::check_outputs(&planned, config.overwrite)?;
    files::create_dirs(out, &[])?;
    let (done, skipped) = run_cases(
        &inputs,
        config.jobs,
        |(stem, _)| stem.clone(),
        |(stem, path)| {
            let image = files::read_image(path)?;
            let mask = head_mask(&image, path, &config.settings)?;
            let target = output(stem);
            let volume = mask
                .to_volume(&image)
                .map_err(|e| CaseProblem::write_failed(&target, e))?;
            files::write_labels(&target, &volume)?;
            let count = |l: u8| mask.labels.iter().filter(|&&x| x == l).count() as u64;
            Ok(HeadMaskDone {
                case: stem.clone(),
                output: target,
                head_threshold: mask.head_threshold,
                brain_threshold: mask.brain_threshold,
                head_voxels: count(HEAD),
                brain_voxels: count(BRAIN),
            })
        },
        progress,
    );
    let run = HeadMaskRun {
        images: images.to_path_buf(),
        out: out.to_path_buf(),
        config: config.clone(),
    };
    Report::new("head-mask", run, done, skipped).written(out)
}
