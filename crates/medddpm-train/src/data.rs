//! Training pairs (condition mask + image) read from the reference's folder layouts.
//!
//! Three layouts are understood (see [`DataSource`]): the reference whole-head layout (a mask
//! folder and an image folder paired by file name), the BraTS layout (one folder per modality
//! plus `seg/`, paired by case id) and built-in phantoms (generated on first use, then read as
//! a whole-head layout). Everything is validated when the data set is opened, so a bad folder
//! fails before any training step instead of hours into a run.
//!
//! Examples come out as plain `Vec<f32>` in the network's `(C, k, j, i)` order (the NIfTI
//! file order, see [`medddpm_nifti::Volume`]); turning them into tensors is the batcher's job.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use medddpm_mask::{LabelScheme, MaskError};
use medddpm_nifti::{ensure_same_grid, Interpolation, NiftiError, Normalization, Volume};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::phantom::generate_phantoms;

/// BraTS modalities in the channel order the reference stacks them: [t1, t1ce, t2, flair].
pub const BRATS_MODALITIES: [&str; 4] = ["t1", "t1ce", "t2", "flair"];

/// Names of `channels` image channels, for output file names: the BraTS modalities for 4,
/// `image` for 1, `ch0`, `ch1`, ... otherwise.
pub fn image_channel_names(channels: usize) -> Vec<String> {
    match channels {
        1 => vec!["image".to_string()],
        4 => BRATS_MODALITIES.iter().map(|m| m.to_string()).collect(),
        n => (0..n).map(|c| format!("ch{c}")).collect(),
    }
}

/// Decoded examples are cached only up to this many bytes, so a large data set cannot exhaust
/// memory just because `cache = true` is the default.
pub const CACHE_LIMIT_BYTES: usize = 4 << 30;

/// What can go wrong finding, pairing or decoding training data. Every variant names the file
/// or folder involved, because the usual fix is to look at that path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataError {
    /// A folder the layout needs does not exist (or is not a folder).
    #[error("{role} folder {path} does not exist")]
    MissingFolder {
        /// The folder looked for.
        path: PathBuf,
        /// What it should hold ("mask", "image", "t1", ...).
        role: String,
    },
    /// A folder holds no `.nii`/`.nii.gz` files.
    #[error("{role} folder {path} holds no .nii or .nii.gz files")]
    EmptyFolder {
        /// The folder.
        path: PathBuf,
        /// What it should hold.
        role: String,
    },
    /// A path given for masks is neither a NIfTI file nor a folder.
    #[error("{path} does not exist or is not a .nii/.nii.gz file or a folder")]
    NotFound {
        /// The path given.
        path: PathBuf,
    },
    /// Listing a folder or touching a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A file in one folder has no partner in the other.
    #[error(
        "{file} ({role}) has no matching {other_role} file named {expected_name} in {other_dir}"
    )]
    Unpaired {
        /// The file without a partner.
        file: PathBuf,
        /// Its role ("mask", "image", "t1", ...).
        role: String,
        /// The role of the missing partner.
        other_role: String,
        /// The file name that was looked for.
        expected_name: String,
        /// The folder it was looked for in.
        other_dir: PathBuf,
    },
    /// Two files in one folder stand for the same id (e.g. `a.nii` and `a.nii.gz`).
    #[error("{first} and {second} both stand for id '{id}'; keep only one")]
    DuplicateId {
        /// The id.
        id: String,
        /// One file.
        first: PathBuf,
        /// The other file.
        second: PathBuf,
    },
    /// A BraTS case has a segmentation but lacks one of the four modalities.
    #[error("BraTS case {case}: modality {modality} is missing (expected {expected})")]
    MissingModality {
        /// Case id, e.g. `BraTS2021_00529`.
        case: String,
        /// The missing modality.
        modality: String,
        /// The file looked for.
        expected: PathBuf,
    },
    /// A file in a BraTS folder does not follow `<case>_<modality>.nii[.gz]`.
    #[error("{path}: BraTS file names must end in _{modality}.nii.gz (or .nii)")]
    BadBratsName {
        /// The file.
        path: PathBuf,
        /// The folder's modality.
        modality: String,
    },
    /// A volume is not on the model grid under [`GridPolicy::Exact`].
    #[error(
        "{path}: volume is {found:?} voxels (i, j, k) but the model grid is {expected:?}; \
         set grid_policy = \"resize\" or \"crop-or-pad\", or preprocess the file"
    )]
    WrongGrid {
        /// The file.
        path: PathBuf,
        /// Its dimensions.
        found: [usize; 3],
        /// The configured grid.
        expected: [usize; 3],
    },
    /// An image holds NaN or infinite voxels, which would make the loss NaN.
    #[error(
        "{path}: {count} voxels are not finite numbers (the first, {value}, at voxel index \
         {index} in file order); the network cannot train on them: fix or mask them first"
    )]
    NonFinite {
        /// The file.
        path: PathBuf,
        /// How many voxels are NaN or infinite.
        count: usize,
        /// The first of them.
        value: f32,
        /// Its index in the file's voxel order.
        index: usize,
    },
    /// An example index past the end.
    #[error("example index {index} is out of range (data set has {len} examples)")]
    IndexOutOfRange {
        /// Index asked for.
        index: usize,
        /// Number of examples.
        len: usize,
    },
    /// A configuration value that cannot work.
    #[error("invalid data configuration: {0}")]
    InvalidConfig(String),
    /// Reading, writing or regridding a NIfTI file failed.
    #[error(transparent)]
    Nifti(#[from] NiftiError),
    /// Encoding a mask failed (unknown label, invalid scheme, grid mismatch).
    #[error(transparent)]
    Mask(#[from] MaskError),
}

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
    /// Keep decoded examples in memory (up to [`CACHE_LIMIT_BYTES`]); decoding a gzipped
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

/// One training pair, ready to become tensors.
#[derive(Debug, Clone, PartialEq)]
pub struct Example {
    /// File stem (whole-head, phantom) or case id (BraTS).
    pub id: String,
    /// Image channels, C-order `(C_img, nk, nj, ni)`: each channel in file order.
    pub image: Vec<f32>,
    /// Condition channels, C-order `(C_cond, nk, nj, ni)`.
    pub cond: Vec<f32>,
    /// Spatial shape in network order `[nk, nj, ni]`.
    pub shape: [usize; 3],
}

impl Example {
    /// Bytes held by the voxel buffers (for the cache budget).
    fn bytes(&self) -> usize {
        (self.image.len() + self.cond.len()) * std::mem::size_of::<f32>()
    }
}

/// The files of one example.
#[derive(Debug, Clone)]
struct Entry {
    id: String,
    mask: PathBuf,
    /// One file per image channel.
    images: Vec<PathBuf>,
}

/// A validated, indexable set of training pairs. Cheap to share across threads (`&self`
/// access, interior cache).
pub struct NiftiDataset {
    entries: Vec<Entry>,
    scheme: LabelScheme,
    normalization: Normalization,
    grid: [usize; 3],
    policy: GridPolicy,
    cache_on: bool,
    cache: RwLock<HashMap<usize, Arc<Example>>>,
    cached_bytes: AtomicUsize,
}

impl fmt::Debug for NiftiDataset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NiftiDataset")
            .field("len", &self.entries.len())
            .field("scheme", &self.scheme.name)
            .field("normalization", &self.normalization)
            .field("grid", &self.grid)
            .field("policy", &self.policy)
            .field("cache", &self.cache_on)
            .finish()
    }
}

