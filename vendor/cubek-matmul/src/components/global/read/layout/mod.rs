pub mod stage;
pub mod tiled;
