//! The integration tests of `medddpm-nifti`, one binary (each module was a test binary of its own;
//! one link instead of 3 keeps CI's build short).

mod bad_input;
mod common;
mod real_files;
mod roundtrip;
