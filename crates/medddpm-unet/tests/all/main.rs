//! The integration tests of `medddpm-unet`, one binary (each module was a test binary of its own;
//! one link instead of 5 keeps CI's build short).

mod architecture;
mod checkpointing;
mod golden_fixture;
mod import_errors;
mod precision_layout;
