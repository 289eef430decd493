//! `prepare brats`: raw BraTS 2021 cases to the layout the trainer's `brats` source reads,
//! as the reference's `preprocess_brats_data.py` does (spec section 4.2).
//!
//! Per case: every file centre-cropped (or padded) to 192x192x144 with torchio's `CropOrPad`
//! convention (the odd voxel removed at the start: 24/24, 24/24, 6/5 from 240x240x155; the
//! affine's origin follows, so every kept voxel keeps its world position); each modality
//! min-max scaled to [-1, 1] over the cropped volume; the segmentation relabelled: enhancing
//! tumour 4 -> 3, and brain 4 where the T1 is above its background (the rescaled T1 > -1) and
//! no tumour label is set.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use medddpm_nifti::Volume;
use serde::{Deserialize, Serialize};

use crate::report::{Report, Skipped};
use crate::runner::{run_cases, Progress};
use crate::{files, CaseProblem, PrepareError};

/// The image modalities, in the trainer's channel order.
pub const MODALITIES: [&str; 4] = ["t1", "t1ce", "t2", "flair"];
/// The segmentation's file suffix and output folder.
pub const SEG: &str = "seg";
/// Enhancing tumour in the raw BraTS segmentations.
pub const RAW_ENHANCING: i64 = 4;
/// Enhancing tumour after preprocessing (the released model's channel 3).
pub const ENHANCING: f32 = 3.0;
/// The brain label added by preprocessing.
pub const BRAIN: f32 = 4.0;

/// `prepare brats` settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BratsConfig {
    /// Grid after the centre crop or pad, NIfTI (i, j, k) order: the released model's
    /// 192x192x144.
    pub grid: [usize; 3],
    /// Labels a raw segmentation may hold (BraTS 2021: 0, 1 necrotic core, 2 oedema,
    /// 4 enhancing); a case with others is skipped.
    pub raw_labels: Vec<i64>,
    /// Cases prepared at once (0: the machine's cores, up to 4).
    pub jobs: usize,
    /// Replace existing outputs.
    pub overwrite: bool,
}

impl Default for BratsConfig {
    fn default() -> Self {
        Self {
            grid: [192, 192, 144],
            raw_labels: vec![0, 1, 2, RAW_ENHANCING],
            jobs: 0,
            overwrite: false,
        }
    }
}

/// What the report records about a run.
#[derive(Debug, Clone, Serialize)]
pub struct BratsRun {
    /// The raw folder.
    pub raw: PathBuf,
    /// The output folder.
    pub out: PathBuf,
    /// The case list, if one was given.
    pub cases_file: Option<PathBuf>,
    /// Case folders in `raw` that the case list does not name (not prepared).
    pub not_listed: usize,
    /// The settings used.
    pub config: BratsConfig,
}

/// A prepared case.
#[derive(Debug, Clone, Serialize)]
pub struct BratsDone {
    /// The case id.
    pub case: String,
    /// The raw grid.
    pub input_dims: [usize; 3],
    /// Voxels per output label (0 background, 1 necrotic core, 2 oedema, 3 enhancing, 4 brain).
    pub labels: BTreeMap<i64, u64>,
    /// Raw intensity range of each modality, in [t1, t1ce, t2, flair] order.
    pub raw_ranges: Vec<[f32; 2]>,
    /// The files written.
    pub outputs: Vec<PathBuf>,
}

crate::report::case_details_by_field!(BratsDone);

/// The five output files of a case: `out/{t1,t1ce,t2,flair,seg}/<case>_<modality>.nii.gz`.
pub fn output_paths(out: &Path, case: &str) -> Vec<PathBuf> {
    MODALITIES
        .iter()
        .chain(std::iter::once(&SEG))
        .map(|m| out.join(m).join(format!("{case}_{m}.nii.gz")))
        .collect()
}

/// The brain rule: voxels where the T1 is above its minimum (its background), which is the
/// reference's "rescaled T1 > -1" computed before scaling, so no rounding can move a voxel.
pub fn brain_voxels(t1: &[f32]) -> Vec<bool> {
    let lo = files::min_max(t1).map_or(0.0, |(lo, _)| lo);
    t1.iter().map(|&v| v > lo).collect()
}

