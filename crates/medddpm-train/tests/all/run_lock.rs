//! Two trainers on one run folder: the second stops at once, naming the holder; once the first
//! is done (its lock dropped, as the kernel drops it when a process dies) the run resumes.

use crate::common;
use medddpm_train::lock::RunLock;
use medddpm_train::{RunDir, TrainError};

#[test]
fn a_second_trainer_on_a_locked_run_folder_stops_with_the_holder() {
    let (_serial, tmp, config) = common::tiny_setup(2);
    let run = RunDir::new(tmp.path().join("run"));
    common::session(&config, &run, false, Some(2)).unwrap();

    let held = RunLock::acquire(&run.root).unwrap();
    let err = common::session(&config, &run, true, None).unwrap_err();
    assert!(matches!(err, TrainError::Locked { .. }), "{err}");
    let message = err.to_string();
    assert!(
        message.contains(&format!("process {}", std::process::id())),
        "{message}"
    );
    // Nothing was touched: the run is still at step 2.
    let latest = run.latest_checkpoint().unwrap().unwrap();
    assert!(latest.ends_with("step-000002"), "{latest:?}");
    // A fresh start in the same folder is refused the same way.
    assert!(matches!(
        common::session(&config, &run, false, None).unwrap_err(),
        TrainError::Locked { .. }
    ));

    drop(held);
    let s = common::session(&config, &run, true, None).unwrap();
    assert_eq!((s.start_step, s.end_step), (2, 4));
    // A session that ended leaves no lock file behind.
    assert!(!run.root.join(".lock").exists());
}

/// The lock file exists while its holder lives and goes with it, and the lock stays exclusive
/// when taken again after that: a second taker is refused both times.
#[test]
fn the_lock_file_goes_with_its_holder_and_stays_exclusive() {
    let (_serial, tmp) = crate::common::serial_tempdir();
    let root = tmp.path().join("run");
    let first = RunLock::acquire(&root).unwrap();
    assert!(first.path().is_file());
    assert!(matches!(
        RunLock::acquire(&root).unwrap_err(),
        TrainError::Locked { .. }
    ));
    drop(first);
    assert!(!root.join(".lock").exists());
    let again = RunLock::acquire(&root).unwrap();
    assert!(matches!(
        RunLock::acquire(&root).unwrap_err(),
        TrainError::Locked { .. }
    ));
    drop(again);
}