impl NiftiDataset {
    /// Lists and pairs the files of `config.source` (generating phantoms first if asked) and
    /// checks the layout: missing or empty folders, unpaired files and BraTS cases lacking a
    /// modality are errors naming the paths. Volumes themselves are read lazily by
    /// [`NiftiDataset::get`].
    pub fn open(config: &DataConfig) -> Result<Self, DataError> {
        if config.grid.contains(&0) {
            return Err(DataError::InvalidConfig(format!(
                "grid {:?} has an empty axis",
                config.grid
            )));
        }
        config.label_scheme.validate()?;
        let entries = match &config.source {
            DataSource::WholeHead {
                mask_dir,
                image_dir,
            } => pair_whole_head(mask_dir, image_dir)?,
            DataSource::Brats { root } => pair_brats(root)?,
            DataSource::Phantom {
                dir,
                count,
                size,
                seed,
            } => {
                let set = generate_phantoms(dir, *count, *size, *seed)?;
                set.masks
                    .iter()
                    .zip(&set.images)
                    .map(|(m, i)| Entry {
                        id: nifti_stem(m).unwrap_or_default().to_string(),
                        mask: m.clone(),
                        images: vec![i.clone()],
                    })
                    .collect()
            }
        };
        Ok(Self {
            entries,
            scheme: config.label_scheme.clone(),
            normalization: config.normalization,
            grid: config.grid,
            policy: config.grid_policy,
            cache_on: config.cache,
            cache: RwLock::new(HashMap::new()),
            cached_bytes: AtomicUsize::new(0),
        })
    }

    /// Number of examples.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there are no examples (never after a successful [`NiftiDataset::open`]).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Example ids in index order (file stems or BraTS case ids, sorted).
    pub fn ids(&self) -> Vec<String> {
        self.entries.iter().map(|e| e.id.clone()).collect()
    }

