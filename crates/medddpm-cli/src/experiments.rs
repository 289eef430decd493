//! The experiment files of `experiments/`, built into the binary so `--experiment NAME` works
//! from any folder.

use std::path::Path;

use anyhow::{bail, Context};
use medddpm_train::ExperimentConfig;

/// (name, TOML text) of every built-in experiment.
pub const BUILT_IN: &[(&str, &str)] = &[
    (
        "quickstart",
        include_str!("../../../experiments/quickstart.toml"),
    ),
    (
        "whole-head-128",
        include_str!("../../../experiments/whole-head-128.toml"),
    ),
    (
        "brats-192",
        include_str!("../../../experiments/brats-192.toml"),
    ),
    (
        "real-demo",
        include_str!("../../../experiments/real-demo.toml"),
    ),
];

/// A built-in experiment by name, or an experiment file by path.
pub fn load(name_or_path: &str) -> anyhow::Result<(String, ExperimentConfig)> {
    if let Some((name, text)) = BUILT_IN.iter().find(|(n, _)| *n == name_or_path) {
        let config = ExperimentConfig::from_toml(text)
            .map_err(|e| anyhow::anyhow!("built-in experiment {name}: {e}"))?;
        return Ok((name.to_string(), config));
    }
    let path = Path::new(name_or_path);
    if !path.exists() {
        let names: Vec<&str> = BUILT_IN.iter().map(|(n, _)| *n).collect();
        bail!(
            "'{name_or_path}' is neither a built-in experiment ({}) nor a file",
            names.join(", ")
        );
    }
    let config =
        ExperimentConfig::from_file(path).with_context(|| format!("reading {}", path.display()))?;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_else(|| "experiment".into());
    Ok((name, config))
}
