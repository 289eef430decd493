//! Finding and pairing files: the whole-head layout (pairs by file name), the BraTS layout
//! (pairs by case id across the modality folders) and mask lists for sampling.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{DataError, BRATS_MODALITIES};

/// The files of one example.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) id: String,
    pub(super) mask: PathBuf,
    /// One file per image channel.
    pub(super) images: Vec<PathBuf>,
}

/// The masks to sample from: `path` itself if it is a NIfTI file, else every `.nii`/`.nii.gz`
/// in the folder `path`, sorted by name. An empty folder or a missing path is an error.
pub fn list_masks(path: &Path) -> Result<Vec<PathBuf>, DataError> {
    if path.is_file() && nifti_stem(path).is_some() {
        return Ok(vec![path.to_path_buf()]);
    }
    if !path.is_dir() {
        return Err(DataError::NotFound {
            path: path.to_path_buf(),
        });
    }
    Ok(list_nifti(path, "mask")?.into_values().collect())
}

pub use medddpm_nifti::nifti_stem;

/// The NIfTI files of `dir` keyed by id (sorted); errors for a missing or empty folder and for
/// two files with one id.
fn list_nifti(dir: &Path, role: &str) -> Result<BTreeMap<String, PathBuf>, DataError> {
    if !dir.is_dir() {
        return Err(DataError::MissingFolder {
            path: dir.to_path_buf(),
            role: role.into(),
        });
    }
    let io_err = |source| DataError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut out = BTreeMap::new();
    for item in std::fs::read_dir(dir).map_err(io_err)? {
        let path = item.map_err(io_err)?.path();
        let Some(id) = nifti_stem(&path).map(str::to_string) else {
            continue;
        };
        if !path.is_file() {
            continue;
        }
        if let Some(first) = out.insert(id.clone(), path.clone()) {
            let (first, second) = if first < path {
                (first, path)
            } else {
                (path, first)
            };
            return Err(DataError::DuplicateId { id, first, second });
        }
    }
    if out.is_empty() {
        return Err(DataError::EmptyFolder {
            path: dir.to_path_buf(),
            role: role.into(),
        });
    }
    Ok(out)
}

/// A whole-head `file` without its partner, which would have the same name in `other_dir`.
fn unpaired(file: PathBuf, role: &str, other_role: &str, other_dir: &Path) -> DataError {
    DataError::Unpaired {
        expected_name: file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        file,
        role: role.into(),
        other_role: other_role.into(),
        other_dir: other_dir.to_path_buf(),
    }
}

pub(super) fn pair_whole_head(mask_dir: &Path, image_dir: &Path) -> Result<Vec<Entry>, DataError> {
    let masks = list_nifti(mask_dir, "mask")?;
    let mut images = list_nifti(image_dir, "image")?;
    let mut entries = Vec::with_capacity(masks.len());
    for (id, mask) in masks {
        let Some(image) = images.remove(&id) else {
            return Err(unpaired(mask, "mask", "image", image_dir));
        };
        entries.push(Entry {
            id,
            mask,
            images: vec![image],
        });
    }
    if let Some((_, image)) = images.into_iter().next() {
        return Err(unpaired(image, "image", "mask", mask_dir));
    }
    Ok(entries)
}

/// BraTS files of one modality folder keyed by case id (`<case>_<modality>` stripped).
fn brats_cases(root: &Path, modality: &str) -> Result<BTreeMap<String, PathBuf>, DataError> {
    let suffix = format!("_{modality}");
    list_nifti(&root.join(modality), modality)?
        .into_iter()
        .map(|(stem, path)| match stem.strip_suffix(&suffix) {
            Some(case) if !case.is_empty() => Ok((case.to_string(), path)),
            _ => Err(DataError::BadBratsName {
                path,
                modality: modality.into(),
            }),
        })
        .collect()
}

pub(super) fn pair_brats(root: &Path) -> Result<Vec<Entry>, DataError> {
    if !root.is_dir() {
        return Err(DataError::MissingFolder {
            path: root.to_path_buf(),
            role: "BraTS root".into(),
        });
    }
    let segs = brats_cases(root, "seg")?;
    let mut modalities = Vec::with_capacity(BRATS_MODALITIES.len());
    for m in BRATS_MODALITIES {
        let dir = root.join(m);
        // A modality folder that is missing altogether is reported for the first case, which
        // names both the case and the file expected.
        let files = if dir.exists() {
            brats_cases(root, m)?
        } else {
            BTreeMap::new()
        };
        modalities.push(files);
    }
    let mut entries = Vec::with_capacity(segs.len());
    for (case, seg) in &segs {
        let mut images = Vec::with_capacity(BRATS_MODALITIES.len());
        for (m, files) in BRATS_MODALITIES.iter().zip(&mut modalities) {
            match files.remove(case) {
                Some(p) => images.push(p),
                None => {
                    return Err(DataError::MissingModality {
                        case: case.clone(),
                        modality: m.to_string(),
                        expected: root.join(m).join(format!("{case}_{m}.nii.gz")),
                    })
                }
            }
        }
        entries.push(Entry {
            id: case.clone(),
            mask: seg.clone(),
            images,
        });
    }
    for (m, files) in BRATS_MODALITIES.iter().zip(modalities) {
        if let Some((case, file)) = files.into_iter().next() {
            return Err(DataError::Unpaired {
                file,
                role: m.to_string(),
                other_role: "seg".into(),
                expected_name: format!("{case}_seg.nii.gz"),
                other_dir: root.join("seg"),
            });
        }
    }
    Ok(entries)
}
