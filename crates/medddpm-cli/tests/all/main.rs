//! The integration tests of `medddpm-cli`, one binary (each module was a test binary of its own;
//! one link instead of 5 keeps CI's build short).

mod cli;
mod cluster;
mod common;
mod crash;
mod eval_render;
mod plan;
mod prepare;
mod processes;
mod synthesize;
