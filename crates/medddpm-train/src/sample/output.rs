//! What sampling writes: file names carrying the case, seed and sample number, the checks
//! made before the first sample, and the NIfTI files on the mask's own grid.

use std::path::{Path, PathBuf};

use medddpm_nifti::Volume;

use super::{PreparedMask, SampleOptions};
use crate::data::to_mask_grid;
use crate::TrainError;

/// The name (without extension) of sample `n` of mask `id` drawn with `seed`: a second run
/// with another seed writes beside the first instead of over it.
pub fn sample_stem(id: &str, seed: u64, n: usize) -> String {
    format!("{id}_seed-{seed}_sample-{n}")
}

/// The NIfTI file names of one sample: `<stem>.nii.gz`, or `<stem>_<channel>.nii.gz` per
/// channel when there are several.
fn sample_file_names(stem: &str, channel_names: &[String]) -> Vec<String> {
    if channel_names.len() <= 1 {
        return vec![format!("{stem}.nii.gz")];
    }
    channel_names
        .iter()
        .map(|chan| format!("{stem}_{chan}.nii.gz"))
        .collect()
}

/// Every file `sample_masks` would write for mask ids `ids`, in the order it writes them.
pub(super) fn planned_outputs(
    out_dir: &Path,
    ids: &[String],
    options: &SampleOptions,
    channel_names: &[String],
) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for id in ids {
        for n in 0..options.samples_per_mask {
            let stem = sample_stem(id, options.seed, n);
            out.extend(
                sample_file_names(&stem, channel_names)
                    .into_iter()
                    .map(|f| out_dir.join(f)),
            );
            if options.trajectory.is_some() {
                out.push(out_dir.join(format!("{stem}_trajectory.gif")));
            }
        }
    }
    out
}

/// Creates `dir` and proves a file can be written there, so a read-only or missing output
/// folder fails before hours of sampling rather than after the first sample.
fn check_writable(dir: &Path) -> Result<(), TrainError> {
    std::fs::create_dir_all(dir).map_err(|e| TrainError::io(dir, e))?;
    let probe = dir.join(format!(".medddpm-write-test-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|e| TrainError::io(dir, e))?;
    std::fs::remove_file(&probe).map_err(|e| TrainError::io(&probe, e))
}

/// The output folder must be writable and (unless `options.overwrite`) hold none of `planned`.
pub(super) fn check_outputs(
    out_dir: &Path,
    planned: &[PathBuf],
    options: &SampleOptions,
) -> Result<(), TrainError> {
    check_writable(out_dir)?;
    if options.overwrite {
        return Ok(());
    }
    let existing: Vec<&PathBuf> = planned.iter().filter(|p| p.exists()).collect();
    match existing.first() {
        None => Ok(()),
        Some(first) => Err(TrainError::WouldOverwrite {
            dir: out_dir.to_path_buf(),
            count: existing.len(),
            first: first
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        }),
    }
}

/// Brings a sample back to its mask's own grid first (padding there is the network's
/// background, -1, which the rescaling then maps with everything else), then rescales it.
/// Returns the values and the grid they are on.
pub(super) fn on_mask_grid(
    mut values: Vec<f32>,
    mask: &PreparedMask,
    policy: crate::data::GridPolicy,
    rescale: Option<(f32, f32)>,
) -> Result<(Vec<f32>, &Volume), TrainError> {
    let grid = match &mask.original {
        Some(original) => {
            values = to_mask_grid(values, &mask.reference, original, policy)?;
            original
        }
        None => &mask.reference,
    };
    if let Some((lo, hi)) = rescale {
        for v in &mut values {
            *v = lo + (v.clamp(-1.0, 1.0) + 1.0) * 0.5 * (hi - lo);
        }
    }
    Ok((values, grid))
}

/// The case a mask stands for, as its samples are named: the file name without `.nii` /
/// `.nii.gz` (any case) and without a trailing `_seg` (BraTS names a case's segmentation
/// `<case>_seg.nii.gz`, its modalities `<case>_t1.nii.gz`, ...); the whole file name for
/// anything else.
pub fn case_id(path: &Path) -> String {
    let Some(stem) = crate::data::nifti_stem(path) else {
        return path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
    };
    let cut = stem.len().saturating_sub(4);
    match stem.get(cut..) {
        Some(tail) if cut > 0 && tail.eq_ignore_ascii_case("_seg") => stem[..cut].to_string(),
        _ => stem.to_string(),
    }
}

/// Writes one sample (channels of (nk, nj, ni) voxels in file order) as NIfTI files on
/// `reference`'s grid: `<stem>.nii.gz`, or `<stem>_<channel>.nii.gz` when there are several
/// channels (one name per channel in `channel_names`).
pub fn write_sample(
    dir: &Path,
    stem: &str,
    values: &[f32],
    reference: &Volume,
    channel_names: &[String],
) -> Result<Vec<PathBuf>, TrainError> {
    let voxels = reference.voxel_count();
    let names = sample_file_names(stem, channel_names);
    debug_assert_eq!(names.len() * voxels, values.len());
    let mut out = Vec::new();
    for (c, name) in names.into_iter().enumerate() {
        let path = dir.join(name);
        reference
            .with_data(values[c * voxels..(c + 1) * voxels].to_vec())?
            .write(&path)?;
        out.push(path);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_ids_drop_the_extension_and_a_seg_suffix() {
        let id = |name: &str| case_id(Path::new(name));
        assert_eq!(id("dir/BraTS2021_01306_seg.nii.gz"), "BraTS2021_01306");
        assert_eq!(id("X_SEG.NII.GZ"), "X");
        assert_eq!(id("sample_3.nii"), "sample_3");
        assert_eq!(id("_seg.nii.gz"), "_seg");
        assert_eq!(id("segment.nii.gz"), "segment");
        assert_eq!(id("notes.txt"), "notes.txt");
    }

    #[test]
    fn multi_channel_samples_get_one_file_per_modality() {
        let names: Vec<String> = ["t1", "t1ce", "t2", "flair"].map(String::from).to_vec();
        let stem = sample_stem("BraTS2021_01306", 7, 0);
        assert_eq!(
            sample_file_names(&stem, &names),
            [
                "BraTS2021_01306_seed-7_sample-0_t1.nii.gz",
                "BraTS2021_01306_seed-7_sample-0_t1ce.nii.gz",
                "BraTS2021_01306_seed-7_sample-0_t2.nii.gz",
                "BraTS2021_01306_seed-7_sample-0_flair.nii.gz",
            ]
        );
        assert_eq!(sample_file_names("a", &names[..1]), ["a.nii.gz"]);
    }
}
