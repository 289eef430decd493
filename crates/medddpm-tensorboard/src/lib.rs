//! TensorBoard event files, written and read without TensorFlow: scalars, PNG pictures and
//! markdown text in TFRecord framing (CRC-32C) with hand-encoded protocol buffers, so that
//! `tensorboard --logdir runs/` shows a training run.
//!
//! # Example
//! ```
//! use medddpm_tensorboard::{read_events, scalars, EventWriter};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let tmp = tempfile::tempdir()?;
//! # let run_dir = tmp.path();
//! let mut events = EventWriter::create(run_dir)?;
//! events.text("settings", 0, "```toml\nlr = 1e-5\n```");
//! events.scalar("train/loss", 1, 0.42);
//! events.flush()?;
//! let read = read_events(events.path())?;
//! assert_eq!(scalars(&read, "train/loss"), [(1, 0.42)]);
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]

mod crc32c;
mod error;
mod event;
mod proto;
mod reader;
mod record;
mod writer;

pub use crc32c::{crc32c, masked_crc32c};
pub use error::TensorBoardError;
pub use event::{Data, Event, Image, Value, What, FILE_VERSION, RGB, TEXT_PLUGIN};
pub use proto::WireError;
pub use reader::{event_files, read_dir_events, read_events, scalars};
pub use writer::EventWriter;
