//! The replicas' meeting point on the host: every replica hands in a value and gets everyone's
//! back (an all-gather between threads), or learns that another replica gave up.
//!
//! Used every step for the replicas' losses and readiness, and as the gradient average where
//! the backend has no collective (the CPU, wgpu; `collective = "host"`). A replica that fails
//! or panics aborts the exchange, so that the others stop at their next meeting instead of
//! waiting forever.

use std::any::Any;
use std::sync::{Condvar, Mutex, MutexGuard};

/// Another replica gave up; its own error says why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Aborted;

/// The all-gather between `world` replica threads.
pub(crate) struct Exchange {
    world: usize,
    state: Mutex<Round>,
    turn: Condvar,
}

struct Round {
    /// Counts completed rounds, so that a fast replica's next round does not mix with this one.
    generation: u64,
    slots: Vec<Option<Box<dyn Any + Send>>>,
    /// The finished round's values, until every replica has taken its copy.
    gathered: Vec<Box<dyn Any + Send>>,
    taken: usize,
    aborted: bool,
}

impl Exchange {
    pub fn new(world: usize) -> Self {
        Self {
            world,
            state: Mutex::new(Round {
                generation: 0,
                slots: (0..world).map(|_| None).collect(),
                gathered: Vec::new(),
                taken: 0,
                aborted: false,
            }),
            turn: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Round> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every replica's `value`, in rank order. Every replica calls this the same number of
    /// times with the same type.
    pub fn all_gather<T: Clone + Send + 'static>(
        &self,
        rank: usize,
        value: T,
    ) -> Result<Vec<T>, Aborted> {
        let mut round = self.lock();
        // The previous round's values must all be taken before this round can finish.
        while !round.aborted && !round.gathered.is_empty() {
            round = self.turn.wait(round).unwrap_or_else(|e| e.into_inner());
        }
        if round.aborted {
            return Err(Aborted);
        }
        let generation = round.generation;
        round.slots[rank] = Some(Box::new(value));
        if round.slots.iter().all(Option::is_some) {
            round.gathered = round.slots.iter_mut().map(|s| s.take().unwrap()).collect();
            round.generation += 1;
            round.taken = 0;
            self.turn.notify_all();
        }
        while !round.aborted && round.generation == generation {
            round = self.turn.wait(round).unwrap_or_else(|e| e.into_inner());
        }
        if round.aborted {
            return Err(Aborted);
        }
        let values = round
            .gathered
            .iter()
            .map(|v| {
                v.downcast_ref::<T>()
                    .expect("replicas exchange the same types")
                    .clone()
            })
            .collect();
        round.taken += 1;
        if round.taken == self.world {
            round.gathered.clear();
            self.turn.notify_all();
        }
        Ok(values)
    }

    /// Wakes every waiting replica with [`Aborted`]; later calls fail at once.
    pub fn abort(&self) {
        self.lock().aborted = true;
        self.turn.notify_all();
    }
}

/// Aborts the exchange when dropped without [`AbortOnDrop::disarm`]: a replica that returns
/// early with an error or panics.
pub(crate) struct AbortOnDrop<'a>(pub Option<&'a Exchange>);

impl AbortOnDrop<'_> {
    pub fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for AbortOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(exchange) = self.0 {
            exchange.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_replica_gets_every_value_each_round() {
        let exchange = Exchange::new(3);
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..3)
                .map(|rank| {
                    let exchange = &exchange;
                    s.spawn(move || {
                        (0..50)
                            .map(|round| exchange.all_gather(rank, round * 10 + rank).unwrap())
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            for h in handles {
                let rounds = h.join().unwrap();
                for (round, values) in rounds.into_iter().enumerate() {
                    assert_eq!(values, vec![round * 10, round * 10 + 1, round * 10 + 2]);
                }
            }
        });
    }

    #[test]
    fn a_replica_that_gives_up_releases_the_others() {
        let exchange = Exchange::new(2);
        std::thread::scope(|s| {
            let waiting = s.spawn(|| exchange.all_gather(0, 1u8));
            let guard = AbortOnDrop(Some(&exchange));
            drop(guard);
            assert_eq!(waiting.join().unwrap(), Err(Aborted));
            assert_eq!(exchange.all_gather(1, 2u8), Err(Aborted));
        });
    }
}
