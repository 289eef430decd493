//! Run folders and checkpoints.
//!
//! A checkpoint is a folder `checkpoints/step-NNNNNN/` holding the live weights, the EMA
//! weights, the optimizer state, the resolved config and `state.json` (step, seed and data
//! position). It is written under a temporary name and renamed into place, and only then is the
//! `latest` pointer replaced (also by rename), so a crash at any point leaves the previous
//! checkpoint as the latest and loadable. `checksums.json` (size and CRC-32 of every file)
//! lets loading find a checkpoint damaged afterwards ([`crate::integrity`]).

use std::path::{Path, PathBuf};

use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Record, Recorder};
use burn::tensor::backend::Backend;
use serde::{Deserialize, Serialize};

use crate::TrainError;

pub use crate::layout::{
    step_name, CHECKPOINTS_DIR, CONFIG_FILE, EMA_FILE, METRICS_FILE, MODEL_FILE, OPTIMIZER_FILE,
    SAMPLES_DIR, STATE_FILE,
};
use crate::layout::{step_of, LATEST};

/// Everything besides tensors that an exact resume needs. All randomness of a run is derived
/// from `seed` and the step and micro-step counters, so these numbers are the whole RNG state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainState {
    /// Optimizer steps completed.
    pub step: usize,
    /// Micro-batches drawn so far (the data-order position).
    pub micro_batches: usize,
    /// The run's seed.
    pub seed: u64,
    /// Mean loss of the last optimizer step.
    pub last_loss: f32,
    /// Wall-clock seconds spent training so far, over all sessions of the run.
    pub elapsed_s: f64,
    /// f16 training's loss scale (absent in runs that never trained in f16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_scale: Option<LossScale>,
}

/// The dynamic loss scale of f16 training and the steps since it last changed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LossScale {
    /// What the loss is multiplied by before the backward pass.
    pub scale: f64,
    /// Optimizer steps since the last overflow or growth.
    pub good_steps: usize,
}

impl LossScale {
    /// A run's first scale.
    pub fn new(scale: f64) -> Self {
        Self {
            scale,
            good_steps: 0,
        }
    }

    /// What each of `devices` replicas multiplies its loss by: the scale over the device
    /// count, so that a replica's f16 gradients have a one-device run's magnitudes (and
    /// overflow where it would); the replicas' mean then carries this factor.
    pub fn per_replica(&self, devices: usize) -> f64 {
        self.scale / devices as f64
    }

    /// After a step's gradients were checked: an overflow halves the scale (and the step is
    /// skipped), `growth_interval` good steps in a row double it. Returns whether the step's
    /// update goes ahead.
    pub fn update(&mut self, finite: bool, growth_interval: usize) -> bool {
        if !finite {
            self.scale /= 2.0;
            self.good_steps = 0;
            return false;
        }
        self.good_steps += 1;
        if self.good_steps >= growth_interval {
            self.scale *= 2.0;
            self.good_steps = 0;
        }
        true
    }
}

/// The folders of a run.
#[derive(Debug, Clone)]
pub struct RunDir {
    /// The run folder.
    pub root: PathBuf,
}

// Test hooks: compiled into test builds only (`debug_assertions`), never into the release
// binary a user runs.

/// The run folder whose next checkpoint rename fails (see [`inject_rename_failure`]).
#[cfg(debug_assertions)]
static FAIL_NEXT_RENAME: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);

/// Makes the next checkpoint rename in the run folder `root` fail, as a crash between writing
/// and publishing would. For tests of crash safety only; other runs of the process (tests
/// running beside it) are not touched.
#[doc(hidden)]
#[cfg(debug_assertions)]
pub fn inject_rename_failure(root: &Path) {
    *FAIL_NEXT_RENAME.lock().unwrap_or_else(|p| p.into_inner()) = Some(root.to_path_buf());
}

