mod layout;
mod stage_memory;

pub use layout::*;
pub use stage_memory::*;
