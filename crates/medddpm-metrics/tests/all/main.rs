//! The integration tests of `medddpm-metrics`, one binary (each module was a test binary of its own;
//! one link instead of 4 keeps CI's build short).

mod common;
mod mmd_adherence;
mod pixel_ssim;
mod report;
mod timing;
