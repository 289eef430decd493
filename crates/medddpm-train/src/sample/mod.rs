//! Sampling synthetic volumes from masks and writing them as NIfTI files on the mask's grid.

use std::path::{Path, PathBuf};

use burn::tensor::{backend::Backend, Tensor, TensorData};
use medddpm_diffusion::{CosineSchedule, Sampler, SamplerConfig, Scheduler};
use medddpm_mask::LabelScheme;
use medddpm_nifti::Volume;
use medddpm_unet::{load_reference_checkpoint, UNet, WeightsEntry};
use medddpm_unet::{GraphStatus, GraphedUNet, KernelBackend};

mod batch;
pub mod brain;
mod output;

pub use batch::{draw_seed, prepare_condition, BatchSampler, Condition};
pub use brain::BrainMasks;
pub use output::{case_id, sample_stem, write_sample};

use crate::checkpoint::{EMA_FILE, MODEL_FILE};
use crate::data::{condition_of, regrid_mask};
use crate::pictures::Trajectory;
use crate::{ExperimentConfig, TrainError};
use output::{check_outputs, on_mask_grid, planned_outputs};

/// Where sampling weights come from.
#[derive(Debug, Clone)]
pub enum WeightsSource {
    /// One of our checkpoint folders (`.../checkpoints/step-N`) or a run folder (its latest
    /// checkpoint); the configuration comes from the checkpoint's `config.toml`.
    Checkpoint(PathBuf),
    /// A checkpoint of the PyTorch reference (`{'step', 'model', 'ema'}`), with the experiment
    /// it was trained in ([`ExperimentConfig::reference_whole_head`],
    /// [`ExperimentConfig::reference_brats`]): its network, data grid and label scheme, and
    /// the number of timesteps if the file carries no schedule.
    Reference {
        /// The `.pt` file.
        path: PathBuf,
        /// Its experiment.
        experiment: Box<ExperimentConfig>,
    },
}

/// A network ready to sample, and the settings it was trained with.
pub struct SamplingModel<B: Backend> {
    /// The denoiser.
    pub unet: UNet<B>,
    /// Noise schedule (T from the checkpoint).
    pub schedule: CosineSchedule,
    /// The experiment settings (for reference checkpoints: defaults around the given model).
    pub config: ExperimentConfig,
}

impl<B: Backend> SamplingModel<B> {
    /// `unet` with the schedule of `config`'s timesteps.
    pub fn new(unet: UNet<B>, config: ExperimentConfig) -> Self {
        Self {
            unet,
            schedule: CosineSchedule::new(config.diffusion.timesteps),
            config,
        }
    }
}

/// Loads weights for sampling: the EMA weights unless `live` asks for the live ones.
pub fn load_sampling_model<B: Backend>(
    source: &WeightsSource,
    live: bool,
    device: &B::Device,
) -> Result<SamplingModel<B>, TrainError> {
    match source {
        WeightsSource::Checkpoint(path) => {
            let dir = crate::checkpoint::RunDir::resolve_checkpoint(path)?;
            // Each file read is checked against the checkpoint's checksums.
            let config = crate::checkpoint::read_config(&dir)?;
            let name = format!("{}.mpk", if live { MODEL_FILE } else { EMA_FILE });
            let file = dir.join(&name);
            let bytes = crate::integrity::read_checked(&dir, &name)?;
            let unet = crate::integrity::load_record_bytes(
                &config.model.init::<B>(device)?,
                bytes,
                &file,
                device,
            )?;
            Ok(SamplingModel::new(unet, config))
        }
        WeightsSource::Reference { path, experiment } => {
            let entry = if live {
                WeightsEntry::Model
            } else {
                WeightsEntry::Ema
            };
            let configured = experiment.model.init::<B>(device)?;
            let (unet, report) = load_reference_checkpoint(configured.clone(), path, entry)?;
            crate::integrity::check_weights(&configured, &unet, "the weights", path)?;
            let mut config = ExperimentConfig::clone(experiment);
            // The schedule's length as stored in the file, else the experiment's T.
            if let Some(timesteps) = report.timesteps {
                config.diffusion.timesteps = timesteps;
            }
            Ok(SamplingModel::new(unet, config))
        }
    }
}

