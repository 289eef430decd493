//! Spreading training volumes over threads (std's scoped threads: the crate needs no thread
//! pool dependency for one loop), with results and progress back on the calling thread.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;

use crate::error::Result;

/// Runs `work(item)` for every item on up to `threads` threads and hands each result to
/// `done(item, result)` on the calling thread, in the order they finish. After the first error
/// no new item starts, and that error is returned.
pub(super) fn run_parallel<T: Send>(
    items: &[usize],
    threads: usize,
    work: impl Fn(usize) -> Result<T> + Sync,
    mut done: impl FnMut(usize, T),
) -> Result<()> {
    let threads = threads.clamp(1, items.len().max(1));
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel::<(usize, Result<T>)>();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let tx = tx.clone();
            let (next, stop, work) = (&next, &stop, &work);
            scope.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Some(&item) = items.get(next.fetch_add(1, Ordering::Relaxed)) else {
                        break;
                    };
                    let result = work(item);
                    let failed = result.is_err();
                    if tx.send((item, result)).is_err() || failed {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let mut first_error = None;
        for (item, result) in rx {
            match result {
                Ok(value) if first_error.is_none() => done(item, value),
                Ok(_) => {}
                Err(e) => {
                    stop.store(true, Ordering::Relaxed);
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    })
}

#[cfg(test)]
mod tests {
    use super::run_parallel;
    use crate::MetricsError;

    #[test]
    fn every_item_once_and_the_error_stops_the_run() {
        let items: Vec<usize> = (0..50).collect();
        let mut seen = vec![0usize; 50];
        run_parallel(
            &items,
            4,
            |i| Ok(i * 2),
            |i, v| {
                assert_eq!(v, i * 2);
                seen[i] += 1;
            },
        )
        .unwrap();
        assert!(seen.iter().all(|&n| n == 1));

        let err = run_parallel(
            &items,
            3,
            |i| {
                if i == 7 {
                    Err(MetricsError::Empty { what: "7".into() })
                } else {
                    Ok(i)
                }
            },
            |_, _| {},
        )
        .unwrap_err();
        assert_eq!(err, MetricsError::Empty { what: "7".into() });
    }
}
