//! Finding inputs, checking outputs before a run, and the per-volume checks every command
//! shares (readable, finite, labels allowed, one grid).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use medddpm_nifti::{available_memory, DataType, Volume, WriteOptions};

use crate::{CaseProblem, PrepareError};

pub use medddpm_nifti::nifti_stem;

/// The NIfTI files of `dir` by stem (sorted). A stem with both a `.nii.gz` and a `.nii` keeps
/// the `.nii.gz`.
pub(crate) fn list_nifti(
    dir: &Path,
    role: &str,
) -> Result<BTreeMap<String, PathBuf>, PrepareError> {
    if !dir.is_dir() {
        return Err(PrepareError::MissingFolder {
            path: dir.to_path_buf(),
            role: role.into(),
        });
    }
    let mut out = BTreeMap::new();
    for item in std::fs::read_dir(dir).map_err(PrepareError::io(dir))? {
        let path = item.map_err(PrepareError::io(dir))?.path();
        let Some(stem) = nifti_stem(&path).map(str::to_string) else {
            continue;
        };
        if !path.is_file() {
            continue;
        }
        let gz = path.to_string_lossy().to_ascii_lowercase().ends_with(".gz");
        if gz || !out.contains_key(&stem) {
            out.insert(stem, path);
        }
    }
    Ok(out)
}

/// `dir/<name>.nii.gz`, or `dir/<name>.nii` when only that exists; `Err` with the `.nii.gz`
/// path when neither does.
pub(crate) fn find_nifti(dir: &Path, name: &str) -> Result<PathBuf, PathBuf> {
    let gz = dir.join(format!("{name}.nii.gz"));
    if gz.is_file() {
        return Ok(gz);
    }
    let plain = dir.join(format!("{name}.nii"));
    if plain.is_file() {
        return Ok(plain);
    }
    Err(gz)
}

/// Fails with [`PrepareError::OutputsExist`] when any of `outputs` exists and `overwrite` is
/// off: checked before any case starts, so a refused run writes nothing.
pub(crate) fn check_outputs(outputs: &[PathBuf], overwrite: bool) -> Result<(), PrepareError> {
    if overwrite {
        return Ok(());
    }
    let existing: Vec<&PathBuf> = outputs.iter().filter(|p| p.exists()).collect();
    match existing.first() {
        None => Ok(()),
        Some(first) => Err(PrepareError::OutputsExist {
            first: (*first).clone(),
            count: existing.len(),
        }),
    }
}

/// Fails with [`PrepareError::TooLarge`] when `cases` cases of `volumes` float volumes on
/// `grid` (a lower bound of what a run holds: its outputs alone) exceed the memory the system
/// has available, checked before anything is allocated (a 1024^3 grid was killed for memory
/// after 145 s; a 100000^3 one asked for petabytes). No check where the system does not say.
pub(crate) fn check_memory(
    grid: [usize; 3],
    volumes: u64,
    cases: usize,
) -> Result<(), PrepareError> {
    const GIB: f64 = (1u64 << 30) as f64;
    let needed = grid
        .iter()
        .try_fold(4u64, |n, &d| n.checked_mul(d as u64))
        .and_then(|n| n.checked_mul(volumes))
        .and_then(|n| n.checked_mul(cases as u64));
    let Some(available) = available_memory() else {
        return Ok(());
    };
    match needed {
        Some(n) if n <= available => Ok(()),
        _ => Err(PrepareError::TooLarge {
            grid,
            volumes,
            cases,
            needed_gib: needed.map_or(f64::INFINITY, |n| n as f64 / GIB),
            available_gib: available as f64 / GIB,
        }),
    }
}