/// How to sample.
#[derive(Debug, Clone)]
pub struct SampleOptions {
    /// Samples drawn per mask.
    pub samples_per_mask: usize,
    /// Seed; sample n of mask m uses a seed derived from (seed, m, n).
    pub seed: u64,
    /// Map [-1, 1] linearly to this range before writing (the network's range otherwise).
    pub rescale: Option<(f32, f32)>,
    /// Which reverse process, with how many network calls.
    pub sampler: SamplerConfig,
    /// Also write `<id>_seed-<seed>_sample-<n>_trajectory.gif`: the sample after each reverse
    /// step (at most this many frames, evenly spaced; the first image channel), three planes
    /// per frame.
    pub trajectory: Option<usize>,
    /// Replace files already in the output folder (refused otherwise, before any sampling).
    pub overwrite: bool,
    /// Brain masks for segmentations without the brain label (models whose label scheme has
    /// a "brain" channel, e.g. BraTS); see [`brain::ensure_brain_label`].
    pub brain_masks: Option<BrainMasks>,
    /// Replay the network's forward pass from a CUDA graph after a warm-up
    /// ([`medddpm_unet::GraphedUNet`]; steps run as they come where graphs cannot).
    pub cuda_graphs: bool,
}

/// What [`sample_masks`] did.
#[derive(Debug, Clone)]
pub struct Sampled {
    /// The files written, in order.
    pub written: Vec<PathBuf>,
    /// What the CUDA graphs did.
    pub graphs: GraphStatus,
}

/// One mask as the network will see it, and the grids its samples are written on.
struct PreparedMask {
    /// Encoded condition channels, `[c, d, h, w]` in `dims`.
    cond: Vec<f32>,
    dims: [usize; 4],
    /// The mask after the grid policy: the network's grid.
    pub(super) reference: Volume,
    /// The mask's own grid, kept only when it differs from `reference`.
    pub(super) original: Option<Volume>,
}

/// Reads and encodes `mask_path` and checks it fits the network.
fn prepare_mask<B: KernelBackend>(
    model: &SamplingModel<B>,
    mask_path: &Path,
    scheme: &LabelScheme,
    brain_masks: Option<&BrainMasks>,
) -> Result<PreparedMask, TrainError> {
    prepare_volume(
        model,
        Volume::read(mask_path)?,
        mask_path,
        scheme,
        brain_masks,
    )
}

/// [`prepare_mask`] of a label map already read (or made) for `mask_path`.
fn prepare_volume<B: KernelBackend>(
    model: &SamplingModel<B>,
    mut seg: Volume,
    mask_path: &Path,
    scheme: &LabelScheme,
    brain_masks: Option<&BrainMasks>,
) -> Result<PreparedMask, TrainError> {
    let data = &model.config.data;
    brain::ensure_brain_label(
        &mut seg,
        mask_path,
        &case_id(mask_path),
        scheme,
        brain_masks,
    )?;
    let (cond, shape, mask) = condition_of(seg, mask_path, scheme, data.grid, data.grid_policy)?;
    // The network works on the mask after the same policy the condition went through; the
    // output goes back to the mask's own grid.
    let original = (mask.dims() != data.grid).then(|| mask.clone());
    let reference = regrid_mask(mask, mask_path, data.grid, data.grid_policy)?;
    let [d, h, w] = shape;
    let c = cond.len() / (d * h * w);
    model
        .unet
        .check_input([1, c + model.unet.out_channels(), d, h, w], 1)
        .map_err(|e| TrainError::Config {
            path: Some(mask_path.to_path_buf()),
            message: e.to_string(),
        })?;
    Ok(PreparedMask {
        cond,
        dims: [c, d, h, w],
        reference,
        original,
    })
}