/// Whether a failure was injected for the checkpoint folder `dir` (taking it).
#[cfg(debug_assertions)]
fn injected_failure(dir: &Path) -> bool {
    let mut slot = FAIL_NEXT_RENAME.lock().unwrap_or_else(|p| p.into_inner());
    let hit = slot.as_ref().is_some_and(|root| dir.starts_with(root));
    if hit {
        *slot = None;
    }
    hit
}

#[cfg(not(debug_assertions))]
fn injected_failure(_: &Path) -> bool {
    false
}

impl RunDir {
    /// A run folder (created on first write).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// `config.toml` of the run.
    pub fn config_path(&self) -> PathBuf {
        self.root.join(CONFIG_FILE)
    }

    /// `metrics.jsonl` of the run.
    pub fn metrics_path(&self) -> PathBuf {
        self.root.join(METRICS_FILE)
    }

    /// The checkpoints folder.
    pub fn checkpoints(&self) -> PathBuf {
        self.root.join(CHECKPOINTS_DIR)
    }

    /// Folder of the samples taken at `step`.
    pub fn samples(&self, step: usize) -> PathBuf {
        self.root.join(SAMPLES_DIR).join(step_name(step))
    }

    /// The newest complete checkpoint, if any: the `latest` pointer, or else the highest
    /// `step-N` folder that has a `state.json`.
    pub fn latest_checkpoint(&self) -> Result<Option<PathBuf>, TrainError> {
        let dir = self.checkpoints();
        if let Ok(name) = std::fs::read_to_string(dir.join(LATEST)) {
            // Only a folder of this run's checkpoints: `../../otherrun/...` would make resuming,
            // sampling and `inspect` read another run without a word.
            let mut parts = Path::new(name.trim()).components();
            let one_folder = matches!(
                (parts.next(), parts.next()),
                (Some(std::path::Component::Normal(_)), None)
            );
            if !one_folder {
                return Err(TrainError::checkpoint(
                    &dir.join(LATEST),
                    format!(
                        "names {:?}, which is not a folder of this run's checkpoints (it must name one, e.g. step-00000010)",
                        name.trim()
                    ),
                ));
            }
            let path = dir.join(name.trim());
            if path.join(STATE_FILE).is_file() {
                return Ok(Some(path));
            }
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Ok(None);
        };
        let mut best: Option<(usize, PathBuf)> = None;
        for entry in entries {
            let entry = entry.map_err(|e| TrainError::io(&dir, e))?;
            let Some(step) = step_of(&entry.path()) else {
                continue;
            };
            if entry.path().join(STATE_FILE).is_file()
                && best.as_ref().is_none_or(|(b, _)| step > *b)
            {
                best = Some((step, entry.path()));
            }
        }
        Ok(best.map(|(_, p)| p))
    }

    /// The checkpoint a path names: a checkpoint folder itself, or a run folder's latest
    /// checkpoint. The one place that decides (training resumes, sampling and `inspect` use it).
    pub fn resolve_checkpoint(path: &Path) -> Result<PathBuf, TrainError> {
        if is_checkpoint(path) {
            return Ok(path.to_path_buf());
        }
        RunDir::new(path).latest_checkpoint()?.ok_or_else(|| {
            TrainError::checkpoint(
                path,
                "neither a checkpoint folder nor a run folder with checkpoints",
            )
        })
    }

