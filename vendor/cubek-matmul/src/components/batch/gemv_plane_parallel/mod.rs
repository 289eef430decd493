mod config;
mod layout;
mod matmul;
mod setup;

pub use config::*;
pub use matmul::*;
pub use setup::*;