/// Fails with [`PrepareError::OutputInsideInput`] when `out` is `input` or lies inside it
/// (through links too): checked before anything is written.
pub(crate) fn check_out_not_inside(
    out: &Path,
    input: &Path,
    role: &str,
) -> Result<(), PrepareError> {
    let Ok(input_abs) = input.canonicalize() else {
        return Ok(()); // a missing input is refused by its own check
    };
    // `out` may not exist yet: its nearest existing ancestor, resolved, and the rest as given.
    let absolute = std::path::absolute(out).map_err(PrepareError::io(out))?;
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    while !existing.exists() {
        let (Some(parent), Some(name)) = (existing.parent(), existing.file_name()) else {
            break;
        };
        rest.push(name.to_os_string());
        existing = parent;
    }
    let mut resolved = existing
        .canonicalize()
        .unwrap_or_else(|_| existing.to_path_buf());
    resolved.extend(rest.iter().rev());
    if resolved.starts_with(&input_abs) {
        return Err(PrepareError::OutputInsideInput {
            out: out.to_path_buf(),
            input: input.to_path_buf(),
            role: role.to_string(),
        });
    }
    Ok(())
}

/// Creates `out` and its `subdirs`.
pub(crate) fn create_dirs(out: &Path, subdirs: &[&str]) -> Result<(), PrepareError> {
    std::fs::create_dir_all(out).map_err(PrepareError::io(out))?;
    for s in subdirs {
        let d = out.join(s);
        std::fs::create_dir_all(&d).map_err(PrepareError::io(d))?;
    }
    Ok(())
}

/// Reads a volume; a failure becomes the case's reason to be skipped.
pub(crate) fn read(path: &Path) -> Result<Volume, CaseProblem> {
    Volume::read(path).map_err(|e| CaseProblem::unreadable(path, e))
}

/// Reads an image and refuses NaN or infinite voxels.
pub(crate) fn read_image(path: &Path) -> Result<Volume, CaseProblem> {
    let v = read(path)?;
    let count = v.data().iter().filter(|x| !x.is_finite()).count();
    if count > 0 {
        return Err(CaseProblem::NonFinite {
            path: path.to_path_buf(),
            count,
        });
    }
    Ok(v)
}

/// Fails unless `b` lies on `a`'s voxel grid (dims and affine within 1e-4).
pub(crate) fn same_grid(
    a_path: &Path,
    a: &Volume,
    b_path: &Path,
    b: &Volume,
) -> Result<(), CaseProblem> {
    if a.same_grid(b) {
        return Ok(());
    }
    let detail = if a.dims() != b.dims() {
        "dimensions differ".to_string()
    } else {
        format!("affines differ: {:?} vs {:?}", a.affine(), b.affine())
    };
    Err(CaseProblem::GridMismatch {
        a: a_path.to_path_buf(),
        a_dims: a.dims(),
        b: b_path.to_path_buf(),
        b_dims: b.dims(),
        detail,
    })
}

/// Voxel counts per label; fails with the values found that are not in `allowed` (or not
/// integers at all).
pub(crate) fn check_labels(
    path: &Path,
    labels: &Volume,
    allowed: &[i64],
) -> Result<BTreeMap<i64, u64>, CaseProblem> {
    let mut counts: BTreeMap<i64, u64> = BTreeMap::new();
    let mut bad: Vec<f64> = Vec::new();
    let mut last: Option<(u32, i64)> = None;
    for &v in labels.data() {
        if let Some((bits, l)) = last {
            if bits == v.to_bits() {
                *counts.entry(l).or_default() += 1;
                continue;
            }
        }
        let l = v as i64;
        if v.is_finite() && v.fract() == 0.0 && allowed.contains(&l) {
            *counts.entry(l).or_default() += 1;
            last = Some((v.to_bits(), l));
        } else {
            let x = v as f64;
            if !bad.iter().any(|b| b.to_bits() == x.to_bits()) && bad.len() < 16 {
                bad.push(x);
            }
            last = None;
        }
    }
    if bad.is_empty() {
        return Ok(counts);
    }
    bad.sort_by(f64::total_cmp);
    Err(CaseProblem::UnexpectedLabels {
        path: path.to_path_buf(),
        found: bad,
        allowed: allowed.to_vec(),
    })
}