    /// Writes a checkpoint for `state.step`: `write_files` fills a temporary folder, which is then
    /// renamed into place and published as the latest. Older checkpoints beyond `keep` (0 = all)
    /// are removed afterwards.
    pub fn write_checkpoint(
        &self,
        state: &TrainState,
        config_toml: &str,
        keep: usize,
        write_files: impl FnOnce(&Path) -> Result<(), TrainError>,
    ) -> Result<PathBuf, TrainError> {
        let dir = self.checkpoints();
        std::fs::create_dir_all(&dir).map_err(|e| TrainError::io(&dir, e))?;
        let name = step_name(state.step);
        let tmp = dir.join(format!(".tmp-{name}"));
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).map_err(|e| TrainError::io(&tmp, e))?;
        }
        std::fs::create_dir_all(&tmp).map_err(|e| TrainError::io(&tmp, e))?;
        // A failure (a full disk) leaves no half-written folder behind to fill the disk further.
        if let Err(e) = fill_checkpoint(&tmp, state, config_toml, write_files) {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e);
        }

        let final_path = dir.join(&name);
        if injected_failure(&dir) {
            return Err(TrainError::io(
                &final_path,
                std::io::Error::other("injected failure before publishing the checkpoint"),
            ));
        }
        if final_path.exists() {
            std::fs::remove_dir_all(&final_path).map_err(|e| TrainError::io(&final_path, e))?;
        }
        std::fs::rename(&tmp, &final_path).map_err(|e| TrainError::io(&final_path, e))?;
        medddpm_atomic::sync_dir(&dir);
        atomic_write(&dir.join(LATEST), name.as_bytes())?;
        if keep > 0 {
            self.prune(keep)?;
        }
        Ok(final_path)
    }

    fn prune(&self, keep: usize) -> Result<(), TrainError> {
        let dir = self.checkpoints();
        let mut steps: Vec<(usize, PathBuf)> = std::fs::read_dir(&dir)
            .map_err(|e| TrainError::io(&dir, e))?
            .filter_map(|e| e.ok())
            .filter_map(|e| step_of(&e.path()).map(|s| (s, e.path())))
            .collect();
        steps.sort();
        let excess = steps.len().saturating_sub(keep);
        for (_, path) in steps.into_iter().take(excess) {
            std::fs::remove_dir_all(&path).map_err(|e| TrainError::io(&path, e))?;
        }
        Ok(())
    }
}

/// Reads `state.json` of a checkpoint folder.
/// (Checked against the checkpoint's checksums, as every read of a checkpoint file is.)
pub fn read_state(checkpoint: &Path) -> Result<TrainState, TrainError> {
    let bytes = crate::integrity::read_checked(checkpoint, STATE_FILE)?;
    serde_json::from_slice(&bytes)
        .map_err(|e| TrainError::checkpoint(checkpoint, format!("{STATE_FILE} is not valid: {e}")))
}

/// Reads the configuration a checkpoint was trained with (checked against its checksums).
pub fn read_config(checkpoint: &Path) -> Result<crate::ExperimentConfig, TrainError> {
    let bytes = crate::integrity::read_checked(checkpoint, CONFIG_FILE)?;
    let path = checkpoint.join(CONFIG_FILE);
    let text = String::from_utf8(bytes).map_err(|e| TrainError::Config {
        path: Some(path.clone()),
        message: e.to_string(),
    })?;
    crate::ExperimentConfig::from_toml(&text).map_err(|e| TrainError::Config {
        path: Some(path),
        message: e.to_string(),
    })
}

/// True for a folder holding a checkpoint's configuration and state (its weights are checked
/// when they are read).
pub fn is_checkpoint(path: &Path) -> bool {
    path.join(CONFIG_FILE).is_file() && path.join(STATE_FILE).is_file()
}

