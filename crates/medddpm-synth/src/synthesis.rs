//! A synthesis run's folder: its settings checked or written, its manifests merged, what a
//! kill left behind cleared, the pairs still to make, and nnU-Net's `dataset.json` at the end.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use medddpm_diffusion::{CosineSchedule, Sampler, SamplerConfig, Scheduler};
use medddpm_mask::LabelScheme;
use medddpm_train::lock::RunLock;
use medddpm_train::sample::BrainMasks;
use medddpm_train::{ExperimentConfig, WeightsSource};
use serde_json::Value;

use crate::layout::DatasetLayout;
use crate::manifest::{
    part_name, read_manifests, write_merged, Manifests, PairRecord, MANIFEST_FILE,
};
use crate::settings::{checkpoint_checksum, RunSettings};
use crate::work::{pair_seed, Pair, WorkList};
use crate::SynthError;

/// What to make and how, apart from the network and the masks.
#[derive(Debug, Clone)]
pub struct SynthOptions {
    /// Pairs in the data set.
    pub count: usize,
    /// The most pairs one mask gives (default: as many as `count` needs).
    pub variants_per_mask: Option<usize>,
    /// Seed of every pair's noise and augmentation.
    pub seed: u64,
    /// The reverse process.
    pub sampler: SamplerConfig,
    /// The folder layout.
    pub layout: DatasetLayout,
    /// Map [-1, 1] to this range before writing images.
    pub rescale: Option<(f32, f32)>,
    /// Brain masks for segmentations without the brain label (BraTS-style models).
    pub brain_masks: Option<BrainMasks>,
    /// Volumes per network call.
    pub batch_size: usize,
    /// Replay the forward pass from CUDA graphs.
    pub cuda_graphs: bool,
}

/// A data set to make in a folder: the work list and the settings it is made with.
pub struct Synthesis {
    out: PathBuf,
    list: WorkList,
    settings: RunSettings,
    options: SynthOptions,
    channels: usize,
    scheme: LabelScheme,
}

/// What [`Synthesis::begin`] and [`Synthesis::finish`] found in the folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FolderState {
    /// Pairs finished (listed, with every file present).
    pub done: usize,
    /// Torn manifest lines dropped.
    pub torn: usize,
    /// Temporary files and unlisted pair files removed.
    pub removed: usize,
}

impl Synthesis {
    /// Plans `options.count` pairs from `masks` into `out` with the network of `config`,
    /// sampled from `weights` (`live`: the live weights, else the EMA), masks given by an
    /// augmentation with `augmentation` settings. Checks everything that needs no network.
    pub fn new(
        out: &Path,
        masks: &[PathBuf],
        config: &ExperimentConfig,
        (weights, live): (&WeightsSource, bool),
        options: SynthOptions,
        augmentation: Option<Value>,
    ) -> Result<Self, SynthError> {
        let list = WorkList::new(
            masks,
            options.count,
            options.variants_per_mask,
            options.seed,
        )?;
        let channels = config.model.out_channels;
        let scheme = config.data.label_scheme.clone();
        options.layout.check(channels, &scheme)?;
        if options.batch_size == 0 {
            return Err(SynthError::Options(
                "--batch-size must be at least 1".into(),
            ));
        }
        let schedule = CosineSchedule::new(config.diffusion.timesteps);
        let steps = Sampler::new(schedule, &options.sampler)
            .map_err(|e| SynthError::Options(e.to_string()))?
            .num_steps();
        let settings = RunSettings {
            checkpoint: display(weights),
            checkpoint_checksum: checkpoint_checksum(weights, live)?,
            weights: if live { "live" } else { "ema" }.into(),
            masks: list.masks().iter().map(|m| file_name(&m.path)).collect(),
            count: options.count,
            seed: options.seed,
            sampler: options.sampler.kind,
            steps,
            eta: options.sampler.eta,
            layout: options.layout.clone(),
            rescale: options.rescale,
            augmentation,
        };
        Ok(Self {
            out: out.to_path_buf(),
            list,
            settings,
            options,
            channels,
            scheme,
        })
    }

    /// The output folder.
    pub fn out(&self) -> &Path {
        &self.out
    }

    /// The data set's own folder: the output folder (ours) or its `DatasetNNN_Name` (nnU-Net).
    pub fn dataset_dir(&self) -> PathBuf {
        let root = self.options.layout.root();
        match root.as_os_str().is_empty() {
            true => self.out.clone(),
            false => self.out.join(root),
        }
    }

    /// The work list.
    pub fn list(&self) -> &WorkList {
        &self.list
    }

    /// The settings this run makes pairs with.
    pub fn settings(&self) -> &RunSettings {
        &self.settings
    }

    /// The options.
    pub fn options(&self) -> &SynthOptions {
        &self.options
    }

    /// Sets the volumes per network call (at least 1): not a setting of the data set, so
    /// each process may pick its own.
    pub fn set_batch_size(&mut self, batch_size: usize) {
        self.options.batch_size = batch_size.max(1);
    }

    /// Image channels per pair.
    pub fn channels(&self) -> usize {
        self.channels
    }

    /// The label scheme of the network (the labels a pair's label file may hold).
    pub fn scheme(&self) -> &LabelScheme {
        &self.scheme
    }

    /// The manifest process `rank` of `world` appends to.
    pub fn manifest_path(&self, rank: usize, world: usize) -> PathBuf {
        match world {
            0 | 1 => self.out.join(MANIFEST_FILE),
            _ => self.out.join(part_name(rank)),
        }
    }

    /// Refuses a folder made with other settings (for the processes a lead started, which
    /// has written them).
    pub fn check_settings(&self) -> Result<(), SynthError> {
        match RunSettings::read(&self.out)? {
            Some(made) => self.compare(&made),
            None => Ok(()),
        }
    }

