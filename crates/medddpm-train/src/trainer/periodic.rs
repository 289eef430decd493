//! What happens on the checkpoint cadence: the checkpoint itself, the loss curve, and samples
//! drawn with the EMA weights (with their slices in the TensorBoard events).

use std::path::PathBuf;

use burn::module::Module;
use burn::optim::Optimizer;
use medddpm_diffusion::{CosineSchedule, Sampler, Scheduler};
use medddpm_unet::{cast_compute_params, KernelAutodiffBackend, KernelBackend, UNet};

use super::events::RunEvents;
use super::progress::Progress;
use super::session::Session;
use super::step::batch_tensor;
use super::{SessionOptions, TrainObserver};
use crate::checkpoint::{save_record, RunDir, EMA_FILE, MODEL_FILE, OPTIMIZER_FILE};
use crate::data::NiftiDataset;
use crate::sample::write_sample;
use crate::{ExperimentConfig, TrainError};

/// Writes the checkpoint for the session's step and redraws the loss curve; on the
/// `save_every` cadence (not for the final step of a shorter session) also samples, logging
/// each sample's slices to the session's events. Notes the checkpoint folder and the sample
/// files written in `progress`.
pub(super) fn checkpoint<B: KernelAutodiffBackend>(
    session: &Session<B>,
    config: &ExperimentConfig,
    run: &RunDir,
    (options, device): (&SessionOptions, &B::Device),
    progress: &mut Progress,
    observer: &mut dyn TrainObserver,
) -> Result<(), TrainError> {
    let settings = &config.train;
    let path = run.write_checkpoint(
        &session.state,
        &session.config_toml,
        settings.keep_checkpoints,
        |dir| {
            let mpk = |name: &str| dir.join(format!("{name}.mpk"));
            save_record::<B, _>(session.model.clone().into_record(), &mpk(MODEL_FILE))?;
            save_record::<B::InnerBackend, _>(session.ema.clone().into_record(), &mpk(EMA_FILE))?;
            save_record::<B, _>(session.optim.to_record(), &mpk(OPTIMIZER_FILE))?;
            Ok(())
        },
    )?;
    observer.checkpoint(&path);
    progress.last_checkpoint = Some(path);
    // A picture that cannot be drawn is not worth stopping a run for.
    let curve = run.root.join(crate::pictures::LOSS_CURVE_FILE);
    if let Err(e) = crate::pictures::loss_curve(&run.metrics_path(), &curve) {
        observer.message(&format!("loss curve not written: {e}"));
    }
    let step = session.state.step;
    if settings.samples_per_checkpoint > 0 && step.is_multiple_of(settings.save_every) {
        let ema = cast_compute_params(
            session.ema.clone(),
            options.compute.precision.compute_dtype(),
        );
        let ctx = SampleContext {
            config,
            dataset: &session.dataset,
            schedule: &session.schedule,
            step,
            run,
        };
        let events = &mut progress.events;
        let drawn = periodic_samples::<B::InnerBackend>(&ctx, &ema, (device, events), observer)?;
        progress.samples.extend(drawn);
    }
    Ok(())
}

/// What periodic sampling reads.
struct SampleContext<'a> {
    config: &'a ExperimentConfig,
    dataset: &'a NiftiDataset,
    schedule: &'a CosineSchedule,
    /// The step just checkpointed.
    step: usize,
    run: &'a RunDir,
}

/// The reference samples one volume with the EMA weights at every checkpoint; we sample the
/// first `samples_per_checkpoint` training masks, with a seed fixed per step so that samples of
/// successive checkpoints are comparable.
fn periodic_samples<B: KernelBackend>(
    ctx: &SampleContext<'_>,
    ema: &UNet<B>,
    (device, events): (&B::Device, &mut Option<RunEvents>),
    observer: &mut dyn TrainObserver,
) -> Result<Vec<PathBuf>, TrainError> {
    let (config, dataset) = (ctx.config, ctx.dataset);
    let sampler = Sampler::new(ctx.schedule.clone(), &config.sampler)
        .map_err(|e| TrainError::Config {
            path: None,
            message: format!("[sampler]: {e}"),
        })?
        .with_prediction(config.diffusion.prediction);
    let step = ctx.step;
    let dir = ctx.run.samples(step);
    std::fs::create_dir_all(&dir).map_err(|e| TrainError::io(&dir, e))?;
    let mut written = Vec::new();
    for i in 0..config.train.samples_per_checkpoint.min(dataset.len()) {
        let example = dataset.get(i)?;
        let serial = medddpm_diffusion::backend_rng();
        B::seed(device, config.train.seed ^ (i as u64) << 32);
        let cond = batch_tensor::<B>(std::slice::from_ref(&example), false, device);
        let total = sampler.num_steps();
        let x = sampler.sample(ema, cond, dataset.image_channels(), |done| {
            observer.sampling(done, total)
        });
        drop(serial);
        let values = crate::host::f32_values(x);
        let reference = dataset.mask_volume(i)?;
        written.extend(write_sample(
            &dir,
            &format!("{}_sample-0", example.id),
            &values,
            &reference,
            &dataset.image_channel_names(),
        )?);
        let montage = dir.join(format!("{}_{}", example.id, crate::pictures::MONTAGE_FILE));
        let picture = SamplePicture {
            example: &example,
            reference: &reference,
            values: &values,
            channel_names: dataset.image_channel_names(),
            step,
        };
        match picture.write(&montage) {
            Ok(path) => written.push(path),
            Err(e) => observer.message(&format!("sample montage not written: {e}")),
        }
        if let Some(events) = events.as_mut() {
            let case = (example.id.as_str(), &reference);
            let channels = picture.channel_names;
            if let Err(e) = events.sample(step, case, &values, &channels) {
                observer.message(&format!("sample slices not logged to TensorBoard: {e}"));
            }
        }
    }
    Ok(written)
}

/// The first image channel of a periodic sample beside the training image, mask outlined.
struct SamplePicture<'a> {
    example: &'a crate::data::Example,
    reference: &'a medddpm_nifti::Volume,
    values: &'a [f32],
    channel_names: Vec<String>,
    step: usize,
}

impl SamplePicture<'_> {
    fn write(&self, path: &std::path::Path) -> Result<PathBuf, TrainError> {
        let voxels = self.reference.voxel_count();
        let channel = self.channel_names.first();
        let title = |what: &str| match channel {
            Some(c) if self.channel_names.len() > 1 => format!("{what} ({c})"),
            _ => what.to_string(),
        };
        let image = self
            .reference
            .with_data(self.example.image[..voxels].to_vec())?;
        let sample = self.reference.with_data(self.values[..voxels].to_vec())?;
        let sampled = format!("EMA sample, step {}", self.step);
        crate::pictures::sample_montage(
            path,
            self.reference,
            Some((
                &title(&format!("training image {}", self.example.id)),
                &image,
            )),
            &[(title(&sampled), sample)],
        )
    }
}