/// Preprocessed labels from a raw segmentation and the T1 on its grid: 1 and 2 kept, 4 -> 3,
/// brain (4) where [`brain_voxels`] and no tumour, 0 elsewhere.
pub fn relabel(raw_seg: &[f32], t1: &[f32]) -> Vec<f32> {
    raw_seg
        .iter()
        .zip(brain_voxels(t1))
        .map(|(&s, brain)| match s as i64 {
            RAW_ENHANCING => ENHANCING,
            0 if brain => BRAIN,
            0 => 0.0,
            other => other as f32,
        })
        .collect()
}

/// Reads a case list: one case id per line (no header; blank lines and `#` comments skipped,
/// anything after a comma ignored), duplicates dropped.
pub fn read_case_list(path: &Path) -> Result<Vec<String>, PrepareError> {
    let text = std::fs::read_to_string(path).map_err(PrepareError::io(path))?;
    let mut ids: Vec<String> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let id = line.split(',').next().unwrap_or("").trim();
        if id.is_empty() || id.starts_with('#') {
            continue;
        }
        if id.contains(['/', '\\']) || id == "." || id == ".." || id.contains(char::is_whitespace) {
            return Err(PrepareError::BadCaseList {
                path: path.to_path_buf(),
                line: n + 1,
                problem: format!("'{id}' is not a case id (a folder name in the raw folder)"),
            });
        }
        if !ids.iter().any(|x| x == id) {
            ids.push(id.to_string());
        }
    }
    Ok(ids)
}

/// The case folders of `raw`, sorted (hidden ones left out).
fn case_folders(raw: &Path) -> Result<Vec<String>, PrepareError> {
    let mut cases = Vec::new();
    for item in std::fs::read_dir(raw).map_err(PrepareError::io(raw))? {
        let item = item.map_err(PrepareError::io(raw))?;
        let name = item.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') && item.path().is_dir() {
            cases.push(name);
        }
    }
    cases.sort();
    Ok(cases)
}

/// Prepares every case of `raw` (or those `cases_file` lists) into `out`, then writes
/// `out/prepare-report.json`. Bad cases are skipped with their reason; the run fails only
/// before starting (missing folders, a bad case list, outputs in the way).
pub fn prepare_brats(
    raw: &Path,
    out: &Path,
    cases_file: Option<&Path>,
    config: &BratsConfig,
    progress: &mut dyn Progress,
) -> Result<Report<BratsRun, BratsDone>, PrepareError> {
    if config.grid.contains(&0) {
        return Err(PrepareError::setting(
            "grid",
            config.grid,
            "every axis needs a voxel",
        ));
    }
    if !raw.is_dir() {
        return Err(PrepareError::MissingFolder {
            path: raw.to_path_buf(),
            role: "raw BraTS".into(),
        });
    }
    files::check_out_not_inside(out, raw, "raw BraTS")?;
    let folders = case_folders(raw)?;
    let (cases, mut skipped, not_listed) = match cases_file {
        None => (folders, Vec::new(), 0),
        Some(list) => {
            let wanted = read_case_list(list)?;
            let not_listed = folders.iter().filter(|f| !wanted.contains(f)).count();
            let (present, absent): (Vec<String>, Vec<String>) =
                wanted.into_iter().partition(|c| folders.contains(c));
            let absent = absent
                .into_iter()
                .map(|c| {
                    let expected = raw.join(&c);
                    Skipped::new(c, CaseProblem::NotFound { expected })
                })
                .collect();
            (present, absent, not_listed)
        }
    };
    if cases.is_empty() && skipped.is_empty() {
        return Err(PrepareError::NothingFound {
            path: raw.to_path_buf(),
            what: "case folders (<case>/<case>_{t1,t1ce,t2,flair,seg}.nii.gz)".into(),
        });
    }
    let mut planned: Vec<PathBuf> = cases.iter().flat_map(|c| output_paths(out, c)).collect();
    planned.push(out.join(crate::REPORT_FILE));
    // Each case writes four modalities and a segmentation on the grid.
    let at_once = crate::runner::worker_count(config.jobs, cases.len());
    files::check_memory(config.grid, 5, at_once)?;
    files::check_outputs(&planned, config.overwrite)?;
    let subdirs: Vec<&str> = MODALITIES.iter().copied().chain([SEG]).collect();
    files::create_dirs(out, &subdirs)?;
    let (done, failed) = run_cases(
        &cases,
        config.jobs,
        String::clone,
        |case| prepare_case(&raw.join(case), case, out, config),
        progress,
    );
    skipped.extend(failed);
    let run = BratsRun {
        raw: raw.to_path_buf(),
        out: out.to_path_buf(),
        cases_file: cases_file.map(Path::to_path_buf),
        not_listed,
        config: config.clone(),
    };
    Report::new("brats", run, done, skipped).written(out)
}

