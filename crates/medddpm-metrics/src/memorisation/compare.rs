//! The full-resolution pass: each candidate training volume read once, blurred once, and
//! compared with every synthetic volume that picked it (SSIM and correlation inside the head).

use super::head::{head, pearson};
use super::parallel::run_parallel;
use super::{
    load_checked, Job, MemorisationProgress, MemorisationStage, NamedVolume, VolumeSource,
};
use crate::error::{MetricsError, Result};
use crate::ssim::SsimVolume;

/// One training volume as compared with one synthetic volume.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Found {
    pub(super) training: usize,
    pub(super) ssim: f64,
    pub(super) correlation: f64,
    pub(super) head_voxels: u64,
}

/// For each synthetic volume, its candidates (`candidates[s]`) compared at full resolution,
/// highest SSIM first (ties: lower training index).
pub(super) fn compare<S: VolumeSource + ?Sized>(
    synthetic: &[NamedVolume],
    training: &S,
    candidates: &[Vec<usize>],
    job: &Job,
    progress: &mut dyn FnMut(MemorisationProgress),
) -> Result<Vec<Vec<Found>>> {
    let mut by_training: Vec<Vec<usize>> = vec![Vec::new(); training.len()];
    for (s, picked) in candidates.iter().enumerate() {
        for &t in picked {
            by_training[t].push(s);
        }
    }
    let items: Vec<usize> = (0..training.len())
        .filter(|&t| !by_training[t].is_empty())
        .collect();
    let total = candidates.iter().map(Vec::len).sum();
    let n = job.dims.iter().product();
    let work = |t: usize| -> Result<Vec<(usize, Found)>> {
        let data = load_checked(training, t, n)?;
        let blurred = SsimVolume::new(&data, job.dims, &job.window)?;
        by_training[t]
            .iter()
            .map(|&s| {
                let found = pair(&synthetic[s], &data, &blurred, t, job).map_err(|e| {
                    e.context(format!(
                        "synthetic '{}' vs training '{}'",
                        synthetic[s].name,
                        training.name(t)
                    ))
                })?;
                Ok((s, found))
            })
            .collect()
    };
    let mut found = vec![Vec::new(); synthetic.len()];
    let mut done = 0;
    run_parallel(&items, job.threads, work, |_, pairs| {
        done += pairs.len();
        for (s, f) in pairs {
            found[s].push(f);
        }
        progress(MemorisationProgress {
            stage: MemorisationStage::Compare,
            done,
            total,
        });
    })?;
    for f in &mut found {
        f.sort_by(|a, b| b.ssim.total_cmp(&a.ssim).then(a.training.cmp(&b.training)));
    }
    Ok(found)
}

/// SSIM and correlation of one synthetic volume against training volume `t` (`data`, with
/// its blurred statistics) inside their head.
fn pair(
    synthetic: &NamedVolume,
    data: &[f32],
    blurred: &SsimVolume,
    t: usize,
    job: &Job,
) -> Result<Found> {
    let mask = head(&synthetic.data, data, job.options.head_threshold as f32);
    let empty = || MetricsError::EmptyMask {
        what: format!(
            "head (no voxel above {} in either volume)",
            job.options.head_threshold
        ),
    };
    let correlation = pearson(&synthetic.data, data, &mask).ok_or_else(empty)?;
    let own = SsimVolume::new(&synthetic.data, job.dims, &job.window)?;
    let ssim = own.masked_ssim(blurred, job.options.data_range, &mask)?;
    Ok(Found {
        training: t,
        ssim,
        correlation,
        head_voxels: mask.iter().filter(|&&m| m).count() as u64,
    })
}
