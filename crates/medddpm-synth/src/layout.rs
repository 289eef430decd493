//! Where a pair's files go: our training layouts (whole-head for one image channel, BraTS for
//! four) or nnU-Net v2's raw data set (`DatasetNNN_Name/imagesTr`, `labelsTr`, `dataset.json`).

use std::path::{Path, PathBuf};

use medddpm_mask::LabelScheme;
use medddpm_nifti::DataType;
use medddpm_train::data::{image_channel_names, BRATS_MODALITIES};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::SynthError;

/// The file ending every image and label gets.
pub const FILE_ENDING: &str = ".nii.gz";

/// A synthetic data set's folder layout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum DatasetLayout {
    /// What `medddpm train` reads: `image/<case>.nii.gz` and `mask/<case>.nii.gz` (the
    /// whole-head layout) for one image channel; `<modality>/<case>_<modality>.nii.gz` for
    /// t1, t1ce, t2, flair and `seg/<case>_seg.nii.gz` (the BraTS layout) for four.
    Ours,
    /// nnU-Net v2's raw data set: `Dataset<id, 3 digits>_<name>/imagesTr/<case>_<channel, 4
    /// digits>.nii.gz`, `labelsTr/<case>.nii.gz` and `dataset.json`.
    #[serde(rename = "nnunet")]
    NnUnet {
        /// The data set's number, 1 to 999 (nnU-Net reserves nothing below 1000 for us; pick
        /// one no other data set of your `nnUNet_raw` uses).
        id: u16,
        /// Its name: letters, digits, `-` and `_`.
        name: String,
    },
}

/// One pair's files, relative to the output folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairFiles {
    /// One per image channel, in channel order.
    pub images: Vec<PathBuf>,
    /// The label map.
    pub label: PathBuf,
}

impl PairFiles {
    /// Every file, images first.
    pub fn all(&self) -> impl Iterator<Item = &PathBuf> {
        self.images.iter().chain(std::iter::once(&self.label))
    }
}

impl DatasetLayout {
    /// Refuses a layout that cannot hold a model's samples: ours needs 1 or 4 image channels
    /// (the layouts training reads); nnU-Net an id in 1..=999, a plain name and labels
    /// 0, 1, ..., N without gaps (its label convention).
    pub fn check(&self, channels: usize, scheme: &LabelScheme) -> Result<(), SynthError> {
        let refuse = |m: String| Err(SynthError::Options(m));
        match self {
            Self::Ours if channels != 1 && channels != 4 => refuse(format!(
                "the ours layout holds models of 1 image channel (whole-head) or 4 (BraTS), not {channels}: use --dataset-layout nnunet"
            )),
            Self::Ours => Ok(()),
            Self::NnUnet { id, .. } if !(1..=999).contains(id) => {
                refuse(format!("--dataset-id {id}: nnU-Net data set ids run from 1 to 999"))
            }
            Self::NnUnet { name, .. }
                if name.is_empty()
                    || !name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') =>
            {
                refuse(format!(
                    "--dataset-name '{name}': use letters, digits, '-' and '_' only"
                ))
            }
            Self::NnUnet { .. } => {
                let labels = labels_with_background(scheme);
                if labels.iter().enumerate().any(|(i, &l)| l != i as i64) {
                    return refuse(format!(
                        "nnU-Net needs labels 0, 1, ..., N without gaps; the {} scheme has {labels:?}",
                        scheme.name
                    ));
                }
                Ok(())
            }
        }
    }

    /// The data set's own folder inside the output folder (`""` for ours).
    pub fn root(&self) -> PathBuf {
        match self {
            Self::Ours => PathBuf::new(),
            Self::NnUnet { id, name } => PathBuf::from(format!("Dataset{id:03}_{name}")),
        }
    }

    /// The files of pair `case` of a model with `channels` image channels.
    pub fn files(&self, case: &str, channels: usize) -> PairFiles {
        let nii = |dir: &str, name: String| PathBuf::from(dir).join(name + FILE_ENDING);
        match self {
            Self::Ours if channels == 4 => PairFiles {
                images: BRATS_MODALITIES
                    .iter()
                    .map(|m| nii(m, format!("{case}_{m}")))
                    .collect(),
                label: nii("seg", format!("{case}_seg")),
            },
            Self::Ours => PairFiles {
                images: vec![nii("image", case.to_string())],
                label: nii("mask", case.to_string()),
            },
            Self::NnUnet { .. } => {
                let root = self.root();
                PairFiles {
                    images: (0..channels)
                        .map(|c| root.join(nii("imagesTr", format!("{case}_{c:04}"))))
                        .collect(),
                    label: root.join(nii("labelsTr", case.to_string())),
                }
            }
        }
    }

    /// The folders pairs are written into, relative to the output folder.
    pub fn folders(&self, channels: usize) -> Vec<PathBuf> {
        let files = self.files("x", channels);
        let mut dirs: Vec<PathBuf> = files
            .all()
            .filter_map(|f| f.parent().map(Path::to_path_buf))
            .collect();
        dirs.dedup();
        dirs
    }

    /// `dataset.json`'s place (nnU-Net only), relative to the output folder.
    pub fn dataset_json_path(&self) -> Option<PathBuf> {
        matches!(self, Self::NnUnet { .. }).then(|| self.root().join("dataset.json"))
    }