    /// The mask and image files of example `index` (for logs and `inspect`).
    pub fn files(&self, index: usize) -> Option<(&Path, Vec<&Path>)> {
        self.entries.get(index).map(|e| {
            (
                e.mask.as_path(),
                e.images.iter().map(PathBuf::as_path).collect(),
            )
        })
    }

    /// Image channels per example: 1 for whole-head and phantoms, 4 for BraTS.
    pub fn image_channels(&self) -> usize {
        self.entries.first().map_or(1, |e| e.images.len())
    }

    /// Names of the image channels ([`image_channel_names`] of [`NiftiDataset::image_channels`]).
    pub fn image_channel_names(&self) -> Vec<String> {
        image_channel_names(self.image_channels())
    }

    /// The mask of example `index` on the model grid (grid policy applied, labels not
    /// encoded): its affine and spacing are the geometry generated samples should carry.
    pub fn mask_volume(&self, index: usize) -> Result<Volume, DataError> {
        let entry = self.entries.get(index).ok_or(DataError::IndexOutOfRange {
            index,
            len: self.entries.len(),
        })?;
        regrid_mask(
            Volume::read(&entry.mask)?,
            &entry.mask,
            self.grid,
            self.policy,
        )
    }

    /// Condition channels per example (the label scheme's channel count).
    pub fn cond_channels(&self) -> usize {
        self.scheme.num_channels()
    }

    /// Spatial shape of every example in network order `[nk, nj, ni]`.
    pub fn shape(&self) -> [usize; 3] {
        [self.grid[2], self.grid[1], self.grid[0]]
    }

    /// Reads, checks, normalises, regrids and encodes example `index` (or returns the cached
    /// copy). Mask and images must share one grid; under [`GridPolicy::Exact`] they must also
    /// be on the model grid; the mask may only hold labels the scheme knows.
    pub fn get(&self, index: usize) -> Result<Example, DataError> {
        let entry = self.entries.get(index).ok_or(DataError::IndexOutOfRange {
            index,
            len: self.entries.len(),
        })?;
        if self.cache_on {
            if let Some(ex) = self.read_cache().get(&index) {
                return Ok(Example::clone(ex));
            }
        }
        let ex = self.decode(entry)?;
        if self.cache_on {
            let bytes = ex.bytes();
            let fits = self
                .cached_bytes
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                    (used + bytes <= CACHE_LIMIT_BYTES).then_some(used + bytes)
                })
                .is_ok();
            if fits {
                let mut cache = self.cache.write().unwrap_or_else(|p| p.into_inner());
                if cache.insert(index, Arc::new(ex.clone())).is_some() {
                    // Another thread decoded the same example meanwhile: count it once.
                    self.cached_bytes.fetch_sub(bytes, Ordering::SeqCst);
                }
            }
        }
        Ok(ex)
    }

    fn read_cache(&self) -> std::sync::RwLockReadGuard<'_, HashMap<usize, Arc<Example>>> {
        // A panic elsewhere cannot leave the map half-updated (single insert), so a poisoned
        // lock is still safe to read.
        self.cache.read().unwrap_or_else(|p| p.into_inner())
    }

    fn decode(&self, entry: &Entry) -> Result<Example, DataError> {
        let mask = Volume::read(&entry.mask)?;
        let n: usize = self.grid.iter().product();
        let mut image = Vec::with_capacity(n * entry.images.len());
        for path in &entry.images {
            let vol = Volume::read(path)?;
            ensure_finite(path, &vol)?;
            ensure_same_grid(&entry.mask, &mask, path, &vol)?;
            let vol = prepare_image(vol, path, self.normalization, self.grid, self.policy)?;
            image.extend_from_slice(vol.data());
        }
        let mask = regrid_mask(mask, &entry.mask, self.grid, self.policy)?;
        let cond = self.scheme.encode(&mask, &entry.mask)?;
        Ok(Example {
            id: entry.id.clone(),
            image,
            cond,
            shape: self.shape(),
        })
    }
}

/// A NaN or infinite voxel would surface much later as "training diverged"; name the file now.
fn ensure_finite(path: &Path, vol: &Volume) -> Result<(), DataError> {
    let data = vol.data();
    match data.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(index) => Err(DataError::NonFinite {
            path: path.to_path_buf(),
            count: data.iter().filter(|v| !v.is_finite()).count(),
            value: data[index],
            index,
        }),
    }
}

