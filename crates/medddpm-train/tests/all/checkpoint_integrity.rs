//! A checkpoint damaged or swapped after it was written is refused with a message naming the
//! file and the problem (and the intact checkpoint before it), never loaded into wrong samples
//! or a panic: flipped bytes, a truncated record, a config from another run, weights of another
//! architecture, NaN weights, and a run config that changed the network before a resume.

use crate::common;
use std::path::Path;

use burn::backend::{Autodiff, Flex};
use burn::module::{Module, ModuleMapper, Param};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::record::{AdaptorRecord, AdaptorRecordV1};
use burn::optim::Optimizer;
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder, Recorder};
use burn::tensor::{backend::Backend, Tensor};
use medddpm_train::integrity::{verify_checkpoint, write_checksums, Verification};
use medddpm_train::optim::FusedAdam;
use medddpm_train::{load_sampling_model, ExperimentConfig, RunDir, TrainError, WeightsSource};
use medddpm_unet::UNet;

fn load(path: &Path) -> Result<(), TrainError> {
    load_sampling_model::<Flex>(
        &WeightsSource::Checkpoint(path.to_path_buf()),
        false,
        &Default::default(),
    )
    .map(|_| ())
}

/// Copies a checkpoint folder.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

/// Sets every value of the first float parameter to NaN.
struct Poison(bool);

impl<B: Backend> ModuleMapper<B> for Poison {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        let tensor = if self.0 {
            tensor
        } else {
            self.0 = true;
            tensor.mul_scalar(f32::NAN)
        };
        Param::from_mapped_value(id, tensor, mapper)
    }
}

#[test]
fn damaged_or_swapped_checkpoints_are_refused_with_the_reason() {
    let (_serial, tmp, config) = common::tiny_setup(2);
    let run = RunDir::new(tmp.path().join("run"));
    common::session(&config, &run, false, None).unwrap();
    let ckpts = run.checkpoints();
    let (older, latest) = (ckpts.join("step-000002"), ckpts.join("step-000004"));
    assert_eq!(
        verify_checkpoint(&latest).unwrap(),
        Verification::Verified { files: 5 },
        "model, EMA, optimizer, config and state"
    );
    load(&run.root).unwrap();
    let pristine = tmp.path().join("pristine");
    copy_dir(&latest, &pristine);
    let restore = || {
        std::fs::remove_dir_all(&latest).unwrap();
        copy_dir(&pristine, &latest);
    };
    // Resuming must refuse, before touching anything: what it says.
    let resume_err = |config: &ExperimentConfig, max_steps| {
        common::session(config, &run, true, max_steps)
            .unwrap_err()
            .to_string()
    };

    // One flipped byte in the EMA weights.
    let ema = latest.join("ema.mpk");
    let mut bytes = std::fs::read(&ema).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x10;
    std::fs::write(&ema, &bytes).unwrap();
    let err = load(&run.root).unwrap_err().to_string();
    assert!(err.contains("ema.mpk does not match its checksum"), "{err}");
    assert!(err.contains("step-000004"), "{err}");
    assert!(
        err.contains("step-000002 is intact"),
        "offers the previous one: {err}"
    );
    // Resuming says the same.
    let err = resume_err(&config, None);
    assert!(err.contains("ema.mpk does not match its checksum"), "{err}");
    load(&older).unwrap();
    restore();

    // A truncated live-weights record.
    let model = latest.join("model.mpk");
    let len = std::fs::metadata(&model).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&model)
        .unwrap()
        .set_len(len / 3)
        .unwrap();
    let err = verify_checkpoint(&latest).unwrap_err().to_string();
    assert!(
        err.contains("model.mpk has") && err.contains("truncated"),
        "{err}"
    );
    restore();

    // The config of another run copied in.
    let mut other = config.clone();
    other.train.lr = 0.5; // "0.5" where "0.001" was: two bytes shorter
    std::fs::write(latest.join("config.toml"), other.to_toml()).unwrap();
    let err = load(&latest).unwrap_err().to_string();
    let (now, then) = (
        other.to_toml().len(),
        std::fs::metadata(pristine.join("config.toml"))
            .unwrap()
            .len(),
    );
    assert!(
        err.contains(&format!(
            "config.toml has {now} bytes where {then} were written"
        )),
        "{err}"
    );
    restore();

    // NaN weights written with valid checksums (as a diverged run would have saved them).
    let recorder = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
    let device = Default::default();
    let unet: UNet<Flex> = config
        .model
        .init::<Flex>(&device)
        .unwrap()
        .load_record(recorder.load(ema.clone(), &device).unwrap());
    unet.map(&mut Poison(false))
        .save_file(latest.join("ema"), &recorder)
        .unwrap();
    write_checksums(&latest).unwrap();
    let err = load(&latest).unwrap_err().to_string();
    assert!(
        err.contains("NaN or infinite") && err.contains("ema.mpk"),
        "{err}"
    );
    let err = resume_err(&config, Some(1));
    assert!(
        err.contains("NaN or infinite") && err.contains("ema.mpk"),
        "{err}"
    );
    restore();

    // Weights of another architecture (twice the channels), checksums made to match.
    let mut wide = config.clone();
    wide.model.model_channels = 16;
    wide.data = config.data.clone();
    let wide_run = RunDir::new(tmp.path().join("wide"));
    common::session(&wide, &wide_run, false, Some(2)).unwrap();
    let wide_ckpt = wide_run.latest_checkpoint().unwrap().unwrap();
    for name in ["model.mpk", "ema.mpk"] {
        std::fs::copy(wide_ckpt.join(name), latest.join(name)).unwrap();
    }
    write_checksums(&latest).unwrap();
    let err = load(&latest).unwrap_err().to_string();
    assert!(err.contains("another architecture"), "{err}");
    let err = resume_err(&config, Some(1));
    assert!(
        err.contains("another architecture") && err.contains("model.mpk"),
        "{err}"
    );
    restore();

    // A run config edited to another network before resuming.
    let err = resume_err(&wide, Some(1));
    assert!(err.contains("another [model]"), "{err}");

    // A checkpoint from before checksums (no manifest) still loads, reported unverified.
    std::fs::remove_file(latest.join("checksums.json")).unwrap();
    assert_eq!(
        verify_checkpoint(&latest).unwrap(),
        Verification::NoManifest
    );
    load(&latest).unwrap();
}

