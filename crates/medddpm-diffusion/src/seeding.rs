//! One process-wide lock around seeding the backend and drawing from it (training noise, a
//! model's initial weights, a sample's reverse process): the backends keep one random
//! generator, which replicas, sessions or samplers in other threads (or tests run on threads)
//! would otherwise reseed in between, making a seeded run depend on what else the process
//! does. It lives here, beside the samplers that draw from the generator, so that every crate
//! above takes the same lock.

use std::sync::{Mutex, MutexGuard};

static BACKEND_RNG: Mutex<()> = Mutex::new(());

/// Holds the lock until dropped: take it before `B::seed` and keep it until the last draw
/// that seed is meant for.
pub fn backend_rng() -> MutexGuard<'static, ()> {
    BACKEND_RNG.lock().unwrap_or_else(|e| e.into_inner())
}
