//! One process's share of the work: its pending pairs in batches through the network, each
//! pair's image and label written atomically, then its manifest line.

use std::time::Instant;

use medddpm_nifti::{Volume, WriteOptions};
use medddpm_train::sample::brain::ensure_brain_label;
use medddpm_train::sample::{prepare_condition, BatchSampler, Condition};
use medddpm_train::SamplingModel;
use medddpm_unet::{GraphStatus, KernelBackend};

use crate::hook::MaskSource;
use crate::layout::label_dtype;
use crate::manifest::{Appender, PairRecord};
use crate::synthesis::Synthesis;
use crate::work::Pair;
use crate::SynthError;

/// What a shard reports while it runs.
#[derive(Debug)]
pub enum Progress<'a> {
    /// A batch of `batch` pairs is `done` of its `steps` reverse steps in.
    Step {
        /// Pairs in the batch.
        batch: usize,
        /// Reverse steps done.
        done: usize,
        /// Reverse steps per sample.
        steps: usize,
    },
    /// A pair is finished and listed.
    Pair(&'a PairRecord),
}

/// What [`run_shard`] did.
#[derive(Debug)]
pub struct ShardSummary {
    /// Pairs made.
    pub made: usize,
    /// What the CUDA graphs did.
    pub graphs: GraphStatus,
}

/// Makes `pairs` (from [`Synthesis::pending`]) as process `rank` of `world`, `masks` giving
/// each its mask, in batches of the options' size; `progress` hears each reverse step and
/// each finished pair.
pub fn run_shard<B: KernelBackend>(
    synthesis: &Synthesis,
    model: &SamplingModel<B>,
    masks: &dyn MaskSource,
    pairs: &[Pair],
    (rank, world): (usize, usize),
    device: &B::Device,
    progress: &mut dyn FnMut(Progress),
) -> Result<ShardSummary, SynthError> {
    let options = synthesis.options();
    let channels = model.unet.out_channels();
    if channels != synthesis.channels() {
        return Err(SynthError::Options(format!(
            "the network makes {channels} image channels, its configuration says {}",
            synthesis.channels()
        )));
    }
    let sampler = BatchSampler::new(
        model,
        &options.sampler,
        options.cuda_graphs,
        options.rescale,
    )?;
    let steps = sampler.num_steps();
    let mut manifest = Appender::open(synthesis.manifest_path(rank, world))?;
    let mut made = 0;
    std::thread::scope(|scope| -> Result<(), SynthError> {
        // The previous batch's files are written, and the next batch's masks read and
        // prepared, while the network samples this batch.
        let mut writing: Option<std::thread::ScopedJoinHandle<'_, Written>> = None;
        let batches: Vec<&[Pair]> = pairs.chunks(options.batch_size.max(1)).collect();
        let prepare = |batch: &[Pair]| -> Result<Vec<Prepared>, SynthError> {
            let each = batch
                .iter()
                .map(|pair| condition(synthesis, model, masks, pair));
            each.collect()
        };
        let mut next = batches.first().map(|&b| scope.spawn(move || prepare(b)));
        for (i, &batch) in batches.iter().enumerate() {
            let start = Instant::now();
            let conditions = next.take().map_or_else(|| Ok(Vec::new()), joined)?;
            next = batches.get(i + 1).map(|&b| scope.spawn(move || prepare(b)));
            let inputs: Vec<(&Condition, u64)> = conditions
                .iter()
                .zip(batch)
                .map(|((c, _), p)| (c, p.seed))
                .collect();
            let n = batch.len();
            let samples = sampler.sample(&inputs, device, |done| {
                progress(Progress::Step {
                    batch: n,
                    done,
                    steps,
                })
            })?;
            let share = start.elapsed().as_secs_f64() / n as f64;
            if let Some(job) = writing.take() {
                made += listed(job, &mut manifest, progress)?;
            }
            let sampled = Sampled::batch(batch, conditions, samples);
            let steps_run = steps;
            writing = Some(scope.spawn(move || write_batch(synthesis, sampled, share, steps_run)));
        }
        if let Some(job) = writing.take() {
            made += listed(job, &mut manifest, progress)?;
        }
        Ok(())
    })?;
    Ok(ShardSummary {
        made,
        graphs: sampler.graphs(),
    })
}

/// A pair's condition with its augmentation's record.
type Prepared = (Condition, Option<serde_json::Value>);