/// Adam state from another run (or another network), or with NaN moments, with checksums made
/// to match: burn would load the first and start every parameter from zero moments, and the
/// second would surface as a NaN loss blamed on the data; the resume refuses both, naming the
/// file, and resumes once the run's own state is back.
#[test]
fn another_runs_or_non_finite_optimizer_state_is_refused() {
    let (_serial, tmp, config) = common::tiny_setup(2);
    let run = RunDir::new(tmp.path().join("run"));
    common::session(&config, &run, false, Some(2)).unwrap();
    let other = RunDir::new(tmp.path().join("other"));
    common::session(&config, &other, false, Some(2)).unwrap();
    let latest = run.checkpoints().join("step-000002");
    let own = std::fs::read(latest.join("optimizer.mpk")).unwrap();
    std::fs::copy(
        other
            .checkpoints()
            .join("step-000002")
            .join("optimizer.mpk"),
        latest.join("optimizer.mpk"),
    )
    .unwrap();
    let refused = |why: &str| {
        write_checksums(&latest).unwrap();
        let err = common::session(&config, &run, true, Some(1))
            .unwrap_err()
            .to_string();
        assert!(err.contains("optimizer.mpk") && err.contains(why), "{err}");
    };
    refused("another run's or another network's");

    // The run's own state with one moment made NaN (valid checksums): refused at the resume,
    // not reported at the next step as a NaN loss blamed on the batch.
    type A = Autodiff<Flex>;
    type Records = <OptimizerAdaptor<FusedAdam, UNet<A>, A> as Optimizer<UNet<A>, A>>::Record;
    let recorder = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
    let device = Default::default();
    let file = latest.join("optimizer.mpk");
    std::fs::write(&file, &own).unwrap();
    let mut records: Records =
        Recorder::<Autodiff<Flex>>::load(&recorder, latest.join("optimizer"), &device).unwrap();
    let (id, record) = records
        .iter()
        .find(|(_, r)| matches!(r, AdaptorRecord::V1(AdaptorRecordV1::Rank1(_))))
        .map(|(id, r)| (*id, r.clone()))
        .unwrap();
    let mut state = record.into_state::<1>();
    state.momentum.moment_2 = state.momentum.moment_2.mul_scalar(f32::NAN);
    records.insert(id, AdaptorRecord::from_state(state));
    Recorder::<Autodiff<Flex>>::record(&recorder, records, latest.join("optimizer")).unwrap();
    refused("NaN or infinite Adam moment");

    std::fs::write(&file, own).unwrap();
    write_checksums(&latest).unwrap();
    common::session(&config, &run, true, Some(1)).unwrap();
}
