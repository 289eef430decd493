//! Peak memory of a benchmark run.
//!
//! On an NVIDIA GPU: `nvidia-smi`'s `memory.used` of the device, polled every 100 ms, minus its
//! value before the run started (the whole device, so it includes burn's memory pools and the
//! CUDA context; the benchmark assumes nothing else runs on the GPU). Elsewhere: the process's
//! peak resident set size (`VmHWM`).

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// `memory.used` of GPU 0 in MiB, if `nvidia-smi` answers.
pub fn nvidia_used_mib() -> Option<f64> {
    let out = Command::new("nvidia-smi")
        .args([
            "--query-gpu=memory.used",
            "--format=csv,noheader,nounits",
            "-i",
            "0",
        ])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// The GPU's name, if `nvidia-smi` answers.
pub fn nvidia_gpu_name() -> Option<String> {
    let out = Command::new("nvidia-smi")
        .args(["--query-gpu=name", "--format=csv,noheader", "-i", "0"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

/// Peak resident set size of this process in MiB (Linux).
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Polls GPU memory in the background while a run goes on.
pub struct PeakMemory {
    baseline: Option<f64>,
    stop: Arc<AtomicBool>,
    peak: Arc<std::sync::Mutex<Option<f64>>>,
    handle: Option<JoinHandle<()>>,
}

impl PeakMemory {
    /// Starts polling when `gpu` and `nvidia-smi` works; otherwise [`PeakMemory::finish`]
    /// reports the peak RSS.
    pub fn start(gpu: bool) -> Self {
        let baseline = if gpu { nvidia_used_mib() } else { None };
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(std::sync::Mutex::new(None));
        let handle = baseline.map(|_| {
            let flag = stop.clone();
            let peak = peak.clone();
            std::thread::spawn(move || {
                while !flag.load(Ordering::SeqCst) {
                    if let Some(v) = nvidia_used_mib() {
                        let mut p = peak.lock().unwrap();
                        *p = Some(p.map_or(v, |p: f64| p.max(v)));
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
        });
        Self {
            baseline,
            stop,
            peak,
            handle,
        }
    }

    /// Peak so far in MiB and how it is measured.
    pub fn current(&self) -> (Option<f64>, String) {
        match self.baseline {
            Some(base) => {
                let peak = *self.peak.lock().unwrap();
                (
                    peak.map(|p| (p - base).max(0.0)),
                    format!("nvidia-smi memory.used of the GPU, peak minus the {base:.0} MiB in use before the run (includes burn's memory pools and the CUDA context)"),
                )
            }
            None => (
                peak_rss_mib(),
                "peak resident set size of the process (VmHWM)".to_string(),
            ),
        }
    }

    /// Stops polling; the peak in MiB and how it was measured.
    pub fn finish(mut self) -> (Option<f64>, String) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        self.current()
    }
}
