//! The names of files and folders in a run folder, in one place:
//!
//! ```text
//! <run>/config.toml  metrics.jsonl  loss.png  .lock
//! <run>/checkpoints/latest
//! <run>/checkpoints/step-000100/{model,ema,optimizer}.mpk  config.toml  state.json  checksums.json
//! <run>/samples/step-000100/<mask>_sample-0.nii.gz  <mask>_montage.png
//! ```

use std::path::Path;

/// File names inside a checkpoint folder (burn adds `.mpk` to the record files).
pub const MODEL_FILE: &str = "model";
/// EMA weights.
pub const EMA_FILE: &str = "ema";
/// Adam state.
pub const OPTIMIZER_FILE: &str = "optimizer";
/// Step, seed and data position.
pub const STATE_FILE: &str = "state.json";
/// The resolved experiment configuration.
pub const CONFIG_FILE: &str = "config.toml";
/// Inside the checkpoints folder: the name of the newest checkpoint.
pub(crate) const LATEST: &str = "latest";
/// Inside a run folder: one line of JSON per optimizer step.
pub const METRICS_FILE: &str = "metrics.jsonl";
/// Inside a run folder: the `step-N` checkpoint folders.
pub const CHECKPOINTS_DIR: &str = "checkpoints";
/// Inside a run folder: the periodic samples, one `step-N` folder per checkpoint.
pub const SAMPLES_DIR: &str = "samples";
/// Inside a checkpoint folder: size and CRC-32 of every other file.
pub const CHECKSUMS_FILE: &str = "checksums.json";

/// `step-000123`: the folder of the checkpoint (and of the samples) after that many optimizer
/// steps.
pub fn step_name(step: usize) -> String {
    format!("step-{step:06}")
}

/// The step a `step-N` folder stands for.
pub fn step_of(path: &Path) -> Option<usize> {
    path.file_name()?
        .to_str()?
        .strip_prefix("step-")?
        .parse()
        .ok()
}
