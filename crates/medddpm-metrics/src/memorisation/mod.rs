//! Is the synthetic data new? For each synthetic volume, the nearest training volume by 3-D
//! SSIM inside the head, its Pearson correlation there and the runner-up, and the share of
//! near-copies: what shows that a model did not memorise its training set.
//!
//! **Head.** Volumes are in [-1, 1] with the background at -1 (as `medddpm eval` brings them).
//! A voxel is head when it is above `head_threshold` (-0.9 by default: 5% of the range above
//! the background) in *either* volume of a pair: the union of both heads. The union keeps the
//! score symmetric, and a sample that puts tissue where the training volume has air (or the
//! reverse) is judged there instead of left out. SSIM is the mean local SSIM ([`crate::ssim3d`]'s
//! window) over the window centres in the head; the correlation is Pearson's over its voxels.
//!
//! **Near-copy.** A synthetic volume is a near-copy when a training volume it was compared
//! with reaches SSIM >= `ssim_threshold` (0.95) or correlation >= `correlation_threshold`
//! (0.98). SSIM catches a copy voxel for voxel, sampling noise included; the correlation
//! catches a copy whose intensities were shifted or scaled (another normalisation, a contrast
//! change), which lowers SSIM's luminance and contrast terms but not the correlation. Either
//! suffices: the question is whether anything was copied, so a false alarm (a volume to look
//! at) costs less than a copy missed. A threshold above 1 turns its criterion off.
//!
//! **Cost.** S synthetic against T training volumes would be S x T full 3-D SSIMs. A prefilter
//! averages every volume over blocks of `prefilter_factor`^3 voxels (4: 64 times fewer voxels)
//! and ranks the training volumes by correlation inside the head of those copies; full SSIM and
//! correlation are then computed for each synthetic volume's `candidates` (5) best only. The
//! SSIM-nearest is missed only when five others correlate better at the coarse scale; a copy
//! correlates near 1 at every scale (averaging removes noise), so copies are not missed.
//! `candidates = 0` compares every pair. Training volumes come through a [`VolumeSource`]
//! (read at most twice each: for the prefilter, then once more if a candidate), so the training
//! set need not fit in memory; both passes spread the training volumes over threads.

mod compare;
mod head;
mod parallel;
mod prefilter;
mod section;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

use crate::error::{check_data_range, check_finite, check_grid, check_len, MetricsError, Result};
use crate::ssim::{check_fits, GaussianWindow};

pub use section::{MemorisationSection, NearestRow, Neighbour, Spread};

/// Settings of the memorisation check.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemorisationOptions {
    /// Span of the intensities for SSIM. By default, 2.0 (volumes in [-1, 1]).
    pub data_range: f64,
    /// A voxel above this in either volume is head. By default, -0.9.
    pub head_threshold: f64,
    /// Nearest SSIM at or above this is a near-copy. By default, 0.95.
    pub ssim_threshold: f64,
    /// Correlation at or above this is a near-copy. By default, 0.98.
    pub correlation_threshold: f64,
    /// Training volumes per synthetic volume that get a full SSIM; 0 compares every pair. By
    /// default, 5.
    pub candidates: usize,
    /// Block size of the prefilter's averaged copies, in voxels per axis. By default, 4.
    pub prefilter_factor: usize,
    /// Worker threads; 0 is one per core. Not stored in reports (results do not depend on
    /// it). By default, 0.
    #[serde(skip)]
    pub threads: usize,
}

impl Default for MemorisationOptions {
    fn default() -> Self {
        Self {
            data_range: 2.0,
            head_threshold: -0.9,
            ssim_threshold: 0.95,
            correlation_threshold: 0.98,
            candidates: 5,
            prefilter_factor: 4,
            threads: 0,
        }
    }
}

impl MemorisationOptions {
    /// Errors for a setting outside its domain.
    pub fn check(&self) -> Result<()> {
        check_data_range(self.data_range)?;
        let finite = [
            ("head_threshold", self.head_threshold),
            ("ssim_threshold", self.ssim_threshold),
            ("correlation_threshold", self.correlation_threshold),
        ];
        for (name, value) in finite {
            if !value.is_finite() {
                return Err(MetricsError::InvalidParameter {
                    name,
                    value: value.to_string(),
                    reason: "must be a finite number",
                });
            }
        }
        if self.prefilter_factor == 0 {
            return Err(MetricsError::InvalidParameter {
                name: "prefilter_factor",
                value: "0".into(),
                reason: "blocks are at least 1 voxel",
            });
        }
        Ok(())
    }