/// A batch's conditions from the thread that prepared them.
fn joined(
    thread: std::thread::ScopedJoinHandle<'_, Result<Vec<Prepared>, SynthError>>,
) -> Result<Vec<Prepared>, SynthError> {
    thread
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// A sampled pair waiting for its files.
struct Sampled {
    pair: Pair,
    labels: Volume,
    augmentation: Option<serde_json::Value>,
    values: Vec<f32>,
}

impl Sampled {
    /// A batch's pairs with their conditions and sampled values, in order.
    fn batch(batch: &[Pair], conditions: Vec<Prepared>, samples: Vec<Vec<f32>>) -> Vec<Self> {
        let each = batch.iter().zip(conditions).zip(samples);
        each.map(|((pair, (cond, augmentation)), values)| Sampled {
            pair: pair.clone(),
            labels: cond.labels().clone(),
            augmentation,
            values,
        })
        .collect()
    }
}

/// A batch's pairs with their files written, in order; the first error stops the batch.
type Written = Result<Vec<PairRecord>, SynthError>;

/// Writes a batch's files (on the writer thread) and makes each pair's manifest record.
fn write_batch(synthesis: &Synthesis, sampled: Vec<Sampled>, share: f64, steps: usize) -> Written {
    let options = synthesis.options();
    sampled
        .into_iter()
        .map(|s| {
            let start = Instant::now();
            let files = write_pair(synthesis, &s.pair, &s.labels, s.values)?;
            Ok(PairRecord {
                pair: s.pair.id,
                case: s.pair.case.clone(),
                source_mask: synthesis.list().masks()[s.pair.mask]
                    .path
                    .display()
                    .to_string(),
                variant: s.pair.variant,
                augmentation: s.augmentation,
                seed: s.pair.seed,
                sampler: options.sampler.kind.to_string(),
                steps,
                checkpoint: synthesis.settings().checkpoint_checksum.clone(),
                seconds: share + start.elapsed().as_secs_f64(),
                files,
            })
        })
        .collect()
}

/// Waits for a batch's files, then lists each pair (its files are complete before its line).
fn listed(
    job: std::thread::ScopedJoinHandle<'_, Written>,
    manifest: &mut Appender,
    progress: &mut dyn FnMut(Progress),
) -> Result<usize, SynthError> {
    let records = job.join().expect("the writer thread does not panic")?;
    for record in &records {
        manifest.append(record)?;
        progress(Progress::Pair(record));
    }
    Ok(records.len())
}

/// Pair `pair`'s condition: its source mask read, given the brain label where the model has
/// one, through the augmentation hook, encoded; with the hook's record.
fn condition<B: KernelBackend>(
    synthesis: &Synthesis,
    model: &SamplingModel<B>,
    masks: &dyn MaskSource,
    pair: &Pair,
) -> Result<Prepared, SynthError> {
    let source = &synthesis.list().masks()[pair.mask];
    let mut seg = Volume::read(&source.path)?;
    let brain = synthesis.options().brain_masks.as_ref();
    ensure_brain_label(
        &mut seg,
        &source.path,
        &source.case,
        synthesis.scheme(),
        brain,
    )?;
    let chosen = masks
        .mask_for(seg, pair.id, pair.seed)
        .map_err(|e| SynthError::Augmentation {
            mask: source.path.clone(),
            pair: pair.id,
            message: e.to_string(),
        })?;
    let cond = prepare_condition(model, chosen.mask, &source.path)?;
    Ok((cond, chosen.record))
}

/// Writes a pair's images (`values`, channels in file order) and its label map, each
/// atomically and each on its own thread (a BraTS pair is five gzipped 192x192x144 files),
/// on the label map's grid; returns their paths relative to the output folder.
fn write_pair(
    synthesis: &Synthesis,
    pair: &Pair,
    labels: &Volume,
    values: Vec<f32>,
) -> Result<Vec<String>, SynthError> {
    let files = synthesis
        .options()
        .layout
        .files(&pair.case, synthesis.channels());
    let voxels = labels.voxel_count();
    let images = files
        .images
        .iter()
        .zip(values.chunks(voxels.max(1)))
        .map(|(rel, data)| Ok((labels.with_data(data.to_vec())?, synthesis.out().join(rel))))
        .collect::<Result<Vec<_>, SynthError>>()?;
    let dtype = WriteOptions::dtype(label_dtype(synthesis.scheme()));
    let label_path = synthesis.out().join(&files.label);
    std::thread::scope(|scope| {
        let writers: Vec<_> = images
            .iter()
            .map(|(image, path)| scope.spawn(move || image.write(path)))
            .collect();
        let label = labels.write_with(&label_path, dtype);
        writers
            .into_iter()
            .map(|w| w.join().expect("a file writer does not panic"))
            .chain([label])
            .collect::<Result<(), _>>()
    })?;
    Ok(files.all().map(|f| f.display().to_string()).collect())
}
