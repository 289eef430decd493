//! TensorBoard event files beside `metrics.jsonl` (`[train] tensorboard`): each logged step's
//! scalars, the periodic samples' slices and the session's settings. Only the lead writes them,
//! the process that writes `metrics.jsonl`.

use medddpm_nifti::Volume;
use medddpm_render::{auto_position, render_slice, Plane, Scale, Window};
use medddpm_tensorboard::EventWriter;
use medddpm_unet::Compute;

use super::log::StepMetrics;
use crate::checkpoint::RunDir;
use crate::{ExperimentConfig, TrainError};

/// Tag of the settings text.
pub(super) const SETTINGS_TAG: &str = "settings";

/// This session's event file.
pub(super) struct RunEvents {
    writer: EventWriter,
}

impl RunEvents {
    /// Starts this session's event file in the run folder, unless `[train] tensorboard` is off:
    /// a restart mark at the first step the session trains (TensorBoard then drops what an
    /// earlier session logged from that step on, as `metrics.jsonl` was trimmed to the
    /// checkpoint), and the settings as text at the step the session starts from.
    pub fn open(
        config: &ExperimentConfig,
        run: &RunDir,
        (config_toml, compute, devices): (&str, &Compute, usize),
        start_step: usize,
    ) -> Result<Option<Self>, TrainError> {
        if !config.train.tensorboard {
            return Ok(None);
        }
        let mut writer = EventWriter::create(&run.root)?;
        let step = start_step as u64;
        writer.session_start(step + 1);
        let settings = format!(
            "Session from step {start_step}: {compute}, {devices} device(s).\n\n\
             ```toml\n{config_toml}\n```\n"
        );
        writer.text(SETTINGS_TAG, step, &settings);
        writer.flush()?;
        Ok(Some(Self { writer }))
    }

    /// One optimizer step's scalars, flushed at once: a killed run keeps every step it logged.
    pub fn step(&mut self, m: &StepMetrics) -> Result<(), TrainError> {
        let (w, step) = (&mut self.writer, m.step as u64);
        w.scalar("train/loss", step, m.loss);
        w.scalar("train/lr", step, m.lr as f32);
        if let Some(norm) = m.grad_norm {
            w.scalar("train/grad_norm", step, norm);
        }
        if let Some(scale) = m.loss_scale {
            w.scalar("train/loss_scale", step, scale as f32);
        }
        w.scalar("train/steps_per_s", step, m.steps_per_s as f32);
        Ok(w.flush()?)
    }

    /// A periodic sample as three pictures per image channel: the axial, coronal and sagittal
    /// slices through the centre of the mask's labels (the montage's), on the network's
    /// [-1, 1] window with the mask outlined. Tags `samples/<case>/<plane>`, with the channel
    /// between them when the data has several (`samples/<case>/<channel>/<plane>`).
    pub fn sample(
        &mut self,
        step: usize,
        (case, mask): (&str, &Volume),
        values: &[f32],
        channel_names: &[String],
    ) -> Result<(), TrainError> {
        let voxels = mask.voxel_count();
        for (c, name) in channel_names.iter().enumerate() {
            let Some(channel) = values.get(c * voxels..(c + 1) * voxels) else {
                break;
            };
            let volume = mask.with_data(channel.to_vec())?;
            let centre = auto_position(&volume, Some(mask))?;
            for plane in Plane::ALL {
                let index = centre[plane.normal_axis()];
                let picture = render_slice(
                    &volume,
                    Some(mask),
                    plane,
                    index,
                    Window::UNIT,
                    Scale::default(),
                )?;
                let png = picture.encode_png()?;
                let tag = match channel_names.len() {
                    1 => format!("samples/{case}/{}", plane.name()),
                    _ => format!("samples/{case}/{name}/{}", plane.name()),
                };
                let (h, w) = (picture.height(), picture.width());
                self.writer.image(&tag, step as u64, png, h, w);
            }
        }
        Ok(self.writer.flush()?)
    }
}
