//! `medddpm eval --train-dir`: is the synthetic data new? Reads the training set the way
//! `train` finds it, hands it to `medddpm_metrics::nearest_training` one volume at a time, and
//! draws the passes as progress bars.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{bail, Context};
use medddpm_metrics::{
    nearest_training, MemorisationOptions, MemorisationSection, MemorisationStage, NamedVolume,
    VolumeSource,
};
use medddpm_nifti::{Interpolation, Volume};
use medddpm_train::data::{training_images, TrainingImage};

use super::{check_finite, has_channel, nifti_files, normalization, owner, stem_of, EvalArgs};
use crate::progress::StageProgress;

const TRAIN_NORMALIZATION: &str = "--train-normalization";

/// The training images of `--train-dir`, read on demand, normalised as
/// `--train-normalization` says and resized to the synthetic grid when on another.
struct TrainingFiles {
    images: Vec<TrainingImage>,
    dims: [usize; 3],
    normalization: String,
    /// Names of the volumes resized (their first reading adds them).
    resized: Mutex<BTreeSet<String>>,
}

impl TrainingFiles {
    fn read(&self, index: usize) -> anyhow::Result<Vec<f32>> {
        let path = &self.images[index].path;
        let vol = Volume::read(path).with_context(|| format!("reading {}", path.display()))?;
        check_finite(&vol, path)?;
        let vol = match normalization(TRAIN_NORMALIZATION, &self.normalization, vol.data())? {
            Some(n) => vol
                .normalized(n)
                .with_context(|| format!("normalising {}", path.display()))?,
            None => vol,
        };
        if vol.dims() == self.dims {
            return Ok(vol.into_data());
        }
        let resized = vol
            .resize(self.dims, Interpolation::Linear)
            .with_context(|| format!("resizing {} to {:?}", path.display(), self.dims))?;
        if let Ok(mut names) = self.resized.lock() {
            names.insert(self.name(index));
        }
        Ok(resized.into_data())
    }
}

impl VolumeSource for TrainingFiles {
    fn len(&self) -> usize {
        self.images.len()
    }

    fn name(&self, index: usize) -> String {
        stem_of(&self.images[index].path).unwrap_or_else(|| self.images[index].id.clone())
    }

    fn load(&self, index: usize) -> Result<Vec<f32>, String> {
        self.read(index).map_err(|e| format!("{e:#}"))
    }
}

/// The training images of `dir` that the synthetic volumes are compared with: one BraTS
/// modality (`--channel`), or every image of a single-channel set.
fn training_set(dir: &Path, channel: Option<&str>) -> anyhow::Result<Vec<TrainingImage>> {
    let images = training_images(dir)
        .with_context(|| format!("finding the training set in {}", dir.display()))?;
    let channels: BTreeSet<&str> = images.iter().filter_map(|t| t.channel.as_deref()).collect();
    if channels.is_empty() {
        return Ok(images);
    }
    let Some(c) = channel else {
        bail!(
            "{}: a training set of several channels ({}): add --channel (e.g. --channel t1) to \
             compare one of them (a copied case copies them all)",
            dir.display(),
            channels.into_iter().collect::<Vec<_>>().join(", ")
        );
    };
    if !channels.contains(c) {
        bail!(
            "{}: no training images of channel {c} (it has {})",
            dir.display(),
            channels.into_iter().collect::<Vec<_>>().join(", ")
        );
    }
    Ok(images
        .into_iter()
        .filter(|t| t.channel.as_deref() == Some(c))
        .collect())
}