    fn compare(&self, made: &RunSettings) -> Result<(), SynthError> {
        match made.difference(&self.settings) {
            None => Ok(()),
            Some((setting, made, asked)) => Err(self.other_settings(setting, made, asked)),
        }
    }

    fn other_settings(&self, setting: String, made: String, asked: String) -> SynthError {
        SynthError::OtherSettings {
            manifest: self.out.join(MANIFEST_FILE),
            setting,
            made,
            asked,
        }
    }

    /// Starts (or resumes) the run in its folder: takes the folder's lock (held until the
    /// returned lock drops), checks and writes the settings, merges the manifests, drops
    /// pairs whose files are missing and removes what a kill left (temporary files, files of
    /// pairs the manifest does not list).
    pub fn begin(&self) -> Result<(RunLock, FolderState), SynthError> {
        let lock = RunLock::acquire(&self.out)?;
        if let Some(made) = RunSettings::read(&self.out)? {
            self.compare(&made)?;
        }
        self.settings.write(&self.out)?;
        let state = self.compact()?;
        Ok((lock, state))
    }

    /// The pairs of process `rank` of `world` that are not finished yet.
    pub fn pending(&self, rank: usize, world: usize) -> Result<Vec<Pair>, SynthError> {
        let done = self.finished()?.records;
        Ok(self
            .list
            .shard(rank, world)
            .into_iter()
            .filter(|p| !done.contains_key(&p.id))
            .collect())
    }

    /// Ends the run: merges the manifests (dropping what a failed process left half done)
    /// and writes nnU-Net's `dataset.json` for the pairs finished.
    pub fn finish(&self) -> Result<FolderState, SynthError> {
        let state = self.compact()?;
        let json = self
            .options
            .layout
            .dataset_json(self.channels, &self.scheme, state.done);
        if let (Some(json), Some(rel)) = (json, self.options.layout.dataset_json_path()) {
            let path = self.out.join(rel);
            let text = serde_json::to_string_pretty(&json).expect("json");
            medddpm_atomic::write(&path, text.as_bytes()).map_err(|e| SynthError::io(path, e))?;
        }
        Ok(state)
    }

    /// The manifests with only the finished pairs (listed, made with these settings, every
    /// file present).
    fn finished(&self) -> Result<Manifests, SynthError> {
        let mut m = read_manifests(&self.out)?;
        let mut done = BTreeMap::new();
        for (id, record) in std::mem::take(&mut m.records) {
            self.check_record(&record)?;
            if id < self.list.count() && record.files.iter().all(|f| self.out.join(f).is_file()) {
                done.insert(id, record);
            }
        }
        m.records = done;
        Ok(m)
    }

    /// A record of another checkpoint, sampler or seed is refused, naming the manifest.
    fn check_record(&self, r: &PairRecord) -> Result<(), SynthError> {
        let s = &self.settings;
        let pair = format!(" (pair {})", r.pair);
        let checks = [
            ("checkpoint weights", &r.checkpoint, &s.checkpoint_checksum),
            ("sampler", &r.sampler, &s.sampler.to_string()),
            ("steps", &r.steps.to_string(), &s.steps.to_string()),
            (
                "seed",
                &r.seed.to_string(),
                &pair_seed(s.seed, r.pair).to_string(),
            ),
        ];
        for (name, made, asked) in checks {
            if made != asked {
                return Err(self.other_settings(
                    name.to_string() + &pair,
                    made.clone(),
                    asked.clone(),
                ));
            }
        }
        Ok(())
    }

    /// Merges the manifests into `manifest.jsonl`, keeping only finished pairs, and removes
    /// temporary files and the files of pairs not listed.
    fn compact(&self) -> Result<FolderState, SynthError> {
        let Manifests {
            records: done,
            torn,
            parts,
        } = self.finished()?;
        let mut removed = 0;
        let mut dirs: BTreeSet<PathBuf> =
            [self.out.clone(), self.out.join(self.options.layout.root())].into();
        dirs.extend(
            self.options
                .layout
                .folders(self.channels)
                .iter()
                .map(|d| self.out.join(d)),
        );
        for dir in &dirs {
            std::fs::create_dir_all(dir).map_err(|e| SynthError::io(dir, e))?;
            removed += remove_temporaries(dir)?;
        }
        for pair in self.list.pairs().filter(|p| !done.contains_key(&p.id)) {
            for file in self.options.layout.files(&pair.case, self.channels).all() {
                let path = self.out.join(file);
                match std::fs::remove_file(&path) {
                    Ok(()) => removed += 1,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(SynthError::io(path, e)),
                }
            }
        }
        write_merged(&self.out, done.values(), &parts)?;
        Ok(FolderState {
            done: done.len(),
            torn,
            removed,
        })
    }
}

/// Removes `medddpm-atomic`'s temporaries (`.<name>.<pid>.<n>.tmp`) from `dir`: what a kill
/// during a write leaves.
fn remove_temporaries(dir: &Path) -> Result<usize, SynthError> {
    let mut removed = 0;
    for entry in std::fs::read_dir(dir).map_err(|e| SynthError::io(dir, e))? {
        let path = entry.map_err(|e| SynthError::io(dir, e))?.path();
        let name = file_name(&path);
        if name.starts_with('.') && name.ends_with(".tmp") && path.is_file() {
            std::fs::remove_file(&path).map_err(|e| SynthError::io(&path, e))?;
            removed += 1;
        }
    }
    Ok(removed)
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}

fn display(weights: &WeightsSource) -> String {
    match weights {
        WeightsSource::Checkpoint(p) | WeightsSource::Reference { path: p, .. } => {
            p.display().to_string()
        }
    }
}
