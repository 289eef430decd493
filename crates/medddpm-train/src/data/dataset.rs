//! The validated, indexable data set: reads, checks, normalises, regrids and encodes examples
//! on demand, keeping decoded ones in memory up to a budget.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use medddpm_mask::LabelScheme;
use medddpm_nifti::{ensure_same_grid, Normalization, Volume};

use super::discover::{nifti_stem, pair_brats, pair_whole_head, Entry};
use super::regrid::{prepare_image, regrid_mask};
use super::{image_channel_names, DataConfig, DataError, DataSource, GridPolicy};
use crate::phantom::generate_phantoms;

/// Decoded examples are cached only up to this many bytes, so a large data set cannot exhaust
/// memory just because `cache = true` is the default.
pub const CACHE_LIMIT_BYTES: usize = 4 << 30;

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