/// The five input files of a case (`.nii.gz`, else `.nii`), or the reason it cannot run.
fn find_inputs(dir: &Path, case: &str) -> Result<Vec<PathBuf>, CaseProblem> {
    let mut found = Vec::new();
    let (mut names, mut expected) = (Vec::new(), Vec::new());
    for m in MODALITIES.iter().chain(std::iter::once(&SEG)) {
        match files::find_nifti(dir, &format!("{case}_{m}")) {
            Ok(p) => found.push(p),
            Err(p) => {
                names.push(m.to_string());
                expected.push(p);
            }
        }
    }
    if names.is_empty() {
        Ok(found)
    } else {
        Err(CaseProblem::MissingFiles { names, expected })
    }
}

/// One case from its raw folder `dir` to `out`.
fn prepare_case(
    dir: &Path,
    case: &str,
    out: &Path,
    config: &BratsConfig,
) -> Result<BratsDone, CaseProblem> {
    let inputs = find_inputs(dir, case)?;
    let (image_paths, seg_path) = inputs.split_at(MODALITIES.len());
    let seg_path = &seg_path[0];
    let mut images: Vec<Volume> = image_paths
        .iter()
        .map(|p| files::read_image(p))
        .collect::<Result<_, _>>()?;
    let seg = files::read(seg_path)?;
    for (p, v) in image_paths
        .iter()
        .zip(&images)
        .skip(1)
        .chain([(seg_path, &seg)])
    {
        files::same_grid(&image_paths[0], &images[0], p, v)?;
    }
    files::check_labels(seg_path, &seg, &config.raw_labels)?;
    let input_dims = seg.dims();
    let crop = |v: &Volume, p: &Path, fill: f32| {
        v.crop_or_pad(config.grid, fill)
            .map_err(|e| CaseProblem::unreadable(p, e))
    };
    let mut raw_ranges = Vec::with_capacity(MODALITIES.len());
    for (v, p) in images.iter_mut().zip(image_paths) {
        let (lo, hi) = files::min_max(v.data()).unwrap_or((0.0, 0.0));
        raw_ranges.push([lo, hi]);
        // Padding takes the image's minimum, which min-max scaling then maps to -1.
        *v = crop(v, p, lo)?;
    }
    let seg = crop(&seg, seg_path, 0.0)?;
    // The brain rule reads the cropped T1 before scaling (see `brain_voxels`).
    let labels = relabel(seg.data(), images[0].data());
    let seg = seg
        .with_data(labels)
        .map_err(|e| CaseProblem::unreadable(seg_path, e))?;
    for (v, p) in images.iter_mut().zip(image_paths) {
        files::scale_minus_one_one(p, v)?;
    }
    let outputs = output_paths(out, case);
    for (v, target) in images.iter().zip(&outputs) {
        files::write_image(target, v)?;
    }
    files::write_labels(&outputs[MODALITIES.len()], &seg)?;
    Ok(BratsDone {
        case: case.to_string(),
        input_dims,
        labels: files::label_counts(seg.data()),
        raw_ranges,
        outputs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relabel_follows_the_reference() {
        let seg = [0.0, 0.0, 1.0, 2.0, 4.0, 4.0];
        let t1 = [5.0, 7.0, 5.0, 9.0, 8.0, 5.0];
        // Minimum 5 is background; tumour labels win over brain.
        assert_eq!(relabel(&seg, &t1), vec![0.0, 4.0, 1.0, 2.0, 3.0, 3.0]);
    }

    #[test]
    fn case_list_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("cases.csv");
        std::fs::write(
            &p,
            "BraTS2021_00001\r\n\n# note\nBraTS2021_00002,x\nBraTS2021_00001\n",
        )
        .unwrap();
        assert_eq!(
            read_case_list(&p).unwrap(),
            ["BraTS2021_00001", "BraTS2021_00002"]
        );
        std::fs::write(&p, "ok\n../etc\n").unwrap();
        match read_case_list(&p) {
            Err(PrepareError::BadCaseList { line, .. }) => assert_eq!(line, 2),
            other => panic!("{other:?}"),
        }
    }
}
