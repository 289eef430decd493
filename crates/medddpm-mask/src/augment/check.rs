//! The check every augmented mask passes before it is used.

use std::collections::BTreeMap;

use medddpm_nifti::Volume;

use super::config::TumourLabels;
use super::error::MaskProblem;
use crate::label_of;

/// How many voxels hold each label, or the first value that is no integer label.
pub(crate) fn label_counts(data: &[f32]) -> Result<BTreeMap<i64, usize>, f32> {
    let mut counts = BTreeMap::new();
    // Masks hold long runs of one value: remember the last one.
    let mut last: Option<(u32, i64)> = None;
    for &v in data {
        let label = match last {
            Some((bits, l)) if bits == v.to_bits() => l,
            _ => {
                let l = label_of(v).ok_or(v)?;
                last = Some((v.to_bits(), l));
                l
            }
        };
        *counts.entry(label).or_insert(0) += 1;
    }
    Ok(counts)
}

/// Checks that `augmented` is a valid variant of `original`: the same grid and affine, only
/// labels the original has, something other than background, and with tumour labels, a
/// tumour where the original has one, every tumour voxel of it inside the brain.
///
/// A variant's tumour is inside the brain when each of its voxels holds a brain or tumour
/// label in `brain`, the mask the tumour was placed into: the original itself, or after a
/// flip, rotation or scaling, the original so transformed (the augmented mask cannot be its
/// own reference, as its tumour voxels are brain by definition).
pub fn check_mask(
    original: &Volume,
    augmented: &Volume,
    brain: &Volume,
    labels: Option<&TumourLabels>,
) -> Result<(), MaskProblem> {
    for (name, v) in [("augmented", augmented), ("brain reference", brain)] {
        if v.dims() != original.dims() {
            let detail = format!(
                "{name} dimensions {:?}, original {:?}",
                v.dims(),
                original.dims()
            );
            return Err(MaskProblem::GridChanged { detail });
        }
        if !v.same_grid(original) {
            let detail = format!(
                "{name} affine {:?}, original {:?}",
                v.affine(),
                original.affine()
            );
            return Err(MaskProblem::GridChanged { detail });
        }
    }
    let before = label_counts(original.data()).map_err(|value| MaskProblem::NotALabel { value })?;
    let after = label_counts(augmented.data()).map_err(|value| MaskProblem::NotALabel { value })?;
    if let Some((&label, &voxels)) = after.iter().find(|(l, _)| !before.contains_key(l)) {
        return Err(MaskProblem::NewLabel {
            label,
            voxels,
            original: before.keys().copied().collect(),
        });
    }
    if after.keys().all(|&l| l == 0) {
        return Err(MaskProblem::Empty);
    }
    let Some(labels) = labels else {
        return Ok(());
    };
    let has_tumour = |c: &BTreeMap<i64, usize>| c.keys().any(|&l| labels.is_tumour(l));
    if has_tumour(&before) && !has_tumour(&after) {
        return Err(MaskProblem::TumourLost);
    }
    tumour_inside(augmented, brain, labels)
}

/// Every tumour voxel of `augmented` lies on a brain or tumour label of `brain`.
fn tumour_inside(
    augmented: &Volume,
    brain: &Volume,
    labels: &TumourLabels,
) -> Result<(), MaskProblem> {
    let tumour = |v: f32| label_of(v).is_some_and(|l| labels.is_tumour(l));
    let in_brain = |v: f32| label_of(v).is_some_and(|l| labels.is_brain(l));
    let outside: Vec<usize> = augmented
        .data()
        .iter()
        .zip(brain.data())
        .enumerate()
        .filter(|(_, (&a, &b))| tumour(a) && !in_brain(b))
        .map(|(at, _)| at)
        .collect();
    let Some(&at) = outside.first() else {
        return Ok(());
    };
    let [ni, nj, _] = augmented.dims();
    Err(MaskProblem::TumourOutsideBrain {
        voxels: outside.len(),
        first: [at % ni, (at / ni) % nj, at / (ni * nj)],
    })
}

#[cfg(test)]
mod tests {
    use medddpm_nifti::IDENTITY;

    use super::*;

    fn vol(data: &[f32]) -> Volume {
        Volume::new([data.len(), 1, 1], data.to_vec(), IDENTITY).unwrap()
    }

    fn check(original: &[f32], augmented: &[f32]) -> Result<(), MaskProblem> {
        let o = vol(original);
        check_mask(&o, &vol(augmented), &o, Some(&TumourLabels::whole_head()))
    }

    #[test]
    fn a_variant_with_the_original_labels_passes() {
        check(&[0.0, 1.0, 2.0, 1.0], &[0.0, 1.0, 1.0, 2.0]).unwrap();
        assert_eq!(check(&[0.0, 1.0, 2.0], &[0.0, 1.0, 2.0]), Ok(()));
    }

    #[test]
    fn each_problem_is_named() {
        let new = check(&[0.0, 1.0, 2.0], &[0.0, 4.0, 2.0]).unwrap_err();
        assert!(matches!(
            new,
            MaskProblem::NewLabel {
                label: 4,
                voxels: 1,
                ..
            }
        ));
        assert!(new
            .to_string()
            .contains("not in the original (labels [0, 1, 2])"));
        assert_eq!(check(&[0.0, 1.0], &[0.0, 0.0]), Err(MaskProblem::Empty));
        assert_eq!(
            check(&[1.0, 2.0], &[1.0, 1.0]),
            Err(MaskProblem::TumourLost)
        );
        assert_eq!(
            check(&[0.0, 1.0], &[0.5, 1.0]),
            Err(MaskProblem::NotALabel { value: 0.5 })
        );
        // The tumour moved onto voxel 0, background in the mask it was placed into.
        let outside = check(&[0.0, 1.0, 2.0], &[2.0, 1.0, 1.0]).unwrap_err();
        assert_eq!(
            outside,
            MaskProblem::TumourOutsideBrain {
                voxels: 1,
                first: [0, 0, 0]
            }
        );
        let o = vol(&[0.0, 1.0]);
        let mut shifted = IDENTITY;
        shifted[0][3] = 1.0;
        let moved = Volume::new([2, 1, 1], vec![0.0, 1.0], shifted).unwrap();
        let grid = check_mask(&o, &moved, &o, None).unwrap_err();
        assert!(matches!(grid, MaskProblem::GridChanged { .. }), "{grid}");
        let longer = vol(&[0.0, 1.0, 1.0]);
        assert!(check_mask(&o, &longer, &o, None).is_err());
    }

    #[test]
    fn label_counts_count_and_refuse_fractions() {
        let c = label_counts(&[0.0, 0.0, 4.0, 2.0, 4.0]).unwrap();
        assert_eq!(c.into_iter().collect::<Vec<_>>(), [(0, 2), (2, 1), (4, 2)]);
        assert_eq!(
            label_counts(&[1.0, f32::NAN]).unwrap_err().to_bits(),
            f32::NAN.to_bits()
        );
    }
}