    fn worker_threads(&self) -> usize {
        match self.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }
}

/// A volume held in memory, in file order.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedVolume {
    /// Name shown in the report (e.g. the file stem).
    pub name: String,
    /// Intensities, `i + ni * (j + nj * k)`.
    pub data: Vec<f32>,
}

/// The training volumes, read on demand: a caller with a large set loads each from disk
/// when asked instead of holding them all.
pub trait VolumeSource: Sync {
    /// Number of volumes.
    fn len(&self) -> usize;
    /// Whether there are none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Name of volume `index` for the report.
    fn name(&self, index: usize) -> String;
    /// Volume `index` on the synthetic volumes' grid, in [-1, 1]; the error is the reason,
    /// shown after the volume's name.
    fn load(&self, index: usize) -> std::result::Result<Vec<f32>, String>;
}

impl VolumeSource for [NamedVolume] {
    fn len(&self) -> usize {
        <[NamedVolume]>::len(self)
    }

    fn name(&self, index: usize) -> String {
        self[index].name.clone()
    }

    fn load(&self, index: usize) -> std::result::Result<Vec<f32>, String> {
        Ok(self[index].data.clone())
    }
}

/// Which pass a [`MemorisationProgress`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemorisationStage {
    /// Training volumes read and ranked on their averaged copies.
    Prefilter,
    /// (synthetic, training) pairs compared at full resolution.
    Compare,
}

/// Work done so far, reported after each training volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemorisationProgress {
    /// The pass.
    pub stage: MemorisationStage,
    /// Units done: training volumes (prefilter) or pairs (compare).
    pub done: usize,
    /// Units in the pass.
    pub total: usize,
}

/// For each synthetic volume, its nearest training volumes (see the module docs for the head,
/// the near-copy rule and the prefilter). `progress` is called on the calling thread.
///
/// Errors name the volume: a synthetic or training volume whose length is not `dims`, with
/// NaN or infinite voxels, that its loader cannot read, or a pair with an empty head.
pub fn nearest_training<S: VolumeSource + ?Sized>(
    synthetic: &[NamedVolume],
    training: &S,
    dims: [usize; 3],
    options: &MemorisationOptions,
    progress: &mut dyn FnMut(MemorisationProgress),
) -> Result<MemorisationSection> {
    options.check()?;
    let window = GaussianWindow::default();
    let n = check_grid(dims)?;
    check_fits(dims, &window)?;
    for (what, count) in [
        ("synthetic volumes", synthetic.len()),
        ("training set", training.len()),
    ] {
        if count == 0 {
            return Err(MetricsError::Empty { what: what.into() });
        }
    }
    for s in synthetic {
        let what = format!("synthetic volume '{}'", s.name);
        check_len("data", n, s.data.len()).map_err(|e| e.context(&what))?;
        check_finite(&what, &s.data)?;
    }
    let job = Job {
        dims,
        options,
        threads: options.worker_threads(),
        window,
    };
    let every = options.candidates == 0 || options.candidates >= training.len();
    let candidates = if every {
        vec![(0..training.len()).collect(); synthetic.len()]
    } else {
        prefilter::candidates(synthetic, training, &job, progress)?
    };
    let found = compare::compare(synthetic, training, &candidates, &job, progress)?;
    Ok(section::build(synthetic, training, found, options, !every))
}

/// What both passes share: the grid, the settings, the threads and the SSIM window.
struct Job<'a> {
    dims: [usize; 3],
    options: &'a MemorisationOptions,
    threads: usize,
    window: GaussianWindow,
}

/// Training volume `t`, checked: read by its source, of `n` voxels, all finite.
fn load_checked<S: VolumeSource + ?Sized>(training: &S, t: usize, n: usize) -> Result<Vec<f32>> {
    let name = training.name(t);
    let data = training.load(t).map_err(|reason| MetricsError::Load {
        name: format!("training volume '{name}'"),
        reason,
    })?;
    let what = format!("training volume '{name}'");
    check_len("data", n, data.len()).map_err(|e| e.context(&what))?;
    check_finite(&what, &data)?;
    Ok(data)
}
