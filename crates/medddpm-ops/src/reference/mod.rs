//! What each operation of the backend extension computes, below the trait that names them: its
//! settings (the specs) and its plain-burn-op twin, which every backend gets as the trait's
//! default and which the engines' tests compare against.

pub mod adam;
pub mod channels;
pub mod conv;
pub mod conv_spec;
pub mod norm;
pub mod product;
pub mod sum;
pub mod upsample;