/// Samples `options.samples_per_mask` volumes for every mask and writes them under `out_dir`.
/// `progress(mask, sample, reverse_steps_done)` is called after every reverse step.
///
/// Everything that can fail is checked before the first sample: every mask is read and fits
/// the model, the output folder is writable, and (unless `options.overwrite`) none of the
/// files to write exists.
pub fn sample_masks<B: KernelBackend>(
    model: &SamplingModel<B>,
    masks: &[PathBuf],
    out_dir: &Path,
    options: &SampleOptions,
    device: &B::Device,
    mut progress: impl FnMut(usize, usize, usize),
) -> Result<Sampled, TrainError> {
    let scheme = model.config.data.label_scheme.clone();
    let denoiser = GraphedUNet::new(&model.unet, options.cuda_graphs);
    let sampler = Sampler::new(model.schedule.clone(), &options.sampler)
        .map_err(|e| TrainError::Config {
            path: None,
            message: e.to_string(),
        })?
        .with_prediction(model.config.diffusion.prediction);
    let names = crate::data::image_channel_names(model.unet.out_channels());
    for mask_path in masks {
        prepare_mask(model, mask_path, &scheme, options.brain_masks.as_ref())?;
    }
    let ids: Vec<String> = masks.iter().map(|p| case_id(p)).collect();
    check_outputs(
        out_dir,
        &planned_outputs(out_dir, &ids, options, &names),
        options,
    )?;
    let mut written = Vec::new();
    for (m, mask_path) in masks.iter().enumerate() {
        let mut mask = prepare_mask(model, mask_path, &scheme, options.brain_masks.as_ref())?;
        let [c, d, h, w] = mask.dims;
        let cond = Tensor::<B, 5>::from_data(
            TensorData::new(std::mem::take(&mut mask.cond), [1, c, d, h, w]),
            device,
        );
        for n in 0..options.samples_per_mask {
            let stem = sample_stem(&ids[m], options.seed, n);
            // The whole reverse process draws from the generator this seeds.
            let serial = medddpm_diffusion::backend_rng();
            B::seed(
                device,
                options
                    .seed
                    .wrapping_mul(1_000_003)
                    .wrapping_add((m as u64) << 20 | n as u64),
            );
            let draw = Draw {
                sampler: &sampler,
                denoiser: &denoiser,
                model,
                mask: &mask,
                trajectory: options.trajectory,
            };
            let (values, trajectory) = draw.run(cond.clone(), |done| progress(m, n, done))?;
            drop(serial);
            if let Some(message) = medddpm_kernels::device_error() {
                return Err(TrainError::Device {
                    during: format!("sample {n} of {} not written", ids[m]),
                    message,
                });
            }
            let (values, grid) = on_mask_grid(
                values,
                &mask,
                model.config.data.grid_policy,
                options.rescale,
            )?;
            written.extend(write_sample(out_dir, &stem, &values, grid, &names)?);
            if let Some(t) = trajectory {
                written.push(t.write(&out_dir.join(format!("{stem}_trajectory.gif")))?);
            }
        }
    }
    Ok(Sampled {
        written,
        graphs: denoiser.status(),
    })
}

/// One reverse process for one mask, optionally keeping trajectory frames.
struct Draw<'a, B: KernelBackend> {
    sampler: &'a Sampler,
    denoiser: &'a GraphedUNet<'a, B>,
    model: &'a SamplingModel<B>,
    mask: &'a PreparedMask,
    trajectory: Option<usize>,
}

impl<B: KernelBackend> Draw<'_, B> {
    /// Runs the reverse process from noise; returns the sample's values (channels in file
    /// order, on the network's grid) and the trajectory, if asked for.
    fn run(
        &self,
        cond: Tensor<B, 5>,
        mut progress: impl FnMut(usize),
    ) -> Result<(Vec<f32>, Option<Trajectory>), TrainError> {
        let [_, d, h, w] = self.mask.dims;
        let mut trajectory = self.trajectory.map(|frames| {
            Trajectory::new(
                self.mask.reference.clone(),
                self.sampler.num_steps(),
                frames,
            )
        });
        let mut frame_error = None;
        let channels = self.model.unet.out_channels();
        let x = self
            .sampler
            .sample_observed(self.denoiser, cond, channels, |done, x| {
                if let Some(t) = trajectory.as_mut().filter(|t| t.wants(done)) {
                    let voxels = d * h * w;
                    let values = crate::host::f32_values(x.clone().narrow(1, 0, 1));
                    if let Err(e) = t.push(done, values[..voxels].to_vec()) {
                        frame_error.get_or_insert(e);
                    }
                }
                progress(done)
            });
        if let Some(e) = frame_error {
            return Err(e);
        }
        let values = crate::host::f32_values(x);
        Ok((values, trajectory))
    }
}
