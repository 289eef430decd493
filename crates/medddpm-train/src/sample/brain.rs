//! The brain label of BraTS-style conditions: a model trained on segmentations with a brain
//! label (BraTS: 4) needs that outline to sample from; a segmentation holding tumour labels
//! only gets it from a brain mask of the same case.

use std::path::{Path, PathBuf};

use medddpm_mask::LabelScheme;
use medddpm_nifti::Volume;

use crate::error::BrainLabelProblem;
use crate::TrainError;

/// Where brain masks come from: one file for every segmentation, or a folder holding one per
/// case (found by the segmentation's file name, `<case>_brain`, `<case>_brainmask` or
/// `<case>`, `.nii.gz` or `.nii`). A voxel above 0 is brain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrainMasks(pub PathBuf);

/// The label of the scheme's channel named "brain" (BraTS: 4), if it has one.
pub fn brain_label(scheme: &LabelScheme) -> Option<i64> {
    scheme
        .channels
        .iter()
        .find(|c| c.name == "brain")
        .and_then(|c| c.labels.first().copied())
}

impl BrainMasks {
    /// The brain mask file for segmentation `seg_path` of case `case`.
    fn file_for(&self, seg_path: &Path, case: &str) -> Result<PathBuf, TrainError> {
        if !self.0.is_dir() {
            return match self.0.is_file() {
                true => Ok(self.0.clone()),
                false => Err(TrainError::io(
                    &self.0,
                    std::io::Error::new(std::io::ErrorKind::NotFound, "brain mask not found"),
                )),
            };
        }
        let mut tried = Vec::new();
        if let Some(name) = seg_path.file_name() {
            tried.push(name.to_string_lossy().into_owned());
        }
        for suffix in ["_brain", "_brainmask", ""] {
            for ext in [".nii.gz", ".nii"] {
                tried.push(format!("{case}{suffix}{ext}"));
            }
        }
        tried
            .iter()
            .map(|name| self.0.join(name))
            .find(|p| p.is_file())
            .ok_or_else(|| {
                brain_error(
                    seg_path,
                    BrainLabelProblem::NoMaskFor {
                        dir: self.0.clone(),
                        tried,
                    },
                )
            })
    }
}

fn brain_error(path: &Path, problem: BrainLabelProblem) -> TrainError {
    TrainError::BrainLabel {
        path: path.to_path_buf(),
        problem,
    }
}

