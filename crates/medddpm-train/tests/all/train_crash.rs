//! A crash while a checkpoint is being written (simulated by failing the rename that publishes
//! it) leaves the previous checkpoint as the latest, loadable and resumable. The failure is
//! injected for this test's run folder only, through a hook that only test builds have.
#![cfg(debug_assertions)]

use crate::common;
use burn::backend::Flex;
use medddpm_train::checkpoint::{inject_rename_failure, read_state};
use medddpm_train::{load_sampling_model, RunDir, WeightsSource};

#[test]
fn failed_checkpoint_publication_keeps_the_previous_one() {
    let (_serial, tmp, config) = common::tiny_setup(2);
    let device = Default::default();
    let run = RunDir::new(tmp.path().join("run"));

    common::session(&config, &run, false, Some(2)).unwrap();
    let before = run.latest_checkpoint().unwrap().unwrap();
    assert!(before.ends_with("step-000002"));
    let weights_before = common::saved_weights(&config, &before.join("model.mpk"));

    inject_rename_failure(&run.root);
    let err = common::session(&config, &run, true, None).unwrap_err();
    assert!(err.to_string().contains("step-000004"), "{err}");

    // The previous checkpoint is still the latest, intact and loadable.
    let latest = run.latest_checkpoint().unwrap().unwrap();
    assert_eq!(latest, before);
    assert_eq!(read_state(&latest).unwrap().step, 2);
    assert_eq!(
        common::saved_weights(&config, &latest.join("model.mpk")),
        weights_before
    );
    let model =
        load_sampling_model::<Flex>(&WeightsSource::Checkpoint(run.root.clone()), false, &device)
            .unwrap();
    assert_eq!(model.schedule.num_timesteps(), 50);

    // And the run resumes from it to the end.
    let s = common::session(&config, &run, true, None).unwrap();
    assert_eq!((s.start_step, s.end_step), (2, 4));
}
