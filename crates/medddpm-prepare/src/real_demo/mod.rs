//! `prepare real-demo`: a labelled set for a real-MRI demo from the MNI152 2009a template and
//! Colin27 (what `scripts/fetch-real-data.sh` fetches), in the whole-head layout with the
//! whole-head scheme's label values: 0 background, 1 head, 2 brain.
//!
//! Head: [`head_mask`](crate::head_mask::head_mask) on the T1. Brain: MNI where the grey- plus
//! white-matter probability exceeds 0.5, closed by `head.brain_closing_mm` and filled (so the
//! sulci and ventricles count as brain, as in a skull-stripping mask), Colin27 where the
//! skull-stripped `ch2bet` is non-zero. nilearn's MNI T1 is itself skull-stripped, so its
//! "head" is the brain and a thin rim of CSF. Each subject then gives `copies`
//! augmented copies ([`augment`]) sampled on a small grid around its head.

pub mod augment;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use medddpm_nifti::{Interpolation, Volume};
use serde::{Deserialize, Serialize};

use crate::head_mask::{head_mask, HeadMaskSettings};
use crate::morphology::{close, fill_holes};
use crate::report::Report;
use crate::resample::{invert, resample};
use crate::runner::{run_cases, Progress};
use crate::{files, CaseProblem, PrepareError};
use augment::{copy_index_map, head_grid, jitter_intensity, AugmentSettings, Draw};

/// The subjects, in output order.
pub const SUBJECTS: [&str; 2] = ["mni152", "colin27"];

/// `prepare real-demo` settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RealDemoConfig {
    /// Augmented copies per subject.
    pub copies: usize,
    /// Output grid, NIfTI (i, j, k) order.
    pub grid: [usize; 3],
    /// Seed of the augmentations.
    pub seed: u64,
    /// Space kept around the head's bounding box on every side, in mm (room for the jitter).
    pub margin_mm: f64,
    /// Probability above which a voxel of the MNI grey- plus white-matter maps is brain.
    pub brain_probability: f64,
    /// The augmentations' ranges.
    pub augment: AugmentSettings,
    /// How the head is found on each T1 (`brain` is ignored: the brain comes from the
    /// subjects' own maps).
    pub head: HeadMaskSettings,
    /// Replace existing outputs.
    pub overwrite: bool,
}

impl Default for RealDemoConfig {
    fn default() -> Self {
        Self {
            copies: 8,
            grid: [32; 3],
            seed: 0,
            margin_mm: 12.0,
            brain_probability: 0.5,
            augment: AugmentSettings::default(),
            head: HeadMaskSettings::default(),
            overwrite: false,
        }
    }
}

/// A subject's T1 and its label map (0/1/2) on the T1's grid.
#[derive(Debug, Clone)]
pub struct Subject {
    /// `mni152` or `colin27`.
    pub name: String,
    /// The T1.
    pub image: Volume,
    /// Labels in file order.
    pub labels: Vec<f32>,
    /// The head threshold found on the T1.
    pub head_threshold: f64,
}

/// The files of a subject under the data folder: T1 first, then the brain's source maps.
pub fn subject_files(data: &Path, name: &str) -> Vec<PathBuf> {
    match name {
        "mni152" => ["t1", "gm", "wm"]
            .iter()
            .map(|m| {
                data.join("mni152-2009")
                    .join(format!("mni_icbm152_{m}_tal_nlin_sym_09a_converted.nii.gz"))
            })
            .collect(),
        _ => ["ch2", "ch2bet"]
            .iter()
            .map(|m| data.join("colin27").join(format!("{m}.nii.gz")))
            .collect(),
    }
}

/// Reads a subject and builds its label map.
pub fn load_subject(
    data: &Path,
    name: &str,
    config: &RealDemoConfig,
) -> Result<Subject, CaseProblem> {
    let paths = subject_files(data, name);
    let missing: Vec<PathBuf> = paths.iter().filter(|p| !p.is_file()).cloned().collect();
    if !missing.is_empty() {
        let names = missing
            .iter()
            .map(|p| medddpm_nifti::file_name(p))
            .collect();
        return Err(CaseProblem::MissingFiles {
            names,
            expected: missing,
        });
    }
    let image = files::read_image(&paths[0])?;
    let mut maps = Vec::new();
    for p in &paths[1..] {
        let v = files::read_image(p)?;
        files::same_grid(&paths[0], &image, p, &v)?;
        maps.push(v);
    }
    let head_settings = HeadMaskSettings {
        brain: false,
        ..config.head.clone()
    };
    let head = head_mask(&image, &paths[0], &head_settings)?;
    let brain: Vec<bool> = if maps.len() == 2 {
        // Probability maps may be stored as 0-255.
        let unit = |v: &Volume| {
            if files::min_max(v.data()).is_some_and(|(_, hi)| hi > 1.0) {
                255.0
            } else {
                1.0
            }
        };
        let (g, w) = (unit(&maps[0]), unit(&maps[1]));
        let p: Vec<bool> = maps[0]
            .data()
            .iter()
            .zip(maps[1].data())
            .map(|(&a, &b)| (a / g + b / w) as f64 > config.brain_probability)
            .collect();
        let closed = close(
            &p,
            image.dims(),
            image.spacing(),
            config.head.brain_closing_mm,
        );
        fill_holes(&closed, image.dims())
    } else {
        maps[0].data().iter().map(|&v| v > 0.0).collect()
    };
    let labels = head
        .labels
        .iter()
        .zip(&brain)
        .map(|(&h, &b)| if b { 2.0 } else { h.min(1) as f32 })
        .collect();
    Ok(Subject {
        name: name.to_string(),
        image,
        labels,
        head_threshold: head.head_threshold,
    })
}