/// Makes sure `seg` (read from `seg_path`) carries the scheme's brain label: with `masks`, the
/// segmentation must hold tumour labels only and gets the label where its case's brain mask
/// is above 0 and no tumour label is; without, it must already have brain voxels. Schemes
/// without a brain channel leave `seg` as it is.
pub fn ensure_brain_label(
    seg: &mut Volume,
    seg_path: &Path,
    case: &str,
    scheme: &LabelScheme,
    masks: Option<&BrainMasks>,
) -> Result<(), TrainError> {
    let Some(label) = brain_label(scheme) else {
        return match masks {
            None => Ok(()),
            Some(_) => Err(brain_error(
                seg_path,
                BrainLabelProblem::NoBrainChannel {
                    scheme: scheme.name.clone(),
                },
            )),
        };
    };
    let is_brain = |v: f32| v.round() as i64 == label;
    let voxels = seg.data().iter().filter(|&&v| is_brain(v)).count();
    let Some(masks) = masks else {
        return match voxels {
            0 => Err(brain_error(seg_path, BrainLabelProblem::Missing { label })),
            _ => Ok(()),
        };
    };
    if voxels > 0 {
        return Err(brain_error(
            seg_path,
            BrainLabelProblem::AlreadyPresent { label, voxels },
        ));
    }
    let mask_path = masks.file_for(seg_path, case)?;
    let brain = Volume::read(&mask_path)?;
    medddpm_nifti::ensure_same_grid(seg_path, seg, &mask_path, &brain)?;
    // Background may be 0 or, as the reference's preprocessing writes it, -1.
    let tumour: Vec<i64> = scheme
        .channels
        .iter()
        .filter(|c| c.name != "brain")
        .flat_map(|c| c.labels.iter().copied())
        .collect();
    let mut added = 0usize;
    for (s, &b) in seg.data_mut().iter_mut().zip(brain.data()) {
        if b > 0.0 && !tumour.contains(&(s.round() as i64)) {
            *s = label as f32;
            added += 1;
        }
    }
    if added == 0 {
        return Err(brain_error(
            seg_path,
            BrainLabelProblem::EmptyMask { mask: mask_path },
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use medddpm_nifti::IDENTITY;

    use super::*;

    /// A 4x4x4 segmentation: tumour labels 1-3 in the first voxels, background elsewhere.
    fn tumour_only() -> Volume {
        let mut data = vec![0.0; 64];
        data[..3].copy_from_slice(&[1.0, 2.0, 3.0]);
        Volume::new([4, 4, 4], data, IDENTITY).unwrap()
    }

    /// A brain mask covering the first half of the voxels (the tumour included).
    fn brain_mask(dir: &Path, name: &str) -> PathBuf {
        let data = (0..64).map(|i| if i < 32 { 1.0 } else { 0.0 }).collect();
        let path = dir.join(name);
        Volume::new([4, 4, 4], data, IDENTITY)
            .unwrap()
            .write(&path)
            .unwrap();
        path
    }

    /// [`ensure_brain_label`] of the BraTS scheme with the brain masks `masks`.
    fn with_masks(
        seg: &mut Volume,
        seg_path: &str,
        case: &str,
        masks: &BrainMasks,
    ) -> Result<(), TrainError> {
        ensure_brain_label(
            seg,
            Path::new(seg_path),
            case,
            &LabelScheme::brats(),
            Some(masks),
        )
    }

    fn problem(e: TrainError) -> BrainLabelProblem {
        match e {
            TrainError::BrainLabel { problem, .. } => problem,
            other => panic!("expected a brain-label error, got {other}"),
        }
    }

    #[test]
    fn a_brain_mask_adds_the_label_outside_the_tumour() {
        let dir = tempfile::tempdir().unwrap();
        let file = brain_mask(dir.path(), "any.nii.gz");
        let mut seg = tumour_only();
        let masks = BrainMasks(file);
        with_masks(&mut seg, "c_seg.nii.gz", "c", &masks).unwrap();
        let expected: Vec<f32> = (0..64)
            .map(|i| match i {
                0..=2 => (i + 1) as f32,
                3..=31 => 4.0,
                _ => 0.0,
            })
            .collect();
        assert_eq!(seg.data(), &expected[..]);
    }

    #[test]
    fn a_folder_is_searched_by_case_and_a_missing_mask_is_named() {
        let dir = tempfile::tempdir().unwrap();
        brain_mask(dir.path(), "case7_brain.nii.gz");
        let masks = BrainMasks(dir.path().to_path_buf());
        let mut seg = tumour_only();
        with_masks(&mut seg, "x/case7_seg.nii.gz", "case7", &masks).unwrap();
        assert_eq!(seg.data()[10], 4.0);
        let err =
            with_masks(&mut tumour_only(), "x/case8_seg.nii.gz", "case8", &masks).unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("x/case8_seg.nii.gz: no brain mask for it in"),
            "{text}"
        );
        assert!(text.contains("case8_brain.nii.gz"), "{text}");
        assert!(matches!(problem(err), BrainLabelProblem::NoMaskFor { .. }));
    }

    #[test]
    fn neither_a_brain_label_nor_a_mask_is_refused() {
        let brats = LabelScheme::brats();
        let err = ensure_brain_label(&mut tumour_only(), Path::new("s.nii"), "s", &brats, None)
            .unwrap_err();
        assert!(err.to_string().contains("--brain-mask"), "{err}");
        assert!(matches!(
            problem(err),
            BrainLabelProblem::Missing { label: 4 }
        ));

        // A segmentation that has it needs nothing more.
        let mut seg = tumour_only();
        seg.data_mut()[20] = 4.0;
        let before = seg.data().to_vec();
        ensure_brain_label(&mut seg, Path::new("s.nii"), "s", &brats, None).unwrap();
        assert_eq!(seg.data(), &before[..]);
    }

    #[test]
    fn a_mask_for_a_segmentation_that_has_label_4_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let masks = BrainMasks(brain_mask(dir.path(), "b.nii.gz"));
        let mut seg = tumour_only();
        seg.data_mut()[40] = 4.0;
        let err = with_masks(&mut seg, "s.nii", "s", &masks).unwrap_err();
        assert!(err.to_string().contains("raw BraTS"), "{err}");
        assert!(matches!(
            problem(err),
            BrainLabelProblem::AlreadyPresent {
                label: 4,
                voxels: 1
            }
        ));
    }

    #[test]
    fn a_mask_on_another_grid_or_empty_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        // The refusal of a mask of `dims` voxels, each `value`.
        let refusal = |name: &str, dims: [usize; 3], value: f32| {
            let path = dir.path().join(name);
            Volume::new(dims, vec![value; dims.iter().product()], IDENTITY)
                .unwrap()
                .write(&path)
                .unwrap();
            let masks = BrainMasks(path);
            with_masks(&mut tumour_only(), "s.nii", "s", &masks).unwrap_err()
        };
        let err = refusal("other.nii.gz", [4, 4, 5], 1.0);
        assert!(matches!(err, TrainError::Nifti(_)), "{err}");
        let err = refusal("empty.nii.gz", [4, 4, 4], 0.0);
        assert!(matches!(problem(err), BrainLabelProblem::EmptyMask { .. }));
    }

    #[test]
    fn schemes_without_a_brain_channel_are_left_alone() {
        let head = LabelScheme::whole_head();
        let mut seg = tumour_only();
        ensure_brain_label(&mut seg, Path::new("s.nii"), "s", &head, None).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let masks = BrainMasks(brain_mask(dir.path(), "b.nii.gz"));
        let err =
            ensure_brain_label(&mut seg, Path::new("s.nii"), "s", &head, Some(&masks)).unwrap_err();
        assert!(matches!(
            problem(err),
            BrainLabelProblem::NoBrainChannel { .. }
        ));
    }
}
