//! The `[data]` section: where the pairs come from and how they are mapped to the model grid,
//! with defaults that follow the layout.

use std::fmt;
use std::path::PathBuf;

use medddpm_mask::LabelScheme;
use medddpm_nifti::Normalization;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Where the training pairs come from. In TOML, a table tagged by `layout`, e.g.
/// `source = { layout = "brats", root = "data/brats" }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "layout", rename_all = "kebab-case", deny_unknown_fields)]
pub enum DataSource {
    /// Reference whole-head layout: a folder of masks and a folder of images, paired by file
    /// name (`mask/sample_3.nii.gz` <-> `image/sample_3.nii.gz`; `.nii` and `.nii.gz` of the
    /// same stem also pair).
    WholeHead {
        /// Folder of label maps.
        mask_dir: PathBuf,
        /// Folder of images.
        image_dir: PathBuf,
    },
    /// BraTS layout: `root/{t1,t1ce,t2,flair,seg}/<case>_<modality>.nii.gz`, paired by case id;
    /// the modalities become image channels in the order [t1, t1ce, t2, flair].
    Brats {
        /// Folder holding the five modality folders.
        root: PathBuf,
    },
    /// Built-in phantoms ([`crate::phantom`]), generated deterministically into `dir` unless
    /// an identical set is already there; read as a whole-head layout.
    Phantom {
        /// Output folder (gets `mask/`, `image/` and `phantoms.json`).
        dir: PathBuf,
        /// Number of phantoms.
        count: usize,
        /// Volume size (i, j, k).
        size: [usize; 3],
        /// Random seed.
        seed: u64,
    },
}

impl Default for DataSource {
    /// The built-in data set: 8 phantoms of 32^3 in `datasets/phantoms` (relative to the
    /// working directory), small enough to train a tiny model on a CPU in minutes.
    fn default() -> Self {
        Self::Phantom {
            dir: PathBuf::from("datasets/phantoms"),
            count: 8,
            size: [32; 3],
            seed: 0,
        }
    }
}

/// What to do with a volume that is not on the model grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GridPolicy {
    /// Refuse it (for preprocessed data that must already match, e.g. BraTS at 192x192x144).
    Exact,
    /// Resample to the grid: linear for images (after normalisation, as the reference does),
    /// nearest for masks so labels stay labels (the reference resamples one-hot masks
    /// linearly, which makes them fractional).
    #[default]
    Resize,
    /// Centre crop or pad (torchio `CropOrPad` convention), before normalisation as the BraTS
    /// preprocessing does; images are padded with their minimum, masks with label 0.
    CropOrPad,
}

/// Data settings of an experiment.
///
/// Defaults depend on the layout, so a config can name only its source:
///
/// | layout | `label_scheme` | `normalization` | `grid` |
/// |---|---|---|---|
/// | whole-head | `"whole-head"` | `"reference-per-slice"` (what the released model saw) | `[128, 128, 128]` |
/// | brats | `"brats"` | `"none"` (files are already in [-1, 1]; the reference does not rescale them) | `[192, 192, 144]` |
/// | phantom | `"whole-head"` | `"none"` (phantoms are written in [-1, 1]) | the phantom `size` |
///
/// `grid_policy` defaults to `"resize"`, `cache` to `true`; a missing `source` (and
/// [`DataConfig::default`]) is [`DataSource::default`], the built-in phantoms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "DataConfigToml")]
pub struct DataConfig {
    /// Where the pairs come from.
    pub source: DataSource,
    /// Label map -> condition channels. In TOML a preset name (`"whole-head"`, `"brats"`) or
    /// a full table (see [`LabelScheme`]).
    #[serde(serialize_with = "serialize_scheme")]
    pub label_scheme: LabelScheme,
    /// Image intensity mapping (per image channel).
    pub normalization: Normalization,
    /// Model grid in NIfTI (i, j, k) order; the network sees `[k, j, i]`.
    pub grid: [usize; 3],
    /// What to do with volumes off the grid.
    pub grid_policy: GridPolicy,
    /// Keep decoded examples in memory (up to [`CACHE_LIMIT_BYTES`](super::CACHE_LIMIT_BYTES)); decoding a gzipped
    /// 128^3 volume costs far more than a training step on small models.
    pub cache: bool,
}

impl DataConfig {
    /// A config for `source` with that layout's defaults (see the type's docs).
    pub fn new(source: DataSource) -> Self {
        DataConfigToml {
            source,
            label_scheme: None,
            normalization: None,
            grid: None,
            grid_policy: None,
            cache: None,
        }
        .into()
    }
}

impl Default for DataConfig {
    /// The built-in phantoms with their defaults.
    fn default() -> Self {
        Self::new(DataSource::default())
    }
}

/// The TOML shape of [`DataConfig`]: every field but `source` optional, filled from the
/// layout's defaults.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DataConfigToml {
    #[serde(default)]
    source: DataSource,
    #[serde(default, deserialize_with = "deserialize_scheme")]
    label_scheme: Option<LabelScheme>,
    #[serde(default)]
    normalization: Option<Normalization>,
    #[serde(default)]
    grid: Option<[usize; 3]>,
    #[serde(default)]
    grid_policy: Option<GridPolicy>,
    #[serde(default)]
    cache: Option<bool>,
}

