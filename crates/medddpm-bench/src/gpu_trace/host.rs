//! What the host did while the GPU idled: the driver calls CUPTI records on the host's threads
//! and the caller's marks in its step (`step start`, `batch ready`, ...), on the same clock as
//! the device's activities. A GPU waiting at a step's start for the first launch, for a
//! synchronisation to return or inside a blocking driver call (an allocation, a copy from
//! pageable memory) reads differently here, where the activities alone only say that it waited.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Activity;

/// A driver call on one of the host's threads, on the activities' clock (ns).
#[derive(Debug, Clone, PartialEq)]
pub struct HostCall {
    /// CUPTI's callback id of the driver function (`CUpti_driver_api_trace_cbid`).
    pub cbid: u32,
    /// Start and end, ns.
    pub start_ns: u64,
    /// See `start_ns`.
    pub end_ns: u64,
}

pub use medddpm_ops::marks::{mark, Mark};

/// The mark that opens each traced step.
pub const STEP_START: &str = "step start";
/// The mark after each traced step's synchronisation returned.
pub const SYNCHRONISED: &str = "synchronised";

/// A driver function's time per step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DriverTime {
    /// Its name (`cuLaunchKernel`), or `cbid N` for one not named here.
    pub name: String,
    /// Calls per step.
    pub calls: f64,
    /// Milliseconds per step, summed over the threads.
    pub ms: f64,
}

/// The host's side of the traced steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostSide {
    /// Milliseconds from a step's start to the device's first activity in it (the median
    /// over the steps: the trace itself stalls one of them now and then, see `host_side`).
    pub start_wait_ms: f64,
    /// Milliseconds from a step's last device activity to the synchronisation's return (the
    /// median over the steps).
    pub sync_return_ms: f64,
    /// Milliseconds from a step's start to each of the caller's marks, the mean over the
    /// steps; a label marked again in a step is counted apart as `label (2)`, `label (3)`.
    pub marks_ms: BTreeMap<String, f64>,
    /// The costliest driver functions, by time per step.
    pub driver: Vec<DriverTime>,
    /// For each of the longest idle gaps ([`super::Idle::longest`], same order): the mark
    /// the host had passed last and the driver calls it spent the gap in.
    pub gaps: Vec<String>,
}

/// The driver functions worth naming in a gap (CUDA's `cupti_driver_cbid.h`); others are
/// printed by number.
fn driver_name(cbid: u32) -> String {
    let name = match cbid {
        17 => "cuCtxSynchronize",
        118 => "cuEventCreate",
        119 => "cuEventRecord",
        121 => "cuEventSynchronize",
        126 | 440 => "cuStreamSynchronize",
        216 | 428 => "cuMemsetD8Async",
        220 | 430 => "cuMemsetD32Async",
        277 | 421 => "cuMemcpyHtoDAsync",
        279 | 422 => "cuMemcpyDtoHAsync",
        281 | 423 => "cuMemcpyDtoDAsync",
        295 | 436 => "cuStreamWaitEvent",
        303 => "cuCtxSetCurrent",
        304 => "cuCtxGetCurrent",
        306 | 418 => "cuMemcpyAsync",
        307 | 442 => "cuLaunchKernel",
        325 => "cuEventDestroy",
        481 => "cuFuncSetAttribute",
        514 | 515 => "cuGraphLaunch",
        652 | 653 => "cuLaunchKernelEx",
        686 => "cuKernelGetAttribute",
        776 | 777 => "cuMemcpyBatchAsync",
        _ => return format!("cbid {cbid}"),
    };
    name.to_string()
}

/// The driver functions' time per step, costliest first (at most `keep`).
fn driver_times(calls: &[HostCall], steps: usize, keep: usize) -> Vec<DriverTime> {
    let mut by_name: BTreeMap<String, (usize, u64)> = BTreeMap::new();
    for c in calls {
        let e = by_name.entry(driver_name(c.cbid)).or_default();
        e.0 += 1;
        e.1 += c.end_ns.saturating_sub(c.start_ns);
    }
    let per = steps.max(1) as f64;
    let mut out: Vec<DriverTime> = by_name
        .into_iter()
        .map(|(name, (n, ns))| DriverTime {
            name,
            calls: n as f64 / per,
            ms: ns as f64 / 1e6 / per,
        })
        .collect();
    out.sort_by(|a, b| b.ms.total_cmp(&a.ms));
    out.truncate(keep);
    out
}