/// One augmented copy written.
#[derive(Debug, Clone, Serialize)]
pub struct CopyDone {
    /// `<subject>_<copy>`, the output file stem.
    pub case: String,
    /// Subject name.
    pub subject: String,
    /// Copy number.
    pub copy: usize,
    /// The head threshold found on the subject's T1 (its units).
    pub head_threshold: f64,
    /// The output voxel size (mm).
    pub spacing_mm: [f64; 3],
    /// The augmentation drawn.
    pub draw: Draw,
    /// Voxels per label.
    pub labels: BTreeMap<i64, u64>,
    /// Image range (always [-1, 1]).
    pub image_range: [f32; 2],
}

crate::report::case_details_by_field!(CopyDone);

/// Copy `copy` of `subject` (number `index` in [`SUBJECTS`]): image and label volumes on the
/// output grid.
pub fn make_copy(
    subject: &Subject,
    index: usize,
    copy: usize,
    config: &RealDemoConfig,
) -> Result<(Volume, Volume, Draw), CaseProblem> {
    let path = PathBuf::from(&subject.name);
    let empty = || CaseProblem::EmptyLabel {
        path: path.clone(),
        what: "head".into(),
        threshold: subject.head_threshold,
    };
    let (grid_map, centre) = head_grid(
        &subject.image,
        &subject.labels,
        config.grid,
        config.margin_mm,
    )
    .ok_or_else(empty)?;
    let out_affine = crate::resample::matmul(subject.image.affine(), &grid_map);
    let draw = Draw::new(&config.augment, config.seed, index, copy);
    let inv = invert(subject.image.affine()).ok_or_else(empty)?;
    let map = copy_index_map(&inv, &out_affine, &draw.world_map(centre));
    let range = files::min_max(subject.image.data()).unwrap_or((0.0, 1.0));
    let bad = |e| CaseProblem::unreadable(&path, e);
    let image = resample(
        &subject.image,
        config.grid,
        &map,
        Interpolation::Linear,
        range.0,
    )
    .map_err(bad)?;
    let labels = subject
        .image
        .with_data(subject.labels.clone())
        .map_err(bad)?;
    let mask = resample(&labels, config.grid, &map, Interpolation::Nearest, 0.0).map_err(bad)?;
    // Both were sampled through `map`; give them the output grid's own affine.
    let mut image = Volume::new(config.grid, image.into_data(), out_affine).map_err(bad)?;
    let mask = Volume::new(config.grid, mask.into_data(), out_affine).map_err(bad)?;
    jitter_intensity(&mut image, range, &draw, centre);
    files::scale_minus_one_one(&path, &mut image)?;
    Ok((image, mask, draw))
}

/// What the report records about a run.
#[derive(Debug, Clone, Serialize)]
pub struct RealDemoRun {
    /// The data folder.
    pub data: PathBuf,
    /// The output folder.
    pub out: PathBuf,
    /// The settings used.
    pub config: RealDemoConfig,
}

/// Writes `out/{image,mask}/<subject>_<copy>.nii.gz` for both subjects and
/// `out/prepare-report.json`; a subject whose files are missing is skipped with its reason.
pub fn prepare_real_demo(
    data: &Path,
    out: &Path,
    config: &RealDemoConfig,
    progress: &mut dyn Progress,
) -> Result<Report<RealDemoRun, CopyDone>, PrepareError> {
    config.head.validate()?;
    if config.grid.contains(&0) || config.copies == 0 {
        return Err(PrepareError::setting(
            "grid/copies",
            (config.grid, config.copies),
            "need at least one voxel per axis and one copy",
        ));
    }
    if !data.is_dir() {
        return Err(PrepareError::MissingFolder {
            path: data.to_path_buf(),
            role: "real data (mni152-2009/, colin27/)".into(),
        });
    }
    let outputs = |name: &str, copy: usize| {
        let file = format!("{name}_{copy}.nii.gz");
        [out.join("image").join(&file), out.join("mask").join(file)]
    };
    let mut planned: Vec<PathBuf> = SUBJECTS
        .iter()
        .flat_map(|s| (0..config.copies).flat_map(move |c| outputs(s, c)))
        .collect();
    planned.push(out.join(crate::REPORT_FILE));
    files::check_outputs(&planned, config.overwrite)?;
    files::create_dirs(out, &["image", "mask"])?;
    let items: Vec<(usize, &str)> = SUBJECTS.iter().copied().enumerate().collect();
    let (done, skipped) = run_cases(
        &items,
        0,
        |(_, name)| name.to_string(),
        |&(index, name)| {
            let subject = load_subject(data, name, config)?;
            (0..config.copies)
                .map(|copy| {
                    let (image, mask, draw) = make_copy(&subject, index, copy, config)?;
                    let [image_out, mask_out] = outputs(name, copy);
                    files::write_image(&image_out, &image)?;
                    files::write_labels(&mask_out, &mask)?;
                    Ok(CopyDone {
                        case: format!("{name}_{copy}"),
                        subject: name.to_string(),
                        copy,
                        head_threshold: subject.head_threshold,
                        spacing_mm: image.spacing(),
                        draw,
                        labels: files::label_counts(mask.data()),
                        image_range: files::min_max(image.data()).map_or([0.0; 2], |(a, b)| [a, b]),
                    })
                })
                .collect::<Result<Vec<_>, CaseProblem>>()
        },
        progress,
    );
    let run = RealDemoRun {
        data: data.to_path_buf(),
        out: out.to_path_buf(),
        config: config.clone(),
    };
    let done = done.into_iter().flatten().collect();
    Report::new("real-demo", run, done, skipped).written(out)
}