/// Writes a checkpoint's files into the temporary folder `tmp`: the records, the config, the
/// state and their checksums.
fn fill_checkpoint(
    tmp: &Path,
    state: &TrainState,
    config_toml: &str,
    write_files: impl FnOnce(&Path) -> Result<(), TrainError>,
) -> Result<(), TrainError> {
    write_files(tmp)?;
    // Test hook (test builds only): widens the window in which a kill finds a half-written
    // checkpoint (the crash test sets it).
    #[cfg(debug_assertions)]
    if let Some(ms) = std::env::var("MEDDDPM_TEST_CHECKPOINT_DELAY_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
    write_file(&tmp.join(CONFIG_FILE), config_toml.as_bytes())?;
    let state_json = serde_json::to_string_pretty(state).expect("state serialises");
    write_file(&tmp.join(STATE_FILE), state_json.as_bytes())?;
    crate::integrity::write_checksums(tmp)?;
    medddpm_atomic::sync_dir(tmp);
    Ok(())
}

/// Writes a record as `NamedMpkFileRecorder` would (the same bytes, full precision: resumed
/// runs continue bit for bit), but through our own file write, so a failure is the file's I/O
/// error ("No space left on device") rather than the encoder's ("MessagePack value").
pub fn save_record<B: Backend, R: Record<B>>(record: R, path: &Path) -> Result<(), TrainError> {
    let bytes = NamedMpkBytesRecorder::<FullPrecisionSettings>::new()
        .record(record, ())
        .map_err(|e| TrainError::checkpoint(path, format!("cannot encode: {e}")))?;
    write_file(path, &bytes)
}

/// A file inside the temporary checkpoint folder (published as a whole by one rename).
fn write_file(path: &Path, bytes: &[u8]) -> Result<(), TrainError> {
    medddpm_atomic::write_synced(path, bytes).map_err(|e| TrainError::io(path, e))
}

/// Replaces `path` atomically ([`medddpm_atomic::write`]), so readers never see a half-written
/// file.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<(), TrainError> {
    medddpm_atomic::write(path, bytes).map_err(|e| TrainError::io(path, e))
}

#[cfg(all(test, target_os = "linux"))]
mod full_disk {
    use burn::backend::Flex;
    use burn::module::Module;

    /// /dev/full fails every write with ENOSPC, as a full disk does.
    #[test]
    fn a_full_disk_is_named_as_such() {
        let unet = medddpm_unet::UNetConfig::tiny()
            .init::<Flex>(&Default::default())
            .unwrap();
        let path = std::path::Path::new("/dev/full");
        let err = super::save_record::<Flex, _>(unet.into_record(), path).unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("/dev/full") && message.contains("No space left on device"),
            "{message}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `checkpoints/latest` naming a folder outside the run's checkpoints is refused, not
    /// followed into another run; a name of one of them is followed.
    #[test]
    fn latest_names_a_folder_of_this_runs_checkpoints_only() {
        let tmp = tempfile::tempdir().unwrap();
        let (this, other) = (tmp.path().join("this"), tmp.path().join("other"));
        for run in [&this, &other] {
            let ckpt = run.join("checkpoints/step-000010");
            std::fs::create_dir_all(&ckpt).unwrap();
            std::fs::write(ckpt.join(STATE_FILE), b"{}").unwrap();
        }
        let run = RunDir::new(&this);
        let latest = this.join("checkpoints").join(LATEST);
        std::fs::write(&latest, "step-000010\n").unwrap();
        assert_eq!(
            run.latest_checkpoint().unwrap(),
            Some(this.join("checkpoints/step-000010"))
        );
        for outside in [
            "../../other/checkpoints/step-000010",
            "/tmp",
            "step-000010/..",
        ] {
            std::fs::write(&latest, outside).unwrap();
            let err = run.latest_checkpoint().unwrap_err().to_string();
            assert!(
                err.contains("latest") && err.contains("not a folder of this run"),
                "{err}"
            );
        }
    }

    /// A checkpoint that fails half-way (a full disk) leaves no `.tmp-step-N` folder behind
    /// and publishes nothing.
    #[test]
    fn a_failed_checkpoint_leaves_nothing_behind() {
        let tmp = tempfile::tempdir().unwrap();
        let run = RunDir::new(tmp.path());
        let state = TrainState {
            step: 3,
            micro_batches: 6,
            seed: 0,
            last_loss: 0.5,
            elapsed_s: 1.0,
            loss_scale: None,
        };
        let err = run
            .write_checkpoint(&state, "", 0, |dir| {
                std::fs::write(dir.join("model.mpk"), b"half").unwrap();
                Err(TrainError::io(
                    &dir.join("ema.mpk"),
                    std::io::Error::from(std::io::ErrorKind::StorageFull),
                ))
            })
            .unwrap_err();
        assert!(err.to_string().contains("ema.mpk"), "{err}");
        let left: Vec<_> = std::fs::read_dir(run.checkpoints())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