/// Every NIfTI volume of `--synthetic` (of `--channel` when given), for a check without
/// masks; they must share one voxel grid (the first one's dimensions). A volume outside
/// [-1, 1] (held-out real images, to calibrate the check) is normalised as the training images
/// are; generated ones lie in [-1, 1] and are taken as they are. Returns the number normalised.
pub(super) fn load_synthetic_any(
    args: &EvalArgs,
) -> anyhow::Result<([usize; 3], Vec<NamedVolume>, usize)> {
    let mut dims = None;
    let mut synthetic = Vec::new();
    let mut normalised = 0;
    for path in nifti_files(&args.synthetic, "--synthetic")? {
        let stem = stem_of(&path).unwrap_or_default();
        if !has_channel(&stem, args.channel.as_deref()) {
            continue;
        }
        let vol = Volume::read(&path).with_context(|| format!("reading {}", path.display()))?;
        check_finite(&vol, &path)?;
        let grid: &mut (PathBuf, [usize; 3]) = dims.get_or_insert((path.clone(), vol.dims()));
        if vol.dims() != grid.1 {
            bail!(
                "{}: grid {:?}, where {} has {:?} (the synthetic volumes must share one grid)",
                path.display(),
                vol.dims(),
                grid.0.display(),
                grid.1
            );
        }
        let outside = vol.data().iter().any(|v| v.abs() > 1.0 + 1e-6);
        let vol = match normalization(TRAIN_NORMALIZATION, &args.train_normalization, vol.data())? {
            Some(n) if outside => {
                normalised += 1;
                vol.normalized(n)
                    .with_context(|| format!("normalising {}", path.display()))?
            }
            _ => vol,
        };
        synthetic.push(NamedVolume {
            name: stem,
            data: vol.into_data(),
        });
    }
    match dims {
        Some((_, d)) => Ok((d, synthetic, normalised)),
        None => bail!("{}: no .nii or .nii.gz volumes", args.synthetic.display()),
    }
}

/// The library's settings, with the flags given.
fn options(args: &EvalArgs) -> MemorisationOptions {
    let d = MemorisationOptions::default();
    MemorisationOptions {
        ssim_threshold: args.near_copy_ssim.unwrap_or(d.ssim_threshold),
        correlation_threshold: args
            .near_copy_correlation
            .unwrap_or(d.correlation_threshold),
        candidates: args.memorisation_candidates.unwrap_or(d.candidates),
        ..d
    }
}

/// Each synthetic volume's nearest training volumes in `dir`, and the notes the reader needs
/// (volumes resized, samples drawn from a training case's own mask).
pub(super) fn check(
    args: &EvalArgs,
    dir: &Path,
    synthetic: &[NamedVolume],
    dims: [usize; 3],
) -> anyhow::Result<(MemorisationSection, Vec<String>)> {
    let training = TrainingFiles {
        images: training_set(dir, args.channel.as_deref())?,
        dims,
        normalization: args.train_normalization.clone(),
        resized: Mutex::new(BTreeSet::new()),
    };
    eprintln!(
        "checking {} synthetic volume(s) against {} training volume(s) in {}",
        synthetic.len(),
        training.len(),
        dir.display()
    );
    let mut bars = StageProgress::new();
    let section = nearest_training(synthetic, &training, dims, &options(args), &mut |p| {
        let (what, unit) = match p.stage {
            MemorisationStage::Prefilter => ("memorisation prefilter", "training volumes"),
            MemorisationStage::Compare => ("memorisation SSIM", "pairs"),
        };
        bars.update(what, unit, p.done as u64, p.total as u64);
    })
    .context("checking the synthetic volumes against the training set")?;
    bars.finish();
    let mut notes: Vec<String> = own_mask_note(synthetic, &training).into_iter().collect();
    let resized = training.resized.into_inner().unwrap_or_default();
    if !resized.is_empty() {
        notes.push(format!(
            "memorisation: {} training volume(s) not on the synthetic grid {dims:?} were \
             resized to it (linear, after normalisation, as `train` does): {}",
            resized.len(),
            resized.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    Ok((section, notes))
}

/// A note when synthetic volumes are named after training cases (sampled from their masks):
/// such a sample has its case's outline by construction, so only the texture inside tells a
/// copy from a new image.
fn own_mask_note(synthetic: &[NamedVolume], training: &TrainingFiles) -> Option<String> {
    let ids: Vec<String> = training.images.iter().map(|t| t.id.clone()).collect();
    let own = synthetic
        .iter()
        .filter(|s| owner(&s.name, &ids).is_some())
        .count();
    (own > 0).then(|| {
        format!(
            "memorisation: {own} of {} synthetic volume(s) are named after a training case (drawn \
             from its mask), so they share its outline by construction; memorisation is best \
             judged on samples of masks the model did not train on",
            synthetic.len()
        )
    })
}
