//! A loss that stops being a number: by default the run stops, naming the step, the batch's
//! files and the last checkpoint; with `on_non_finite_loss = "skip"` bad batches are skipped
//! without an update until too many come in a row.

use crate::common;
use medddpm_train::checkpoint::read_state;
use medddpm_train::{NonFiniteLoss, RunDir, TrainError};

#[test]
fn a_non_finite_loss_stops_with_the_batch_and_the_last_checkpoint() {
    let (_serial, tmp, mut config) = common::tiny_setup(2);
    // A rate that throws the weights to infinity after the first update.
    config.train.lr = 1e38;
    config.train.steps = 20;
    config.train.save_every = 1;
    let run = RunDir::new(tmp.path().join("run"));
    let err = common::session(&config, &run, false, None).unwrap_err();
    let TrainError::Diverged {
        step,
        loss,
        ref files,
        ref last_checkpoint,
    } = err
    else {
        panic!("{err}");
    };
    assert!(!loss.is_finite());
    assert!(
        step >= 2,
        "the first loss is computed before any update: {step}"
    );
    assert_eq!(
        files.len(),
        2,
        "one image per micro-batch (grad_accum 2): {files:?}"
    );
    assert!(files.iter().all(|f| f.contains("phantom_")), "{files:?}");
    let last = last_checkpoint
        .clone()
        .expect("a checkpoint before the bad step");
    assert_eq!(read_state(&last).unwrap().step, step - 1);
    let message = err.to_string();
    assert!(message.contains(&format!("step {step}")), "{message}");
    assert!(message.contains(&last.display().to_string()), "{message}");

    // Skipping: the bad batches leave the weights alone; ten in a row end the run.
    config.train.on_non_finite_loss = NonFiniteLoss::Skip;
    let skip_run = RunDir::new(tmp.path().join("skip"));
    let err = common::session(&config, &skip_run, false, None).unwrap_err();
    let TrainError::Diverged {
        step: skip_step, ..
    } = err
    else {
        panic!("{err}");
    };
    // No update was made after the first bad loss, so the step count stayed where it was.
    assert_eq!(skip_step, step, "{err}");
    let latest = skip_run.latest_checkpoint().unwrap().unwrap();
    assert_eq!(read_state(&latest).unwrap().step, step - 1);
}
