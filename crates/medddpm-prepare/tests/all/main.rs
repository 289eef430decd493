//! The integration tests of `medddpm-prepare`, one binary (each module was a test binary of its own;
//! one link instead of 5 keeps CI's build short).

mod brats;
mod common;
mod head_mask;
mod real_demo;
mod real_head_mask;
mod whole_head;
