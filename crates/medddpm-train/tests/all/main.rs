//! The integration tests of `medddpm-train`, one binary (each module was a test binary of its own;
//! one link instead of 16 keeps CI's build short).

mod checkpoint_integrity;
mod common;
mod data_errors;
mod data_phantom;
mod data_real;
mod fuzz_inputs;
mod run_lock;
mod sample_brats;
mod train_checkpointing;
mod train_crash;
mod train_events;
mod train_non_finite;
mod train_parallel;
mod train_precision;
mod train_processes;
mod train_quick;
mod train_real;
mod train_resume;
