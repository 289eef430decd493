//! Where a step's GPU time goes: every kernel, copy and memset the device ran during a few
//! steps, recorded by NVIDIA's CUPTI activity API (`cupti.rs`, CUDA builds), then summed: the
//! GPU's busy time (the union of their intervals), kernel time by operation class and the
//! costliest kernels. Beside the step's wall time this says whether the GPU or the host holds
//! the step, and which operations to fuse. `scripts/torch-gpu-profile.py` sums PyTorch's
//! profiler records with the same classes (`gpu_classes.json`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[cfg(feature = "cuda")]
mod cupti;
mod host;

pub use host::{mark, DriverTime, HostCall, HostSide, Mark, STEP_START, SYNCHRONISED};

/// Kernels whose names match a rule's pattern (lower case, first match wins) belong to its
/// class; copies and memsets are `copies`; the rest `other`.
const CLASSES: &str = include_str!("../../gpu_classes.json");

/// Idle gaps at most this long (ns) are a launch's own latency; longer ones, the host late
/// with the next launch (or a synchronisation).
const SHORT_GAP_NS: u64 = 10_000;

/// The longest idle gaps kept in a summary.
const LONGEST_GAPS: usize = 12;

/// What the device ran.
#[derive(Debug, Clone, PartialEq)]
pub enum Work {
    /// A kernel, by name.
    Kernel(String),
    /// A copy or memset, by what it is (`memcpy HtoD from pageable`, `memset`): listed among
    /// the kernels in [`GpuTime::top`], not counted as a launch.
    Copy(&'static str),
}

/// One activity the device ran.
#[derive(Debug, Clone, PartialEq)]
pub struct Activity {
    /// A kernel, a copy or a memset.
    pub work: Work,
    /// Start and end on the device's clock, in nanoseconds.
    pub start_ns: u64,
    /// See `start_ns`.
    pub end_ns: u64,
}

/// A kernel's share of the traced steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelTime {
    /// The kernel's name (cut at 120 characters).
    pub name: String,
    /// Launches per step.
    pub calls: f64,
    /// Milliseconds per step.
    pub ms: f64,
}

/// The GPU's time per step, from the activities of `steps` traced steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuTime {
    /// Steps traced (each synchronised).
    pub steps: usize,
    /// Wall time of a traced step, ms (the tracer adds a little to each launch: compare the
    /// busy time with the untraced median of the same step).
    pub wall_ms: f64,
    /// Time the GPU ran anything, ms per step: the union of the activities' intervals.
    pub busy_ms: f64,
    /// Kernels, copies and memsets added up, ms per step (above `busy_ms` where they overlap).
    pub kernel_ms: f64,
    /// Kernel launches per step.
    pub launches: f64,
    /// Kernel time per step by operation class, ms.
    pub by_class_ms: BTreeMap<String, f64>,
    /// Every kernel (and copy, memset), costliest first, by time per step: the cheap ones'
    /// counts (layout copies, small products) say as much as the costly ones' time.
    pub top: Vec<KernelTime>,
    /// Where the GPU idled between its activities (absent from records written before it was
    /// traced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<Idle>,
    /// What the host did meanwhile: its marks and driver calls (absent from records written
    /// before they were traced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostSide>,
}

/// What a [`Tracer`] recorded: the device's activities, the host's driver calls and the
/// caller's marks, on one clock.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recording {
    /// Kernels, copies and memsets.
    pub activities: Vec<Activity>,
    /// Driver calls on the host's threads.
    pub calls: Vec<HostCall>,
    /// The caller's marks ([`mark`]).
    pub marks: Vec<Mark>,
}

/// The GPU's idle time between the first and last activity of the traced steps (the gaps at
/// the steps' boundaries included: each traced step is synchronised).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Idle {
    /// Milliseconds per step in gaps of at most 10 us.
    pub short_ms: f64,
    /// Milliseconds per step in longer gaps.
    pub long_ms: f64,
    /// Longer gaps per step.
    pub long_gaps: f64,
    /// The longest gaps, longest first.
    pub longest: Vec<Gap>,
}

/// One idle gap and the activities on either side of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gap {
    /// Its length, microseconds.
    pub us: f64,
    /// The activity that ended last before it.
    pub after: String,
    /// The activity that ended it.
    pub before: String,
}

impl Work {
    fn name(&self) -> String {
        match self {
            Work::Kernel(name) => name.chars().take(120).collect(),
            Work::Copy(what) => what.to_string(),
        }
    }
}

