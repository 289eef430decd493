//! `synthesize --augment`: each pair's mask drawn from its source mask by
//! `medddpm_mask::augment` (seeded by the pair's seed, every drawn value in the manifest).

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use medddpm_mask::augment::{augment, AugmentConfig, TumourLabels};
use medddpm_mask::LabelScheme;
use medddpm_synth::{ChosenMask, FnMaskSource, HookError, Identity, MaskSource};

/// The augmentation switches (forwarded to every device's process with the others).
#[derive(Debug, Args)]
pub struct AugmentArgs {
    /// Make each pair's mask a seeded variant of its source mask: a left-right flip, a small
    /// rotation and scaling, the tumour moved and scaled inside the brain (the defaults of
    /// docs/synthesize.md, "Mask augmentation"). Every drawn value goes into the manifest.
    #[arg(long)]
    augment: bool,
    /// The augmentation's settings from a TOML file (the fields of `AugmentConfig`; fields
    /// left out keep their defaults). Implies --augment.
    #[arg(long, value_name = "FILE")]
    augment_config: Option<PathBuf>,
}

impl AugmentArgs {
    /// The settings asked for, checked (`None` without --augment or --augment-config).
    pub fn config(&self) -> anyhow::Result<Option<AugmentConfig>> {
        let config = match &self.augment_config {
            Some(path) => read_config(path)?,
            None if self.augment => AugmentConfig::default(),
            None => return Ok(None),
        };
        config
            .validate()
            .context("checking the mask augmentation's settings")?;
        Ok(Some(config))
    }
}

fn read_config(path: &Path) -> anyhow::Result<AugmentConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the augmentation settings {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("{}: not augmentation settings", path.display()))
}

/// The settings as the manifest's header keeps them (a resumed run must repeat them).
pub fn settings_value(config: &AugmentConfig) -> serde_json::Value {
    serde_json::to_value(config).expect("augmentation settings serialise")
}

/// The mask source of a run: the identity, or the augmentation with the model's labels.
pub fn mask_source(config: Option<AugmentConfig>, scheme: &LabelScheme) -> Box<dyn MaskSource> {
    let Some(config) = config else {
        return Box::new(Identity);
    };
    let labels = TumourLabels::from_scheme(scheme);
    let settings = Some(settings_value(&config));
    Box::new(FnMaskSource::new(
        move |source, _pair, seed| -> Result<ChosenMask, HookError> {
            let (mask, record) = augment(&source, labels.as_ref(), &config, seed)?;
            Ok(ChosenMask {
                mask,
                record: Some(serde_json::to_value(record)?),
            })
        },
        settings,
    ))
}