/// What the host did in `[from, to]`: its last mark and the driver calls overlapping it.
fn during(from: u64, to: u64, marks: &[Mark], calls: &[HostCall]) -> String {
    let last = marks
        .iter()
        .filter(|m| m.at_ns <= from)
        .max_by_key(|m| m.at_ns);
    let mut text = match last {
        Some(m) => format!(
            "host {:.0} us after '{}'",
            (from - m.at_ns) as f64 / 1e3,
            m.label
        ),
        None => "host before any mark".to_string(),
    };
    let mut by_name: BTreeMap<String, u64> = BTreeMap::new();
    let mut spans = Vec::new();
    for c in calls {
        let (s, e) = (c.start_ns.max(from), c.end_ns.min(to));
        if s < e {
            *by_name.entry(driver_name(c.cbid)).or_default() += e - s;
            spans.push((s, e));
        }
    }
    let covered = union(&mut spans);
    let mut named: Vec<(String, u64)> = by_name.into_iter().collect();
    named.sort_by_key(|n| std::cmp::Reverse(n.1));
    text += &format!(
        "; in driver calls {:.0} of {:.0} us",
        covered as f64 / 1e3,
        (to - from) as f64 / 1e3
    );
    for (name, ns) in named.iter().take(3) {
        text += &format!(", {name} {:.0}", *ns as f64 / 1e3);
    }
    let mut inside: Vec<&Mark> = marks
        .iter()
        .filter(|m| (from..to).contains(&m.at_ns))
        .collect();
    inside.sort_by_key(|m| m.at_ns);
    for (i, m) in inside.iter().take(MARKS_IN_A_GAP).enumerate() {
        let sep = if i == 0 { "; marks in it:" } else { "," };
        text += &format!("{sep} '{}' +{:.0}", m.label, (m.at_ns - from) as f64 / 1e3);
    }
    text
}

/// The marks named inside one gap, in their order.
const MARKS_IN_A_GAP: usize = 6;

fn union(spans: &mut [(u64, u64)]) -> u64 {
    spans.sort_unstable();
    let (mut total, mut end) = (0, 0);
    for &(s, e) in spans.iter() {
        let s = s.max(end);
        if e > s {
            total += e - s;
            end = e;
        }
    }
    total
}

/// The host's side of `steps` traced steps: each opens with a [`STEP_START`] mark and ends
/// with a [`SYNCHRONISED`] one; `gaps` are the idle gaps to explain, as `(start, end)` ns.
/// The waits at a step's ends are medians: CUPTI's own work now and then holds the thread
/// returning from a synchronisation for a few ms after the driver call itself has returned,
/// which an untraced step does not pay.
pub(super) fn host_side(
    activities: &[Activity],
    calls: &[HostCall],
    marks: &[Mark],
    gaps: &[(u64, u64)],
    steps: usize,
) -> HostSide {
    let starts: Vec<u64> = at(marks, STEP_START);
    let synced: Vec<u64> = at(marks, SYNCHRONISED);
    let mut start_wait = Vec::new();
    let mut sync_return = Vec::new();
    let mut offsets: BTreeMap<String, (f64, usize)> = BTreeMap::new();
    for (i, &s) in starts.iter().enumerate() {
        let end = synced.iter().copied().find(|&t| t >= s);
        let (first, last) = first_and_last(activities, s, end.unwrap_or(u64::MAX));
        start_wait.extend(first.map(|f| f - s));
        if let (Some(end), Some(last)) = (end, last) {
            sync_return.push(end - last);
        }
        let next = starts.get(i + 1).copied().unwrap_or(u64::MAX);
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        for m in marks.iter().filter(|m| m.at_ns >= s && m.at_ns < next) {
            if m.label == STEP_START {
                continue;
            }
            let n = seen.entry(m.label).or_default();
            *n += 1;
            let key = match *n {
                1 => m.label.to_string(),
                n => format!("{} ({n})", m.label),
            };
            let e = offsets.entry(key).or_default();
            e.0 += (m.at_ns - s) as f64 / 1e6;
            e.1 += 1;
        }
    }
    HostSide {
        start_wait_ms: median_ms(start_wait),
        sync_return_ms: median_ms(sync_return),
        marks_ms: offsets
            .into_iter()
            .map(|(k, (ms, n))| (k, ms / n as f64))
            .collect(),
        driver: driver_times(calls, steps, 10),
        gaps: gaps
            .iter()
            .map(|&(from, to)| during(from, to, marks, calls))
            .collect(),
    }
}

/// The first start and the last end of the activities that start (and end) in `[from, to]`.
fn first_and_last(activities: &[Activity], from: u64, to: u64) -> (Option<u64>, Option<u64>) {
    let within = |t: &u64| (from..=to).contains(t);
    let starts = activities.iter().map(|a| a.start_ns).filter(within);
    let ends = activities.iter().map(|a| a.end_ns).filter(within);
    (starts.min(), ends.max())
}

