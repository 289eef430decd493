//! How busy the host's threads were over the timed training steps, on the CubeCL backends.
//!
//! burn 0.21 runs an operation on three threads: the caller's (autodiff, the model), burn-fusion's
//! runner (fusing, and the cuDNN engine's first calls) and the compute server's runner (kernel
//! launches, memory, cuDNN calls). A step takes as long as the busiest of them or the GPU,
//! whichever is longest; no profiler on our GPU machines shows the threads, so the patched
//! `cubecl-common` counts them (`vendor/cubecl-common/README.medddpm.md`).

use std::collections::BTreeMap;

/// Starts counting from zero.
pub fn reset() {
    #[cfg(any(feature = "cuda", feature = "wgpu"))]
    cubecl_common::busy::reset();
}

/// Milliseconds per step since [`reset`], by thread and state, and what the device thread's
/// time went to (milliseconds and calls per step); empty where nothing was counted (the CPU
/// backend runs no such threads).
#[cfg_attr(not(any(feature = "cuda", feature = "wgpu")), allow(unused_variables))]
pub fn per_step(steps: usize) -> BTreeMap<String, f64> {
    #[allow(unused_mut)]
    let mut out = BTreeMap::new();
    #[cfg(any(feature = "cuda", feature = "wgpu"))]
    {
        use cubecl_common::busy::{self, IN_CALL, RUNNING, WAITING};
        let ms = |s: f64| s * 1e3 / steps.max(1) as f64;
        let threads = [
            ("fusion thread running", RUNNING[1].read()),
            ("device thread running", RUNNING[2].read()),
            ("caller waiting for the fusion thread", WAITING[0].read()),
            (
                "fusion thread waiting for the device thread",
                WAITING[1].read(),
            ),
        ]
        .map(|(name, read)| (name.to_string(), read));
        // What the device thread's time went to: each also counts its calls.
        let calls = [
            ("kernel launch tasks", busy::LAUNCH_TASK),
            ("in cuLaunchKernel", busy::DRIVER_LAUNCH),
            ("reserving memory", busy::RESERVE),
            ("in cuDNN", busy::CUDNN),
            ("in cuBLAS", busy::CUBLAS),
            ("in cuGraphLaunch", busy::GRAPH_LAUNCH),
            ("graph replay copies", busy::GRAPH_COPIES),
            ("launch, kernel id", busy::LAUNCH_ID),
            ("launch, command", busy::LAUNCH_COMMAND),
            ("launch, metadata", busy::LAUNCH_METADATA),
            ("launch, resources", busy::LAUNCH_RESOURCES),
            ("launch, kernel", busy::LAUNCH_KERNEL),
            ("launch, releasing staging buffers", busy::LAUNCH_FLUSH),
        ]
        .map(|(what, kind)| (format!("device thread: {what}"), IN_CALL[kind].read()));
        if threads.iter().chain(&calls).any(|(_, (n, _))| *n > 0) {
            for (name, (n, s)) in threads {
                // How many batches of tasks a runner took (each waits for a batch of 32, or
                // takes what is queued when idle: the patched cubecl-common).
                if name.ends_with("running") {
                    out.insert(format!("{name}: calls"), n as f64 / steps.max(1) as f64);
                }
                out.insert(name, ms(s));
            }
            for (name, (n, s)) in calls {
                out.insert(format!("{name}: calls"), n as f64 / steps.max(1) as f64);
                out.insert(name, ms(s));
            }
        }
    }
    out
}

/// The `n` largest times of [`per_step`]'s rows (call counts left out), in seconds, for a log
/// line: where a first step's time went.
pub fn largest_s(rows: &BTreeMap<String, f64>, n: usize) -> String {
    let mut times: Vec<(&String, f64)> = rows
        .iter()
        .filter(|(name, _)| !name.ends_with(": calls"))
        .map(|(name, &ms)| (name, ms / 1e3))
        .collect();
    times.sort_by(|a, b| b.1.total_cmp(&a.1));
    times
        .iter()
        .take(n)
        .map(|(name, s)| format!("{name} {s:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(all(test, any(feature = "cuda", feature = "wgpu")))]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use cubecl_common::device::{DeviceId, DeviceService, ServerUtilitiesHandle};
    use cubecl_common::device_handle::DeviceHandle;

    struct Idle;

    impl DeviceService for Idle {
        fn init(_device_id: DeviceId) -> Self {
            Idle
        }

        fn utilities(&self) -> ServerUtilitiesHandle {
            Arc::new(())
        }
    }

    /// The patched runner takes a lone task when idle: cubecl 0.10's waited for 31 more, or a
    /// flush, before running it (a GPU idling while kernel launches queued on the host).
    #[test]
    fn an_idle_runner_takes_a_lone_task() {
        let handle = DeviceHandle::<Idle>::new(DeviceId {
            type_id: 61,
            index_id: 0,
        });
        let ran = Arc::new(AtomicBool::new(false));
        let flag = ran.clone();
        handle.submit(move |_| flag.store(true, Ordering::Release));
        let start = Instant::now();
        while !ran.load(Ordering::Acquire) && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            ran.load(Ordering::Acquire),
            "the task waited for a full batch"
        );
        // Tasks still run in order, through batches taken whole or in part.
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        for i in 0..100 {
            let order = order.clone();
            handle.submit(move |_| order.lock().unwrap().push(i));
        }
        handle.submit_blocking(|_| ()).unwrap();
        assert_eq!(*order.lock().unwrap(), (0..100).collect::<Vec<_>>());
    }
}