    /// nnU-Net's `dataset.json` for `num_training` pairs: channel names, labels by name
    /// (background 0, then the scheme's channels by the label each stands for), the count and
    /// the file ending. `None` for ours.
    pub fn dataset_json(
        &self,
        channels: usize,
        scheme: &LabelScheme,
        num_training: usize,
    ) -> Option<Value> {
        let Self::NnUnet { name, .. } = self else {
            return None;
        };
        let channel_names: Map<String, Value> = match channels {
            1 => vec!["MRI".to_string()],
            n => image_channel_names(n),
        }
        .into_iter()
        .enumerate()
        .map(|(i, n)| (i.to_string(), Value::String(n)))
        .collect();
        let labels: Map<String, Value> = labels_with_background(scheme)
            .into_iter()
            .map(|l| (label_name(scheme, l), json!(l)))
            .collect();
        Some(json!({
            "name": name,
            "description": "synthetic image/label pairs made by medddpm synthesize",
            "channel_names": channel_names,
            "labels": labels,
            "numTraining": num_training,
            "file_ending": FILE_ENDING,
        }))
    }
}

/// Every label a mask of `scheme` may hold, with 0, sorted.
fn labels_with_background(scheme: &LabelScheme) -> Vec<i64> {
    let mut labels = scheme.allowed_labels();
    labels.push(0);
    labels.sort_unstable();
    labels.dedup();
    labels
}

/// The name of label `l`: `background` for 0, the channel that stands for it alone, else
/// `label-<l>`.
fn label_name(scheme: &LabelScheme, l: i64) -> String {
    if l == 0 {
        return "background".into();
    }
    scheme
        .channels
        .iter()
        .find(|c| c.labels == [l])
        .map(|c| c.name.clone())
        .unwrap_or_else(|| format!("label-{l}"))
}

/// The storage type of label files: bytes when every label fits one, else 32-bit integers.
pub fn label_dtype(scheme: &LabelScheme) -> DataType {
    match labels_with_background(scheme).last() {
        Some(&max) if max <= 255 && scheme.allowed_labels().iter().all(|&l| l >= 0) => DataType::U8,
        _ => DataType::I32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nnunet() -> DatasetLayout {
        DatasetLayout::NnUnet {
            id: 501,
            name: "Synthetic".into(),
        }
    }

    #[test]
    fn files_follow_each_layout() {
        let s = |p: &PathBuf| p.to_string_lossy().into_owned();
        let f = DatasetLayout::Ours.files("a_syn000", 1);
        assert_eq!(
            (s(&f.images[0]), s(&f.label)),
            (
                "image/a_syn000.nii.gz".into(),
                "mask/a_syn000.nii.gz".into()
            )
        );
        let f = DatasetLayout::Ours.files("b_syn001", 4);
        assert_eq!(s(&f.images[1]), "t1ce/b_syn001_t1ce.nii.gz");
        assert_eq!(s(&f.label), "seg/b_syn001_seg.nii.gz");
        let f = nnunet().files("b_syn001", 4);
        assert_eq!(
            s(&f.images[3]),
            "Dataset501_Synthetic/imagesTr/b_syn001_0003.nii.gz"
        );
        assert_eq!(s(&f.label), "Dataset501_Synthetic/labelsTr/b_syn001.nii.gz");
        assert_eq!(nnunet().folders(4).len(), 2);
        assert_eq!(DatasetLayout::Ours.folders(4).len(), 5);
    }

    #[test]
    fn dataset_json_names_channels_and_labels() {
        let json = nnunet().dataset_json(4, &LabelScheme::brats(), 12).unwrap();
        assert_eq!(json["channel_names"]["3"], "flair");
        assert_eq!(json["labels"]["background"], 0);
        assert_eq!(json["labels"]["enhancing"], 3);
        assert_eq!(json["labels"]["brain"], 4);
        assert_eq!(json["numTraining"], 12);
        assert_eq!(json["file_ending"], ".nii.gz");
        let json = nnunet()
            .dataset_json(1, &LabelScheme::whole_head(), 3)
            .unwrap();
        assert_eq!(json["channel_names"], json!({"0": "MRI"}));
        assert_eq!(
            json["labels"],
            json!({"background": 0, "head": 1, "tumour": 2})
        );
        assert!(DatasetLayout::Ours
            .dataset_json(1, &LabelScheme::brats(), 1)
            .is_none());
        assert_eq!(label_dtype(&LabelScheme::brats()), DataType::U8);
    }

    #[test]
    fn layouts_that_cannot_hold_the_model_are_refused() {
        let wh = LabelScheme::whole_head();
        assert!(DatasetLayout::Ours.check(2, &wh).is_err());
        assert!(nnunet().check(2, &wh).is_ok());
        let bad_id = DatasetLayout::NnUnet {
            id: 1000,
            name: "X".into(),
        };
        assert!(bad_id.check(1, &wh).is_err());
        let bad_name = DatasetLayout::NnUnet {
            id: 5,
            name: "a b".into(),
        };
        assert!(bad_name.check(1, &wh).is_err());
        let mut gaps = wh.clone();
        gaps.channels[1].labels = vec![5];
        gaps.known_labels = vec![0, 1, 5];
        let err = nnunet().check(1, &gaps).unwrap_err().to_string();
        assert!(err.contains("without gaps"), "{err}");
    }
}
