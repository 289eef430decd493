//! `synthesize.json`: the settings a synthetic data set was made with, written when its first
//! run starts and compared by every later one, so that a resumed run never mixes two data sets.

use std::path::Path;

use medddpm_diffusion::SamplerKind;
use medddpm_train::integrity::file_checksum;
use medddpm_train::layout::{EMA_FILE, MODEL_FILE};
use medddpm_train::{RunDir, WeightsSource};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::layout::DatasetLayout;
use crate::SynthError;

pub use crate::files::SETTINGS_FILE;

/// What decides a data set's pairs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSettings {
    /// The checkpoint as given (for people; not compared: a moved checkpoint is the same).
    pub checkpoint: String,
    /// Its weights file's size and CRC-32 ([`checkpoint_checksum`]).
    pub checkpoint_checksum: String,
    /// `ema` or `live`.
    pub weights: String,
    /// The source masks' file names, in work-list order.
    pub masks: Vec<String>,
    /// Pairs asked for (a later run may ask for more, which extends the same list).
    pub count: usize,
    /// The run's seed.
    pub seed: u64,
    /// The reverse process.
    pub sampler: SamplerKind,
    /// Its network calls per sample.
    pub steps: usize,
    /// DDIM's eta (0 for the others).
    pub eta: f64,
    /// The folder layout.
    pub layout: DatasetLayout,
    /// The intensity range written (`None`: the network's [-1, 1]).
    pub rescale: Option<(f32, f32)>,
    /// The augmentation's settings (`None`: the identity).
    pub augmentation: Option<Value>,
}

/// Size and CRC-32 of the weights file sampling reads: a checkpoint's `ema.mpk` (or
/// `model.mpk` with `live`), or a reference `.pt` file.
pub fn checkpoint_checksum(source: &WeightsSource, live: bool) -> Result<String, SynthError> {
    let file = match source {
        WeightsSource::Checkpoint(path) => {
            let dir = RunDir::resolve_checkpoint(path)?;
            dir.join(format!("{}.mpk", if live { MODEL_FILE } else { EMA_FILE }))
        }
        WeightsSource::Reference { path, .. } => path.clone(),
    };
    Ok(file_checksum(&file)?)
}

impl RunSettings {
    /// The first setting in which `asked` (this run) differs from `self` (the folder's), as
    /// (name, the folder's value, this run's); `None` when this run may continue the folder.
    /// A larger count extends the data set; a smaller one is a difference.
    pub fn difference(&self, asked: &RunSettings) -> Option<(String, String, String)> {
        let show = |v: &dyn erased::Show| v.show();
        let fields: [(&str, &dyn erased::Show, &dyn erased::Show); 10] = [
            (
                "checkpoint weights (size and CRC-32)",
                &self.checkpoint_checksum,
                &asked.checkpoint_checksum,
            ),
            ("weights", &self.weights, &asked.weights),
            ("masks", &self.masks, &asked.masks),
            ("seed", &self.seed, &asked.seed),
            ("sampler", &self.sampler, &asked.sampler),
            ("steps", &self.steps, &asked.steps),
            ("eta", &self.eta, &asked.eta),
            ("layout", &self.layout, &asked.layout),
            ("rescale", &self.rescale, &asked.rescale),
            ("augmentation", &self.augmentation, &asked.augmentation),
        ];
        for (name, made, now) in fields {
            if show(made) != show(now) {
                return Some((name.into(), show(made), show(now)));
            }
        }
        (asked.count < self.count).then(|| {
            (
                "--count".into(),
                self.count.to_string(),
                asked.count.to_string(),
            )
        })
    }

    /// The folder's settings, if it has them.
    pub fn read(out: &Path) -> Result<Option<Self>, SynthError> {
        let path = out.join(SETTINGS_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(SynthError::io(path, e)),
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| SynthError::DamagedManifest {
                path,
                line: e.line(),
                problem: e.to_string(),
            })
    }

    /// Writes the settings into `out` atomically.
    pub fn write(&self, out: &Path) -> Result<(), SynthError> {
        let path = out.join(SETTINGS_FILE);
        let json = serde_json::to_string_pretty(self).expect("settings serialise");
        medddpm_atomic::write(&path, json.as_bytes()).map_err(|e| SynthError::io(path, e))
    }
}

/// Values shown in a refusal, compared by how they are shown (JSON).
mod erased {
    pub trait Show {
        fn show(&self) -> String;
    }

    impl<T: serde::Serialize> Show for T {
        fn show(&self) -> String {
            serde_json::to_string(self).unwrap_or_default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn settings() -> RunSettings {
        RunSettings {
            checkpoint: "runs/a".into(),
            checkpoint_checksum: "crc32:00000001:10".into(),
            weights: "ema".into(),
            masks: vec!["a.nii.gz".into()],
            count: 4,
            seed: 0,
            sampler: SamplerKind::DpmSolver,
            steps: 25,
            eta: 0.0,
            layout: DatasetLayout::Ours,
            rescale: None,
            augmentation: None,
        }
    }

    #[test]
    fn a_resumed_run_must_repeat_every_setting_but_may_ask_for_more() {
        let made = settings();
        let same_elsewhere = RunSettings {
            checkpoint: "moved/a".into(),
            count: 9,
            ..made.clone()
        };
        assert_eq!(made.difference(&same_elsewhere), None);
        let other = RunSettings {
            steps: 50,
            ..made.clone()
        };
        assert_eq!(
            made.difference(&other),
            Some(("steps".into(), "25".into(), "50".into()))
        );
        let fewer = RunSettings {
            count: 2,
            ..made.clone()
        };
        assert_eq!(made.difference(&fewer).unwrap().0, "--count");
        let layout = RunSettings {
            layout: DatasetLayout::NnUnet {
                id: 1,
                name: "X".into(),
            },
            ..made.clone()
        };
        assert_eq!(made.difference(&layout).unwrap().0, "layout");
    }

    #[test]
    fn settings_round_trip_through_the_file() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(RunSettings::read(dir.path()).unwrap(), None);
        settings().write(dir.path()).unwrap();
        assert_eq!(RunSettings::read(dir.path()).unwrap(), Some(settings()));
        std::fs::write(dir.path().join(SETTINGS_FILE), "{").unwrap();
        let err = RunSettings::read(dir.path()).unwrap_err().to_string();
        assert!(err.contains(SETTINGS_FILE), "{err}");
    }
}