/// Normalisation and grid policy for one image channel (crop/pad before, resize after the
/// intensity mapping, as the reference's BraTS and whole-head pipelines do).
fn prepare_image(
    vol: Volume,
    path: &Path,
    norm: Normalization,
    grid: [usize; 3],
    policy: GridPolicy,
) -> Result<Volume, DataError> {
    if vol.dims() == grid {
        return Ok(vol.normalized(norm)?);
    }
    Ok(match policy {
        GridPolicy::Exact => return Err(wrong_grid(path, &vol, grid)),
        GridPolicy::Resize => vol.normalized(norm)?.resize(grid, Interpolation::Linear)?,
        GridPolicy::CropOrPad => {
            let fill = vol
                .data()
                .iter()
                .copied()
                .filter(|x| x.is_finite())
                .fold(f32::INFINITY, f32::min);
            let fill = if fill.is_finite() { fill } else { 0.0 };
            vol.crop_or_pad(grid, fill)?.normalized(norm)?
        }
    })
}

/// Grid policy for a label map: nearest neighbour or crop/pad with background 0.
pub fn regrid_mask(
    vol: Volume,
    path: &Path,
    grid: [usize; 3],
    policy: GridPolicy,
) -> Result<Volume, DataError> {
    if vol.dims() == grid {
        return Ok(vol);
    }
    Ok(match policy {
        GridPolicy::Exact => return Err(wrong_grid(path, &vol, grid)),
        GridPolicy::Resize => vol.resize(grid, Interpolation::Nearest)?,
        GridPolicy::CropOrPad => vol.crop_or_pad(grid, 0.0)?,
    })
}

fn wrong_grid(path: &Path, vol: &Volume, grid: [usize; 3]) -> DataError {
    DataError::WrongGrid {
        path: path.to_path_buf(),
        found: vol.dims(),
        expected: grid,
    }
}

/// Encodes one mask for sampling: reads it, applies the grid policy (nearest / crop-pad with
/// 0) and the label scheme. Returns the channel-major condition `(C, nk, nj, ni)`, its network
/// shape `[nk, nj, ni]`, and the mask volume as read (its affine and header are what the
/// generated images should carry).
pub fn load_condition(
    mask_path: &Path,
    scheme: &LabelScheme,
    grid: [usize; 3],
    policy: GridPolicy,
) -> Result<(Vec<f32>, [usize; 3], Volume), DataError> {
    if grid.contains(&0) {
        return Err(DataError::InvalidConfig(format!(
            "grid {grid:?} has an empty axis"
        )));
    }
    let original = Volume::read(mask_path)?;
    let mask = regrid_mask(original.clone(), mask_path, grid, policy)?;
    let cond = scheme.encode(&mask, mask_path)?;
    Ok((cond, mask.network_shape(), original))
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

/// The id a NIfTI file name stands for (`sample_3.nii.gz` -> `sample_3`); `None` for other
/// files and hidden ones (editors' and the atomic writer's temporaries start with a dot).
fn nifti_stem(path: &Path) -> Option<&str> {
    let name = path.file_name()?.to_str()?;
    if name.starts_with('.') {
        return None;
    }
    let lower = name.to_ascii_lowercase();
    let stem_len = if lower.ends_with(".nii.gz") {
        name.len() - 7
    } else if lower.ends_with(".nii") {
        name.len() - 4
    } else {
        return None;
    };
    (stem_len > 0).then(|| &name[..stem_len])
}

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

/// File name a missing partner would have: the same name as the file that has no partner.
fn partner_name(file: &Path) -> String {
    file.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn pair_whole_head(mask_dir: &Path, image_dir: &Path) -> Result<Vec<Entry>, DataError> {
    let masks = list_nifti(mask_dir, "mask")?;
    let mut images = list_nifti(image_dir, "image")?;
    let mut entries = Vec::with_capacity(masks.len());
    for (id, mask) in masks {
        let Some(image) = images.remove(&id) else {
            return Err(DataError::Unpaired {
                expected_name: partner_name(&mask),
                file: mask,
                role: "mask".into(),
                other_role: "image".into(),
                other_dir: image_dir.to_path_buf(),
            });
        };
        entries.push(Entry {
            id,
            mask,
            images: vec![image],
        });
    }
    if let Some((_, image)) = images.into_iter().next() {
        return Err(DataError::Unpaired {
            expected_name: partner_name(&image),
            file: image,
            role: "image".into(),
            other_role: "mask".into(),
            other_dir: mask_dir.to_path_buf(),
        });
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

fn pair_brats(root: &Path) -> Result<Vec<Entry>, DataError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stems() {
        assert_eq!(nifti_stem(Path::new("a/sample_3.nii.gz")), Some("sample_3"));
        assert_eq!(nifti_stem(Path::new("b.NII")), Some("b"));
        assert_eq!(nifti_stem(Path::new(".b.nii.gz.1.2.tmp")), None);
        assert_eq!(nifti_stem(Path::new(".hidden.nii")), None);
        assert_eq!(nifti_stem(Path::new("readme.txt")), None);
        assert_eq!(nifti_stem(Path::new(".nii")), None);
    }

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
