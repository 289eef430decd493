//! Pictures a run writes for the researcher watching it: a montage of each periodic sample beside
//! its training image, the loss curve, and the frames of a denoising trajectory.

use std::path::{Path, PathBuf};

use medddpm_nifti::Volume;
use medddpm_render::{montage, MontageOptions, RgbImage, Row, Window};

use crate::TrainError;

/// File name of the loss curve in a run folder.
pub const LOSS_CURVE_FILE: &str = "loss.png";

/// File name of a sample montage in its samples folder.
pub const MONTAGE_FILE: &str = "montage.png";

/// Three-plane montage: the training image (if given) on top, then each sample, all with the
/// mask outlined and on the network's [-1, 1] window, so rows compare by eye.
pub fn sample_montage(
    path: &Path,
    mask: &Volume,
    image: Option<(&str, &Volume)>,
    samples: &[(String, Volume)],
) -> Result<PathBuf, TrainError> {
    let mut rows = Vec::new();
    if let Some((title, image)) = image {
        rows.push(row(title.to_string(), image, mask));
    }
    for (title, volume) in samples {
        rows.push(row(title.clone(), volume, mask));
    }
    let picture = montage(&rows, &MontageOptions::default())?;
    medddpm_render::write_png(path, &picture)?;
    Ok(path.to_path_buf())
}

fn row<'a>(title: String, volume: &'a Volume, mask: &'a Volume) -> Row<'a> {
    Row::new(title, volume)
        .with_mask(mask)
        .with_window(Window::UNIT)
}

/// The loss curve of `metrics.jsonl` (one JSON object per optimizer step, with `step` and
/// `loss`) drawn to `out`. Lines that do not parse are skipped: the log is append-only and a
/// crash can leave half a line.
pub fn loss_curve(metrics: &Path, out: &Path) -> Result<PathBuf, TrainError> {
    let text = std::fs::read_to_string(metrics).map_err(|e| TrainError::io(metrics, e))?;
    let points: Vec<(u64, f64)> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| Some((v["step"].as_u64()?, v["loss"].as_f64()?)))
        .collect();
    let opts = medddpm_render::LossCurveOptions {
        title: "training loss per optimizer step".into(),
        ..Default::default()
    };
    medddpm_render::loss_curve_png(&points, out, &opts)?;
    Ok(out.to_path_buf())
}

/// Collects the frames of a denoising trajectory: one three-plane row per kept step, with a
/// title naming the step, at most `max_frames` of them (evenly spaced, the last always kept).
pub struct Trajectory {
    mask: Volume,
    total: usize,
    every: usize,
    frames: Vec<RgbImage>,
}

impl Trajectory {
    /// A trajectory of `total` reverse steps on `mask`'s grid.
    pub fn new(mask: Volume, total: usize, max_frames: usize) -> Self {
        Self {
            mask,
            total,
            every: total.div_ceil(max_frames.max(1)).max(1),
            frames: Vec::new(),
        }
    }

    /// Whether step `done` (1-based) becomes a frame; the caller reads the sample back from
    /// the device only then.
    pub fn wants(&self, done: usize) -> bool {
        done.is_multiple_of(self.every) || done == self.total
    }

    /// Adds the sample after step `done` (values in file order on the mask's grid).
    pub fn push(&mut self, done: usize, values: Vec<f32>) -> Result<(), TrainError> {
        let volume = self.mask.with_data(values)?;
        let title = format!("step {done}/{}", self.total);
        let rows = [row(title, &volume, &self.mask)];
        self.frames
            .push(montage(&rows, &MontageOptions::default())?);
        Ok(())
    }

    /// Writes the GIF (the last frame held for a second).
    pub fn write(mut self, path: &Path) -> Result<PathBuf, TrainError> {
        if let Some(last) = self.frames.last().cloned() {
            for _ in 0..8 {
                self.frames.push(last.clone());
            }
        }
        medddpm_render::frames_gif(&self.frames, 120, path)?;
        Ok(path.to_path_buf())
    }
}