/// The idle gaps between `activities` (in any order), per step of `steps`, and where the
/// longest ones lie (start, end ns).
fn idle(activities: &[Activity], steps: usize) -> (Idle, Vec<(u64, u64)>) {
    let mut order: Vec<&Activity> = activities.iter().collect();
    order.sort_by_key(|a| (a.start_ns, a.end_ns));
    let mut gaps: Vec<(u64, &Activity, &Activity)> = Vec::new();
    let mut last: Option<&Activity> = None;
    for a in order {
        match last {
            Some(l) if a.start_ns > l.end_ns => {
                gaps.push((a.start_ns - l.end_ns, l, a));
                last = Some(a);
            }
            Some(l) if a.end_ns <= l.end_ns => {}
            _ => last = Some(a),
        }
    }
    let per_step = |ns: u64| ns as f64 / 1e6 / steps.max(1) as f64;
    let (long, short): (Vec<_>, Vec<_>) = gaps.into_iter().partition(|g| g.0 > SHORT_GAP_NS);
    let mut longest = long.clone();
    longest.sort_by_key(|g| std::cmp::Reverse(g.0));
    longest.truncate(LONGEST_GAPS);
    let spans = longest
        .iter()
        .map(|(ns, after, _)| (after.end_ns, after.end_ns + ns))
        .collect();
    let idle = Idle {
        short_ms: per_step(short.iter().map(|g| g.0).sum()),
        long_ms: per_step(long.iter().map(|g| g.0).sum()),
        long_gaps: long.len() as f64 / steps.max(1) as f64,
        longest: longest
            .into_iter()
            .map(|(ns, after, before)| Gap {
                us: ns as f64 / 1e3,
                after: after.work.name(),
                before: before.work.name(),
            })
            .collect(),
    };
    (idle, spans)
}