impl From<DataConfigToml> for DataConfig {
    fn from(t: DataConfigToml) -> Self {
        let (scheme, norm, grid) = match &t.source {
            DataSource::WholeHead { .. } => (
                LabelScheme::whole_head(),
                Normalization::ReferencePerSlice,
                [128; 3],
            ),
            DataSource::Brats { .. } => {
                (LabelScheme::brats(), Normalization::None, [192, 192, 144])
            }
            DataSource::Phantom { size, .. } => {
                (LabelScheme::whole_head(), Normalization::None, *size)
            }
        };
        Self {
            label_scheme: t.label_scheme.unwrap_or(scheme),
            normalization: t.normalization.unwrap_or(norm),
            grid: t.grid.unwrap_or(grid),
            grid_policy: t.grid_policy.unwrap_or_default(),
            cache: t.cache.unwrap_or(true),
            source: t.source,
        }
    }
}

/// A preset name (`"whole-head"`) or a full scheme table; a visitor rather than an untagged
/// enum, so a bad custom table reports its real error instead of "did not match any variant".
fn deserialize_scheme<'de, D: Deserializer<'de>>(d: D) -> Result<Option<LabelScheme>, D::Error> {
    struct SchemeVisitor;
    impl<'de> serde::de::Visitor<'de> for SchemeVisitor {
        type Value = LabelScheme;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a label scheme preset name (\"whole-head\", \"brats\") or a table")
        }
        fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<LabelScheme, E> {
            LabelScheme::by_name(name).map_err(E::custom)
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<LabelScheme, A::Error> {
            LabelScheme::deserialize(serde::de::value::MapAccessDeserializer::new(map))
        }
    }
    d.deserialize_any(SchemeVisitor).map(Some)
}

/// Presets are written back by name, so a resolved config stays readable.
fn serialize_scheme<S: Serializer>(scheme: &LabelScheme, s: S) -> Result<S::Ok, S::Error> {
    match [LabelScheme::whole_head(), LabelScheme::brats()]
        .into_iter()
        .find(|p| p == scheme)
    {
        Some(p) => s.serialize_str(&p.name),
        None => scheme.serialize(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_defaults_follow_the_layout() {
        let c: DataConfig =
            toml::from_str("source = { layout = \"brats\", root = \"x\" }").unwrap();
        assert_eq!(c.label_scheme, LabelScheme::brats());
        assert_eq!(c.normalization, Normalization::None);
        assert_eq!(c.grid, [192, 192, 144]);
        assert_eq!(c.grid_policy, GridPolicy::Resize);
        assert!(c.cache);

        let text = r#"
            label_scheme = "brats"
            normalization = "volume-minmax"
            grid = [64, 64, 64]
            grid_policy = "crop-or-pad"
            cache = false
            [source]
            layout = "whole-head"
            mask_dir = "m"
            image_dir = "i"
        "#;
        let c: DataConfig = toml::from_str(text).unwrap();
        assert_eq!(c.label_scheme, LabelScheme::brats());
        assert_eq!(c.normalization, Normalization::VolumeMinMax);
        assert_eq!(c.grid_policy, GridPolicy::CropOrPad);
        assert!(!c.cache);
        // Round trip through the resolved form (what a run folder's config.toml holds).
        let back: DataConfig = toml::from_str(&toml::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);

        let c = DataConfig::new(DataSource::WholeHead {
            mask_dir: "m".into(),
            image_dir: "i".into(),
        });
        assert_eq!(c.label_scheme, LabelScheme::whole_head());
        assert_eq!(c.normalization, Normalization::ReferencePerSlice);
        assert_eq!(c.grid, [128; 3]);

        // No source at all: the built-in phantoms.
        let c: DataConfig = toml::from_str("").unwrap();
        assert_eq!(c, DataConfig::default());
        assert!(matches!(c.source, DataSource::Phantom { count: 8, .. }));
        assert_eq!((c.grid, c.normalization), ([32; 3], Normalization::None));
    }

    #[test]
    fn custom_schemes_and_typos() {
        let text = r#"
            source = { layout = "phantom", dir = "p", count = 2, size = [16, 16, 16], seed = 1 }
            [label_scheme]
            name = "tumour-only"
            channels = [{ name = "tumour", labels = [2] }]
            on_value = 1.0
            off_value = -1.0
            known_labels = [0, 1]
        "#;
        let c: DataConfig = toml::from_str(text).unwrap();
        assert_eq!(c.label_scheme.name, "tumour-only");
        assert_eq!(c.grid, [16, 16, 16]);
        let back: DataConfig = toml::from_str(&toml::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);

        let bad = |t: &str| toml::from_str::<DataConfig>(t).unwrap_err().to_string();
        let e = bad("label_scheme = \"whole-heed\"\nsource = { layout = \"brats\", root = \"x\" }");
        assert!(e.contains("whole-heed"), "{e}");
        let e = bad("gird = [1, 2, 3]\nsource = { layout = \"brats\", root = \"x\" }");
        assert!(e.contains("gird"), "{e}");
        let e = bad("source = { layout = \"brats\", rot = \"x\" }");
        assert!(e.contains("rot"), "{e}");
    }
}
