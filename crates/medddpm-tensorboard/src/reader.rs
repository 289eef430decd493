//! Reading event files back, strictly (every CRC checked, a torn record an error): for tests
//! and for tools that check what a run logged.

use std::path::{Path, PathBuf};

use crate::event::{Data, Event, Value, What};
use crate::record::unframe;
use crate::TensorBoardError;

/// Every event of the file at `path`, in order.
pub fn read_events(path: &Path) -> Result<Vec<Event>, TensorBoardError> {
    let bytes = std::fs::read(path).map_err(|e| TensorBoardError::io(path, e))?;
    let corrupt = |offset, problem| TensorBoardError::Corrupt {
        path: path.to_path_buf(),
        offset,
        problem,
    };
    let records = unframe(&bytes).map_err(|e| corrupt(e.offset, e.problem))?;
    let mut offset = 0u64;
    let mut events = Vec::with_capacity(records.len());
    for data in records {
        events.push(Event::decode(data).map_err(|problem| corrupt(offset, problem))?);
        offset += (data.len() + crate::record::OVERHEAD) as u64;
    }
    Ok(events)
}

/// The event files of a folder (names containing `tfevents`, as TensorBoard picks them), in the
/// order TensorBoard reads them.
pub fn event_files(dir: &Path) -> Result<Vec<PathBuf>, TensorBoardError> {
    let entries = std::fs::read_dir(dir).map_err(|e| TensorBoardError::io(dir, e))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| TensorBoardError::io(dir, e))?;
        if entry.file_name().to_string_lossy().contains("tfevents") {
            files.push(entry.path());
        }
    }
    files.sort();
    Ok(files)
}

/// The events of every file of `dir`, files in [`event_files`] order.
pub fn read_dir_events(dir: &Path) -> Result<Vec<Event>, TensorBoardError> {
    let mut events = Vec::new();
    for file in event_files(dir)? {
        events.extend(read_events(&file)?);
    }
    Ok(events)
}

impl Event {
    /// The summary values of the event (none for other payloads).
    pub fn values(&self) -> &[Value] {
        match &self.what {
            What::Summary(values) => values,
            _ => &[],
        }
    }
}

/// `(step, value)` of every scalar logged under `tag`, in file order.
pub fn scalars(events: &[Event], tag: &str) -> Vec<(i64, f32)> {
    events
        .iter()
        .flat_map(|e| e.values().iter().map(move |v| (e.step, v)))
        .filter_map(|(step, v)| match v.data {
            Data::Scalar(x) if v.tag == tag => Some((step, x)),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Image, FILE_VERSION, RGB};
    use crate::EventWriter;

    #[test]
    fn a_writer_reads_back() {
        let tmp = tempfile::tempdir().unwrap();
        let mut w = EventWriter::create(tmp.path()).unwrap();
        w.text("settings", 0, "```toml\nlr = 1e-5\n```");
        w.scalar("train/loss", 1, 0.5);
        w.scalar("train/lr", 1, 1e-5);
        w.flush().unwrap();
        // Flushed: already in the file while the writer is open.
        let now = read_events(w.path()).unwrap();
        assert_eq!(now.len(), 4);
        w.image("samples/a/axial", 2, vec![1, 2, 3], 4, 5);
        w.session_start(3);
        let path = w.path().to_path_buf();
        drop(w);

        let events = read_events(&path).unwrap();
        assert_eq!(events[0].what, What::FileVersion(FILE_VERSION.into()));
        assert_eq!(scalars(&events, "train/loss"), [(1, 0.5)]);
        assert_eq!(scalars(&events, "train/lr"), [(1, 1e-5)]);
        assert_eq!(
            events[1].values()[0].data,
            Data::Text("```toml\nlr = 1e-5\n```".into())
        );
        let image = Image {
            height: 4,
            width: 5,
            colorspace: RGB,
            png: vec![1, 2, 3],
        };
        assert_eq!(
            (events[4].step, &events[4].values()[0].data),
            (2, &Data::Image(image))
        );
        assert_eq!((events[5].step, &events[5].what), (3, &What::SessionStart));
        assert!(events.windows(2).all(|p| p[0].wall_time <= p[1].wall_time));
    }

    #[test]
    fn each_session_gets_its_own_file_in_name_order() {
        let tmp = tempfile::tempdir().unwrap();
        let mut first = EventWriter::create(tmp.path()).unwrap();
        first.scalar("x", 1, 1.0);
        drop(first);
        let mut second = EventWriter::create(tmp.path()).unwrap();
        second.scalar("x", 2, 2.0);
        drop(second);
        std::fs::write(tmp.path().join("metrics.jsonl"), "{}\n").unwrap();
        let files = event_files(tmp.path()).unwrap();
        assert_eq!(files.len(), 2);
        let name = files[0].file_name().unwrap().to_str().unwrap().to_string();
        assert!(name.starts_with("events.out.tfevents."), "{name}");
        assert!(name.ends_with(".medddpm"), "{name}");
        let events = read_dir_events(tmp.path()).unwrap();
        assert_eq!(scalars(&events, "x"), [(1, 1.0), (2, 2.0)]);
    }

    #[test]
    fn damage_names_the_file_and_record() {
        let tmp = tempfile::tempdir().unwrap();
        let mut w = EventWriter::create(tmp.path()).unwrap();
        w.scalar("x", 1, 1.0);
        let path = w.path().to_path_buf();
        drop(w);
        let mut bytes = std::fs::read(&path).unwrap();
        let n = bytes.len();
        bytes[n - 6] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        let err = read_events(&path).unwrap_err().to_string();
        assert!(err.contains(&path.display().to_string()), "{err}");
        assert!(err.contains("the data's CRC does not match"), "{err}");
        assert!(err.contains("record at byte "), "{err}");

        let missing = tmp.path().join("absent");
        let err = read_events(&missing).unwrap_err().to_string();
        assert!(err.contains("absent"), "{err}");
    }
}
