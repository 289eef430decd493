//! The prefilter: each training volume read once and ranked against every synthetic volume by
//! correlation inside the head on block-averaged copies; the best few become candidates.

use super::head::{block_mean, head, pearson};
use super::parallel::run_parallel;
use super::{
    load_checked, Job, MemorisationProgress, MemorisationStage, NamedVolume, VolumeSource,
};
use crate::error::Result;

/// For each synthetic volume, the indices of its `options.candidates` best training volumes by
/// coarse correlation, best first.
pub(super) fn candidates<S: VolumeSource + ?Sized>(
    synthetic: &[NamedVolume],
    training: &S,
    job: &Job,
    progress: &mut dyn FnMut(MemorisationProgress),
) -> Result<Vec<Vec<usize>>> {
    let (dims, options) = (job.dims, job.options);
    let factor = options.prefilter_factor;
    let threshold = options.head_threshold as f32;
    let small: Vec<Vec<f32>> = synthetic
        .iter()
        .map(|s| block_mean(&s.data, dims, factor))
        .collect();
    let n = dims.iter().product();
    let total = training.len();
    let mut scores = vec![vec![f64::NEG_INFINITY; total]; synthetic.len()];
    let mut done = 0;
    let items: Vec<usize> = (0..total).collect();
    let work = |t: usize| -> Result<Vec<f64>> {
        let coarse = block_mean(&load_checked(training, t, n)?, dims, factor);
        Ok(small
            .iter()
            .map(|s| pearson(s, &coarse, &head(s, &coarse, threshold)).unwrap_or(f64::NEG_INFINITY))
            .collect())
    };
    run_parallel(&items, job.threads, work, |t, row| {
        for (s, c) in row.into_iter().enumerate() {
            scores[s][t] = c;
        }
        done += 1;
        progress(MemorisationProgress {
            stage: MemorisationStage::Prefilter,
            done,
            total,
        });
    })?;
    Ok(scores
        .iter()
        .map(|row| best(row, options.candidates))
        .collect())
}

/// The indices of the `k` highest scores, highest first; ties go to the lower index.
pub(super) fn best(scores: &[f64], k: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    order.truncate(k);
    order
}

#[cfg(test)]
mod tests {
    use super::best;

    #[test]
    fn best_keeps_the_highest_in_order() {
        let s = [0.2, 0.9, f64::NEG_INFINITY, 0.9, 0.5];
        assert_eq!(best(&s, 3), vec![1, 3, 4]);
        assert_eq!(best(&s, 10), vec![1, 3, 4, 0, 2]);
    }
}
