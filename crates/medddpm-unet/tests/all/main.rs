//! The integration tests of `medddpm-unet`, one binary (each module was a test binary of its own;
//! one link instead of 5 keeps CI's build short).

mod architecture;
mod checkpointing;
mod golden_fixture;
mod import_errors;
mod precision_layout;

/// Held by each test that runs a backward pass, so that no two run at once: in burn-autodiff
/// 0.21 one thread's `backward()` can sweep away the graph another thread is building on a leaf,
/// and that leaf's gradient is silently lost (tracel-ai/burn#5573).
fn autodiff_alone() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
