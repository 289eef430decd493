//! Running the cases of a command on a few threads, one bad case never stopping the others,
//! with progress reported on the caller's thread.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use crate::report::Skipped;
use crate::CaseProblem;

/// Told about each case as it finishes (the CLI draws a progress bar from it). Called on the
/// thread that started the run.
pub trait Progress {
    /// The run starts `total` cases.
    fn started(&mut self, _total: usize) {}
    /// One case finished: prepared, or skipped for `problem`.
    fn finished(&mut self, _case: &str, _problem: Option<&CaseProblem>) {}
}

/// Progress that shows nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct Silent;

impl Progress for Silent {}

/// How many cases run at once: `jobs`, or for 0 the machine's cores up to 4 (a BraTS case
/// holds about 0.4 GB while it is prepared).
pub(crate) fn worker_count(jobs: usize, cases: usize) -> usize {
    let auto = || std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
    let n = if jobs == 0 { auto() } else { jobs };
    n.clamp(1, cases.max(1))
}

/// Runs `work` on every item, `jobs` at a time (see [`worker_count`]); returns the prepared
/// cases' details and the skipped cases, both in item order.
pub(crate) fn run_cases<T: Sync, D: Send>(
    items: &[T],
    jobs: usize,
    id: impl Fn(&T) -> String,
    work: impl Fn(&T) -> Result<D, CaseProblem> + Sync,
    progress: &mut dyn Progress,
) -> (Vec<D>, Vec<Skipped>) {
    progress.started(items.len());
    let mut results: Vec<Option<Result<D, CaseProblem>>> = items.iter().map(|_| None).collect();
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|scope| {
        for _ in 0..worker_count(jobs, items.len()) {
            let (tx, next, work) = (tx.clone(), &next, &work);
            scope.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                if tx.send((i, work(item))).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        for (i, result) in rx {
            progress.finished(&id(&items[i]), result.as_ref().err());
            results[i] = Some(result);
        }
    });
    let mut done = Vec::new();
    let mut skipped = Vec::new();
    for (item, result) in items.iter().zip(results) {
        match result {
            Some(Ok(d)) => done.push(d),
            Some(Err(p)) => skipped.push(Skipped::new(id(item), p)),
            None => {}
        }
    }
    (done, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Count(usize, usize);
    impl Progress for Count {
        fn started(&mut self, total: usize) {
            self.0 = total;
        }
        fn finished(&mut self, _: &str, _: Option<&CaseProblem>) {
            self.1 += 1;
        }
    }

    #[test]
    fn results_keep_item_order_and_bad_items_are_skipped() {
        let items: Vec<usize> = (0..10).collect();
        let mut p = Count(0, 0);
        let (done, skipped) = run_cases(
            &items,
            3,
            |i| format!("case{i}"),
            |&i| {
                if i % 4 == 1 {
                    Err(CaseProblem::EmptyLabel {
                        path: "x".into(),
                        what: "head".into(),
                        threshold: i as f64,
                    })
                } else {
                    Ok(i * 10)
                }
            },
            &mut p,
        );
        assert_eq!(done, vec![0, 20, 30, 40, 60, 70, 80]);
        let ids: Vec<_> = skipped.iter().map(|s| s.case.as_str()).collect();
        assert_eq!(ids, ["case1", "case5", "case9"]);
        assert_eq!((p.0, p.1), (10, 10));
    }
}