/// The median of `ns` in ms (the mean of the middle two of an even count; 0 for none).
fn median_ms(mut ns: Vec<u64>) -> f64 {
    ns.sort_unstable();
    let n = ns.len();
    let mid = match n {
        0 => 0.0,
        _ if n % 2 == 1 => ns[n / 2] as f64,
        _ => (ns[n / 2 - 1] + ns[n / 2]) as f64 / 2.0,
    };
    mid / 1e6
}

fn at(marks: &[Mark], label: &str) -> Vec<u64> {
    let mut out: Vec<u64> = marks
        .iter()
        .filter(|m| m.label == label)
        .map(|m| m.at_ns)
        .collect();
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu_trace::Work;

    fn kernel(start_ns: u64, end_ns: u64) -> Activity {
        Activity {
            work: Work::Kernel("k".into()),
            start_ns,
            end_ns,
        }
    }

    fn call(cbid: u32, start_ns: u64, end_ns: u64) -> HostCall {
        HostCall {
            cbid,
            start_ns,
            end_ns,
        }
    }

    fn mark(label: &'static str, at_ns: u64) -> Mark {
        Mark { label, at_ns }
    }

    #[test]
    fn a_step_s_waits_and_marks_are_measured_from_its_start_mark() {
        // Two steps: the first kernel 300 us after each start, the return 50 us after the last.
        let acts = [
            kernel(1_300_000, 2_000_000),
            kernel(2_000_000, 3_000_000),
            kernel(5_300_000, 6_000_000),
        ];
        let marks = [
            mark(STEP_START, 1_000_000),
            mark("batch ready", 1_100_000),
            mark("batch ready", 1_500_000),
            mark(SYNCHRONISED, 3_050_000),
            mark(STEP_START, 5_000_000),
            mark("batch ready", 5_300_000),
            mark("batch ready", 5_700_000),
            mark(SYNCHRONISED, 6_050_000),
        ];
        let h = host_side(&acts, &[], &marks, &[], 2);
        assert!((h.start_wait_ms - 0.3).abs() < 1e-9, "{h:?}");
        assert!((h.sync_return_ms - 0.05).abs() < 1e-9, "{h:?}");
        // A third step whose synchronisation came back 4 ms late: the medians stay.
        let mut acts = acts.to_vec();
        acts.push(kernel(9_300_000, 10_000_000));
        let mut marks = marks.to_vec();
        marks.extend([mark(STEP_START, 9_000_000), mark(SYNCHRONISED, 14_000_000)]);
        let three = host_side(&acts, &[], &marks, &[], 3);
        assert!((three.start_wait_ms - 0.3).abs() < 1e-9, "{three:?}");
        assert!((three.sync_return_ms - 0.05).abs() < 1e-9, "{three:?}");
        // Marked twice a step: each occurrence its own mean offset.
        assert!((h.marks_ms["batch ready"] - 0.2).abs() < 1e-9, "{h:?}");
        assert!((h.marks_ms["batch ready (2)"] - 0.6).abs() < 1e-9, "{h:?}");
        assert!((h.marks_ms[SYNCHRONISED] - 1.55).abs() < 1e-9, "{h:?}");
    }

    #[test]
    fn a_gap_names_the_last_mark_and_the_driver_calls_inside_it() {
        let marks = [mark(STEP_START, 0), mark("batch ready", 1_000_000)];
        let calls = [
            call(307, 900_000, 1_200_000),
            call(126, 1_500_000, 2_500_000),
            call(126, 1_600_000, 1_700_000),
            call(999, 5_000_000, 6_000_000),
        ];
        let h = host_side(&[], &calls, &marks, &[(1_100_000, 2_100_000)], 1);
        assert_eq!(
            h.gaps,
            ["host 100 us after 'batch ready'; in driver calls 700 of 1000 us, cuStreamSynchronize 700, cuLaunchKernel 100"]
        );
        // Marks inside a gap are named with their offsets.
        let marks = [
            mark(STEP_START, 0),
            mark("a", 1_200_000),
            mark("b", 1_900_000),
        ];
        let inside = host_side(&[], &[], &marks, &[(1_100_000, 2_100_000)], 1);
        assert_eq!(
            inside.gaps,
            ["host 1100 us after 'step start'; in driver calls 0 of 1000 us; marks in it: 'a' +100, 'b' +800"]
        );
        // Two synchronisations (1.1 ms), then the unnamed call (1 ms), then the launch.
        assert_eq!(h.driver[0].name, "cuStreamSynchronize");
        assert_eq!(h.driver[0].calls, 2.0);
        assert!((h.driver[0].ms - 1.1).abs() < 1e-9);
        assert_eq!(h.driver[1].name, "cbid 999");
        assert_eq!(h.driver[2].name, "cuLaunchKernel");
    }
}
