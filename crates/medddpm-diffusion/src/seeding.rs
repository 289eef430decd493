//! Process-wide locks around state burn keeps once per process.
//!
//! [`backend_rng`] around seeding the backend and drawing from it (training noise, a
//! model's initial weights, a sample's reverse process): the backends keep one random
//! generator, which replicas, sessions or samplers in other threads (or tests run on threads)
//! would otherwise reseed in between, making a seeded run depend on what else the process
//! does. [`autodiff_turn`] around building an autodiff graph and running its backward pass.
//! They live here, beside the samplers and the training loss, so that every crate above takes
//! the same locks.

use std::sync::{Mutex, MutexGuard};

static BACKEND_RNG: Mutex<()> = Mutex::new(());

/// Holds the lock until dropped: take it before `B::seed` and keep it until the last draw
/// that seed is meant for.
pub fn backend_rng() -> MutexGuard<'static, ()> {
    BACKEND_RNG.lock().unwrap_or_else(|e| e.into_inner())
}

static AUTODIFF: Mutex<()> = Mutex::new(());

/// A turn at building an autodiff graph and running its backward pass, one thread at a time:
/// burn-autodiff 0.21 keeps one graph registry per process, and one thread's `backward()` can
/// sweep away the graph another thread is starting on a leaf, whose gradient is then silently
/// missing (tracel-ai/burn#5573). Taken by the trainer's micro-step (replicas on threads take
/// turns; uncontended with one replica a process) and by tests that run backward passes side
/// by side. Never take it inside [`backend_rng`]'s hold, or the other way round.
pub fn autodiff_turn() -> MutexGuard<'static, ()> {
    AUTODIFF.lock().unwrap_or_else(|e| e.into_inner())
}
