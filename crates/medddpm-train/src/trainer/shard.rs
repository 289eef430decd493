//! Which examples of an optimizer step each replica of a data-parallel run trains on.
//!
//! Every example of a run has a global position: micro-batch `d` (the run's micro-batch
//! counter) holds positions `d * batch_size .. (d + 1) * batch_size`. The data order, the
//! timestep and the noise of an example follow from its position alone, so splitting a step's
//! `grad_accum * batch_size` examples over devices changes which device computes an example,
//! never what it computes: a run on N devices trains on the same examples, timesteps and noise
//! as the same experiment on one device, and the gradients it averages are the one-device
//! gradients up to the order of float sums.

use std::ops::Range;

use crate::{TrainError, TrainSettings};

/// How a step's examples are divided among the replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Split {
    /// Each replica runs `grad_accum / world` whole micro-batches (preferred: every device
    /// keeps the configured batch, so memory per device is that of a one-device run).
    Accumulation,
    /// Each replica runs every micro-batch on `batch_size / world` of its examples.
    Batch,
}

/// One replica's part of every optimizer step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shard {
    pub rank: usize,
    pub world: usize,
    pub split: Split,
    batch_size: usize,
    grad_accum: usize,
}

impl Shard {
    /// Replica `rank` of `world`; an error when the step's examples do not divide evenly.
    pub fn new(settings: &TrainSettings, rank: usize, world: usize) -> Result<Self, TrainError> {
        let (b, a) = (settings.batch_size, settings.grad_accum);
        let split = if a % world == 0 {
            Split::Accumulation
        } else if b % world == 0 {
            Split::Batch
        } else {
            return Err(TrainError::Config {
                path: None,
                message: format!(
                    "{world} devices cannot share a step of grad_accum = {a} micro-batches of batch_size = {b}: \
                     one of the two must be a multiple of the device count (the effective batch, \
                     batch_size x grad_accum = {}, is what the devices share)",
                    a * b
                ),
            });
        };
        Ok(Self {
            rank,
            world,
            split,
            batch_size: b,
            grad_accum: a,
        })
    }

    /// The micro-batches this replica runs in the step whose first micro-batch is `first`:
    /// each as (micro-batch number, positions inside it). Lazy: a step of a billion
    /// micro-batches is listed one at a time, not allocated at once.
    pub fn micro_batches(
        &self,
        first: usize,
    ) -> impl DoubleEndedIterator<Item = (usize, Range<usize>)> + Clone + use<> {
        let (b, a, r, n) = (self.batch_size, self.grad_accum, self.rank, self.world);
        let (draws, positions) = match self.split {
            Split::Accumulation => {
                let per = a / n;
                (first + r * per..first + (r + 1) * per, 0..b)
            }
            Split::Batch => {
                let per = b / n;
                (first..first + a, r * per..(r + 1) * per)
            }
        };
        draws.map(move |d| (d, positions.clone()))
    }

    /// How many micro-batches this replica runs per optimizer step.
    pub fn micro_batch_count(&self) -> usize {
        match self.split {
            Split::Accumulation => self.grad_accum / self.world,
            Split::Batch => self.grad_accum,
        }
    }

    /// What this replica divides each micro-batch's mean loss by, so that the mean over the
    /// replicas of their summed gradients is the one-device step's gradient: its number of
    /// micro-batches (times the batch size with the reference's extra scaling).
    pub fn divisor(&self, reference_batch_scaling: bool) -> f64 {
        let mut divisor = self.micro_batch_count() as f64;
        if reference_batch_scaling {
            divisor *= self.batch_size as f64;
        }
        divisor
    }

    /// Micro-batches the whole run advances by per optimizer step.
    pub fn step_micro_batches(&self) -> usize {
        self.grad_accum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(batch_size: usize, grad_accum: usize) -> TrainSettings {
        TrainSettings {
            batch_size,
            grad_accum,
            ..Default::default()
        }
    }

    /// Every position of a step, as (micro-batch, position) pairs over all replicas.
    fn positions(s: &TrainSettings, world: usize, first: usize) -> Vec<usize> {
        let mut all: Vec<usize> = (0..world)
            .flat_map(|r| {
                let shard = Shard::new(s, r, world).unwrap();
                shard
                    .micro_batches(first)
                    .flat_map(|(d, range)| range.map(move |i| d * s.batch_size + i))
            })
            .collect();
        all.sort();
        all
    }

    /// A step of a billion micro-batches is listed as it runs: nothing is allocated for the
    /// whole step at once (a `Vec` of it took 24 GB before the first micro-batch).
    #[test]
    fn micro_batches_are_listed_lazily() {
        let shard = Shard::new(&settings(2, 1_000_000_000), 1, 2).unwrap();
        assert_eq!(shard.micro_batch_count(), 500_000_000);
        let mut all = shard.micro_batches(7);
        assert_eq!(all.next(), Some((500_000_007, 0..2)));
        assert_eq!(all.size_hint(), (499_999_999, Some(499_999_999)));
        assert_eq!(all.next_back(), Some((1_000_000_006, 0..2)));
    }

    #[test]
    fn replicas_cover_the_one_device_step_exactly() {
        for (b, a, world) in [
            (1, 2, 2),
            (2, 1, 2),
            (4, 2, 2),
            (2, 4, 4),
            (4, 1, 4),
            (3, 4, 2),
        ] {
            let s = settings(b, a);
            let one = positions(&s, 1, 10 * a);
            assert_eq!(
                positions(&s, world, 10 * a),
                one,
                "b {b} a {a} world {world}"
            );
            assert_eq!(one.len(), a * b);
        }
    }

    #[test]
    fn accumulation_is_split_before_the_batch() {
        let s = settings(2, 2);
        let shard = Shard::new(&s, 1, 2).unwrap();
        assert_eq!(shard.split, Split::Accumulation);
        assert_eq!(shard.micro_batches(6).collect::<Vec<_>>(), vec![(7, 0..2)]);
        assert_eq!(shard.divisor(false), 1.0);
        assert_eq!(shard.divisor(true), 2.0);
        let s = settings(2, 1);
        let shard = Shard::new(&s, 1, 2).unwrap();
        assert_eq!(shard.split, Split::Batch);
        assert_eq!(shard.micro_batches(3).collect::<Vec<_>>(), vec![(3, 1..2)]);
        assert_eq!(shard.divisor(false), 1.0);
    }

    #[test]
    fn uneven_steps_are_refused_with_the_numbers() {
        let err = Shard::new(&settings(1, 3), 0, 2).unwrap_err().to_string();
        assert!(
            err.contains("2 devices") && err.contains("grad_accum = 3"),
            "{err}"
        );
    }
}
