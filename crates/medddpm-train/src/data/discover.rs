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

/// One image of a training set, as `medddpm eval --train-dir` compares samples with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrainingImage {
    /// The case: the file stem (whole-head, plain folder) or the BraTS case id.
    pub id: String,
    /// The BraTS modality (`t1`, `t1ce`, `t2`, `flair`); `None` for single-channel layouts.
    pub channel: Option<String>,
    /// The file.
    pub path: PathBuf,
}

/// The images of the training set in `dir`, sorted by case (then BraTS channel order):
/// - a BraTS root (`dir/seg/` beside the modality folders): every case's four modalities,
///   paired and checked as training pairs them;
/// - a whole-head root (`dir/image/`, what the phantoms and `medddpm prepare` write): its
///   images, paired with `dir/mask/` as training pairs them when that folder exists;
/// - any other folder: the `.nii`/`.nii.gz` files in it (e.g. a whole-head image folder).
pub fn training_images(dir: &Path) -> Result<Vec<TrainingImage>, DataError> {
    let plain = |id: String, path: PathBuf| TrainingImage {
        id,
        channel: None,
        path,
    };
    if dir.join("seg").is_dir() {
        let entries = pair_brats(dir)?;
        return Ok(entries
            .into_iter()
            .flat_map(|e| {
                let id = e.id;
                e.images
                    .into_iter()
                    .zip(BRATS_MODALITIES)
                    .map(move |(path, m)| TrainingImage {
                        id: id.clone(),
                        channel: Some(m.to_string()),
                        path,
                    })
            })
            .collect());
    }
    let images = dir.join("image");
    if images.is_dir() {
        if dir.join("mask").is_dir() {
            let entries = pair_whole_head(&dir.join("mask"), &images)?;
            return Ok(entries
                .into_iter()
                .flat_map(|e| {
                    let id = e.id;
                    e.images.into_iter().map(move |p| plain(id.clone(), p))
                })
                .collect());
        }
        return Ok(list_nifti(&images, "image")?
            .into_iter()
            .map(|(id, p)| plain(id, p))
            .collect());
    }
    Ok(list_nifti(dir, "training image")?
        .into_iter()
        .map(|(id, p)| plain(id, p))
        .collect())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::training_images;
    use crate::data::DataError;

    fn touch(dir: &Path, names: &[&str]) {
        for n in names {
            let p = dir.join(n);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, b"").unwrap();
        }
    }

    #[test]
    fn training_sets_in_each_layout() {
        let tmp = tempfile::tempdir().unwrap();
        let whole = tmp.path().join("whole");
        touch(
            &whole,
            &[
                "mask/b.nii.gz",
                "mask/a.nii",
                "image/a.nii.gz",
                "image/b.nii",
            ],
        );
        let got = training_images(&whole).unwrap();
        let ids: Vec<&str> = got.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(got[0].path, whole.join("image/a.nii.gz"));
        assert!(got.iter().all(|t| t.channel.is_none()));
        // The image folder itself is a plain folder of images.
        assert_eq!(training_images(&whole.join("image")).unwrap(), got);

        // A mask without its image is refused, as training refuses it.
        touch(&whole, &["mask/c.nii.gz"]);
        let err = training_images(&whole).unwrap_err();
        assert!(matches!(err, DataError::Unpaired { .. }), "{err}");

        let brats = tmp.path().join("brats");
        let mut files = vec!["seg/X_1_seg.nii.gz".to_string()];
        for m in ["t1", "t1ce", "t2", "flair"] {
            files.push(format!("{m}/X_1_{m}.nii.gz"));
        }
        touch(
            &brats,
            &files.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        let got = training_images(&brats).unwrap();
        let channels: Vec<_> = got.iter().map(|t| t.channel.as_deref().unwrap()).collect();
        assert_eq!(channels, ["t1", "t1ce", "t2", "flair"]);
        assert!(got.iter().all(|t| t.id == "X_1"));

        let empty = tmp.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        let err = training_images(&empty).unwrap_err().to_string();
        assert!(
            err.contains("training image folder") && err.contains("holds no"),
            "{err}"
        );
    }
}