impl GpuTime {
    /// Kernel time per step by class, as one line (`convolution 35.8, matmul 10.4, ...`, ms).
    pub fn classes_text(&self) -> String {
        self.by_class_ms
            .iter()
            .map(|(k, v)| format!("{k} {v:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The idle time as one line (`idle 6.1 ms: 4.0 in 35 gaps over 10 us, 2.1 in shorter ones;
    /// longest 1200 us after a before b`).
    pub fn idle_text(&self) -> String {
        let Some(i) = &self.idle else {
            return "idle not traced".into();
        };
        let mut text = format!(
            "idle {:.1} ms: {:.1} in {:.0} gaps over 10 us, {:.1} in shorter ones",
            i.short_ms + i.long_ms,
            i.long_ms,
            i.long_gaps,
            i.short_ms
        );
        if let Some(g) = i.longest.first() {
            text += &format!(
                "; longest {:.0} us, after {} before {}",
                g.us, g.after, g.before
            );
        }
        text
    }

    /// The host's side as one line: how long the GPU waited at a step's start and for the
    /// synchronisation's return, the costliest driver calls, what the host did in the longest
    /// gap.
    pub fn host_text(&self) -> Option<String> {
        let h = self.host.as_ref()?;
        let driver: Vec<String> = h
            .driver
            .iter()
            .take(4)
            .map(|d| format!("{} {:.1} ({:.0} calls)", d.name, d.ms, d.calls))
            .collect();
        let mut text = format!(
            "first GPU work {:.2} ms after the step's start, synchronisation back {:.2} ms after the last; driver calls (ms): {}",
            h.start_wait_ms,
            h.sync_return_ms,
            driver.join(", ")
        );
        if let Some(g) = h.gaps.first() {
            text += &format!("; in the longest gap: {g}");
        }
        Some(text)
    }
}

/// A classification rule of `gpu_classes.json`.
#[derive(Deserialize)]
struct Rule {
    pattern: String,
    class: String,
}

#[derive(Deserialize)]
struct Rules {
    rules: Vec<Rule>,
}

/// The operation class of a kernel named `name`.
pub fn classify(name: &str) -> String {
    static RULES: std::sync::OnceLock<Rules> = std::sync::OnceLock::new();
    let rules = RULES
        .get_or_init(|| serde_json::from_str(CLASSES).expect("gpu_classes.json is valid JSON"));
    let low = name.to_lowercase();
    rules
        .rules
        .iter()
        .find(|r| matches(&r.pattern, &low))
        .map_or_else(|| "other".to_string(), |r| r.class.clone())
}

/// The patterns are alternatives of plain substrings (`a|b|c`): the same patterns serve
/// Python's `re.search`, which the profile script uses.
fn matches(pattern: &str, name: &str) -> bool {
    pattern.split('|').any(|part| name.contains(part))
}

/// The busy time (the union of the intervals) in nanoseconds.
fn union_ns(activities: &[Activity]) -> u64 {
    let mut spans: Vec<(u64, u64)> = activities.iter().map(|a| (a.start_ns, a.end_ns)).collect();
    spans.sort_unstable();
    let mut total = 0;
    let mut end = 0;
    for (s, e) in spans {
        if s >= end {
            total += e.saturating_sub(s);
            end = e;
        } else if e > end {
            total += e - end;
            end = e;
        }
    }
    total
}

/// Sums the activities of `steps` steps that took `wall_ms` each.
pub fn summarise(activities: &[Activity], steps: usize, wall_ms: f64) -> GpuTime {
    summarise_with_gaps(activities, steps, wall_ms).0
}

/// [`summarise`], and where its longest idle gaps lie (start, end ns).
fn summarise_with_gaps(
    activities: &[Activity],
    steps: usize,
    wall_ms: f64,
) -> (GpuTime, Vec<(u64, u64)>) {
    let per_step = |ns: u64| ns as f64 / 1e6 / steps.max(1) as f64;
    let mut by_class: BTreeMap<String, u64> = BTreeMap::new();
    let mut by_name: BTreeMap<String, (usize, u64)> = BTreeMap::new();
    let mut launches = 0usize;
    let mut total = 0u64;
    for a in activities {
        let ns = a.end_ns.saturating_sub(a.start_ns);
        total += ns;
        let class = match &a.work {
            Work::Kernel(name) => {
                launches += 1;
                classify(name)
            }
            Work::Copy(_) => "copies".to_string(),
        };
        let name = a.work.name();
        let entry = by_name.entry(name).or_default();
        entry.0 += 1;
        entry.1 += ns;
        *by_class.entry(class).or_default() += ns;
    }
    let mut top: Vec<KernelTime> = by_name
        .into_iter()
        .map(|(name, (calls, ns))| KernelTime {
            name,
            calls: calls as f64 / steps.max(1) as f64,
            ms: per_step(ns),
        })
        .collect();
    top.sort_by(|a, b| b.ms.total_cmp(&a.ms));
    let (idle, gaps) = idle(activities, steps);
    let time = GpuTime {
        steps,
        wall_ms,
        busy_ms: per_step(union_ns(activities)),
        kernel_ms: per_step(total),
        launches: launches as f64 / steps.max(1) as f64,
        by_class_ms: by_class
            .into_iter()
            .map(|(k, v)| (k, per_step(v)))
            .collect(),
        top,
        idle: Some(idle),
        host: None,
    };
    (time, gaps)
}

/// [`summarise`] with the host's side: its marks and driver calls, and what it did in each of
/// the longest idle gaps.
pub fn summarise_recording(recording: &Recording, steps: usize, wall_ms: f64) -> GpuTime {
    let (mut time, gaps) = summarise_with_gaps(&recording.activities, steps, wall_ms);
    time.host = Some(host::host_side(
        &recording.activities,
        &recording.calls,
        &recording.marks,
        &gaps,
        steps,
    ));
    time
}

/// Why the device's activities cannot be recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    /// This build has no CUDA backend.
    #[error("this build has no CUDA backend (feature `cuda`)")]
    NoCuda,
    /// CUPTI did not load, or lacks a function.
    #[error("{0}")]
    Library(String),
    /// A CUPTI call failed.
    #[error("{call} failed with CUPTI error {code}")]
    Cupti {
        /// The function.
        call: &'static str,
        /// CUPTI's error number.
        code: i32,
    },
}

/// Records the device's activities from [`Tracer::start`] to [`Tracer::finish`].
pub struct Tracer {
    #[cfg(feature = "cuda")]
    inner: cupti::Session,
}

impl Tracer {
    /// Starts recording, or says why it cannot (no CUDA in this build, CUPTI not found).
    pub fn start() -> Result<Self, TraceError> {
        #[cfg(feature = "cuda")]
        {
            let inner = cupti::Session::start()?;
            medddpm_ops::marks::start(cupti::timestamp);
            Ok(Self { inner })
        }
        #[cfg(not(feature = "cuda"))]
        {
            Err(TraceError::NoCuda)
        }
    }

    /// Stops recording (the caller has synchronised the device) and returns what was
    /// recorded.
    pub fn finish(self) -> Result<Recording, TraceError> {
        let marks = medddpm_ops::marks::take();
        #[cfg(feature = "cuda")]
        {
            let (activities, calls) = self.inner.finish()?;
            Ok(Recording {
                activities,
                calls,
                marks,
            })
        }
        #[cfg(not(feature = "cuda"))]
        {
            Ok(Recording {
                marks,
                ..Recording::default()
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(name: &str, start: u64, end: u64) -> Activity {
        activity(Work::Kernel(name.into()), start, end)
    }

    fn copy(what: &'static str, start: u64, end: u64) -> Activity {
        activity(Work::Copy(what), start, end)
    }

    fn activity(work: Work, start_ns: u64, end_ns: u64) -> Activity {
        Activity {
            work,
            start_ns,
            end_ns,
        }
    }

    #[test]
    fn busy_time_is_the_union_of_overlapping_intervals() {
        let acts = [
            kernel("a", 0, 10),
            kernel("b", 5, 15),
            kernel("c", 20, 30),
            copy("memset", 25, 40),
        ];
        assert_eq!(union_ns(&acts), 15 + 20);
        let t = summarise(&acts, 1, 1.0);
        assert_eq!(t.kernel_ms, 45.0 / 1e6);
        assert_eq!(t.launches, 3.0);
        assert_eq!(t.by_class_ms["copies"], 15.0 / 1e6);
        let text = t.classes_text();
        assert!(text.starts_with("copies 0.0, other 0.0"), "{text}");
    }

    #[test]
    fn copies_are_named_in_the_top_list_without_counting_as_launches() {
        let acts = [
            kernel("a", 0, 10),
            copy("memcpy HtoD from pageable", 10, 40),
            copy("memcpy HtoD from pageable", 40, 70),
            copy("memset", 70, 75),
        ];
        let t = summarise(&acts, 1, 1.0);
        assert_eq!(t.launches, 1.0);
        assert_eq!(t.by_class_ms["copies"], 65.0 / 1e6);
        let pageable = &t.top[0];
        assert_eq!(pageable.name, "memcpy HtoD from pageable");
        assert_eq!((pageable.calls, pageable.ms), (2.0, 60.0 / 1e6));
        assert!(t.top.iter().any(|k| k.name == "memset" && k.calls == 1.0));
    }

    #[test]
    fn kernels_are_sorted_into_the_classes_of_both_frameworks() {
        for (name, class) in [
            (
                "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_ndhwc",
                "convolution",
            ),
            (
                "cudnn::engines_precompiled::nhwcToNchwKernel",
                "convolution",
            ),
            (
                "triton_red_fused_native_group_norm_backward_12",
                "normalisation",
            ),
            ("group_norm_forward_f32", "normalisation"),
            ("tile_moments_f_bf16_n_8", "normalisation"),
            ("multi_tensor_apply_kernel<FusedAdam>", "optimizer"),
            ("fused_adam_step", "optimizer"),
            ("triton_poi_fused_add_silu_3", "elementwise"),
            ("elemwise_fuse", "elementwise"),
            ("reduce_kernel<512, 1>", "reduction"),
        ] {
            assert_eq!(classify(name), class, "{name}");
        }
        assert_eq!(classify("something_new"), "other");
    }

    #[test]
    fn idle_gaps_are_split_at_ten_microseconds_and_the_longest_named() {
        let acts = [
            kernel("c", 60_000, 70_000),
            kernel("a", 0, 10_000),
            // Inside `a`: no gap.
            kernel("inner", 2_000, 5_000),
            kernel("b", 15_000, 20_000),
        ];
        let t = summarise(&acts, 2, 1.0);
        let idle = t.idle.clone().unwrap();
        // 5 us between a and b (short), 40 us between b and c (long), per step of two.
        assert_eq!(idle.short_ms, 5_000.0 / 1e6 / 2.0);
        assert_eq!(idle.long_ms, 40_000.0 / 1e6 / 2.0);
        assert_eq!(idle.long_gaps, 0.5);
        assert_eq!(
            idle.longest,
            vec![Gap {
                us: 40.0,
                after: "b".into(),
                before: "c".into()
            }]
        );
        let text = t.idle_text();
        assert!(text.starts_with("idle 0.0 ms: 0.0 in 0 gaps"), "{text}");
    }

    #[test]
    fn costliest_kernels_come_first_per_step() {
        let acts = [
            kernel("cheap", 0, 1_000_000),
            kernel("dear", 0, 3_000_000),
            kernel("dear", 0, 3_000_000),
        ];
        let t = summarise(&acts, 2, 5.0);
        assert_eq!(t.top[0].name, "dear");
        assert_eq!(t.top[0].calls, 1.0);
        assert_eq!(t.top[0].ms, 3.0);
        assert_eq!(t.top[1].ms, 0.5);
    }
}