/// Minimum and maximum of the finite voxels (`None` for an empty or all-NaN volume).
pub(crate) fn min_max(data: &[f32]) -> Option<(f32, f32)> {
    data.iter()
        .filter(|v| v.is_finite())
        .fold(None, |acc, &v| match acc {
            None => Some((v, v)),
            Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
        })
}

/// Min-max scales `v` to [-1, 1] in place (as torchio `RescaleIntensity((-1, 1))`); a
/// constant image is refused, since it has no range to scale.
pub(crate) fn scale_minus_one_one(path: &Path, v: &mut Volume) -> Result<(), CaseProblem> {
    let (lo, hi) = min_max(v.data()).unwrap_or((0.0, 0.0));
    if hi <= lo {
        return Err(CaseProblem::ConstantImage {
            path: path.to_path_buf(),
            value: lo,
        });
    }
    let (lo, span) = (lo as f64, (hi - lo) as f64);
    for x in v.data_mut() {
        *x = ((*x as f64 - lo) / span * 2.0 - 1.0).clamp(-1.0, 1.0) as f32;
    }
    Ok(())
}

/// Writes a float32 image.
pub(crate) fn write_image(path: &Path, v: &Volume) -> Result<(), CaseProblem> {
    v.write(path)
        .map_err(|e| CaseProblem::write_failed(path, e))
}

/// Writes a label map in the smallest integer type that holds its labels (uint8 for every
/// scheme we ship).
pub(crate) fn write_labels(path: &Path, v: &Volume) -> Result<(), CaseProblem> {
    let (lo, hi) = min_max(v.data()).unwrap_or((0.0, 0.0));
    let dtype = if lo >= 0.0 && hi <= 255.0 {
        DataType::U8
    } else if lo >= i16::MIN as f32 && hi <= i16::MAX as f32 {
        DataType::I16
    } else {
        DataType::I32
    };
    v.write_with(path, WriteOptions::dtype(dtype))
        .map_err(|e| CaseProblem::write_failed(path, e))
}

/// Voxel counts per label of a label map known to hold only integers.
pub(crate) fn label_counts(data: &[f32]) -> BTreeMap<i64, u64> {
    let mut counts = BTreeMap::new();
    for &v in data {
        *counts.entry(v as i64).or_default() += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_check_names_the_bad_values() {
        let v = Volume::new([4, 1, 1], vec![0.0, 1.0, 3.0, 2.5], medddpm_nifti::IDENTITY).unwrap();
        match check_labels(Path::new("m.nii"), &v, &[0, 1, 2]) {
            Err(CaseProblem::UnexpectedLabels { found, .. }) => assert_eq!(found, vec![2.5, 3.0]),
            other => panic!("{other:?}"),
        }
        let ok = check_labels(Path::new("m.nii"), &v, &[0, 1, 3, 5]);
        assert!(ok.is_err());
        let v = Volume::new([3, 1, 1], vec![0.0, 1.0, 1.0], medddpm_nifti::IDENTITY).unwrap();
        let counts = check_labels(Path::new("m.nii"), &v, &[0, 1]).unwrap();
        assert_eq!(counts.into_iter().collect::<Vec<_>>(), vec![(0, 1), (1, 2)]);
    }

    #[test]
    fn scaling_refuses_constant_images() {
        let mut v = Volume::new([2, 1, 1], vec![3.0, 3.0], medddpm_nifti::IDENTITY).unwrap();
        assert!(matches!(
            scale_minus_one_one(Path::new("c.nii"), &mut v),
            Err(CaseProblem::ConstantImage { value, .. }) if value == 3.0
        ));
        let mut v =
            Volume::new([3, 1, 1], vec![10.0, 20.0, 15.0], medddpm_nifti::IDENTITY).unwrap();
        scale_minus_one_one(Path::new("c.nii"), &mut v).unwrap();
        assert_eq!(v.data(), &[-1.0, 1.0, 0.0]);
    }
}
