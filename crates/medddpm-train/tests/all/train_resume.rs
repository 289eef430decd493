//! Exact resume: N optimizer steps in one go and N/2 + resume + N/2 end with bitwise-identical
//! live and EMA weights, on the CPU backend.

use crate::common;
use medddpm_train::checkpoint::read_state;
use medddpm_train::RunDir;

#[test]
fn straight_and_resumed_runs_end_bitwise_identical() {
    let (_serial, tmp, config) = common::tiny_setup(3);

    let straight = RunDir::new(tmp.path().join("straight"));
    let s = common::session(&config, &straight, false, None).unwrap();
    assert_eq!((s.start_step, s.end_step), (0, 4));

    let split = RunDir::new(tmp.path().join("split"));
    let first = common::session(&config, &split, false, Some(2)).unwrap();
    assert_eq!(first.end_step, 2);
    // Starting again without --resume must refuse rather than overwrite the run.
    let err = common::session(&config, &split, false, None).unwrap_err();
    assert!(err.to_string().contains("resume"), "{err}");
    let second = common::session(&config, &split, true, None).unwrap();
    assert_eq!((second.start_step, second.end_step), (2, 4));
    // Resuming with fewer steps than the run has made is refused, its config.toml untouched.
    let before = std::fs::read_to_string(split.config_path()).unwrap();
    let mut fewer = config.clone();
    fewer.train.steps = 3;
    let err = common::session(&fewer, &split, true, None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("below the step the run is at (4"), "{err}");
    assert_eq!(
        std::fs::read_to_string(split.config_path()).unwrap(),
        before
    );

    let a = straight.latest_checkpoint().unwrap().unwrap();
    let b = split.latest_checkpoint().unwrap().unwrap();
    assert_eq!(read_state(&a).unwrap(), {
        let mut s = read_state(&b).unwrap();
        s.elapsed_s = read_state(&a).unwrap().elapsed_s;
        s
    });
    for file in ["model.mpk", "ema.mpk"] {
        let wa = common::saved_weights(&config, &a.join(file));
        let wb = common::saved_weights(&config, &b.join(file));
        assert_eq!(wa.len(), wb.len());
        for (i, (x, y)) in wa.iter().zip(&wb).enumerate() {
            let same = x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits());
            assert!(
                same,
                "{file}: parameter {i} differs between the straight and the resumed run"
            );
        }
    }
    // The weights did change during training, and the EMA differs from the live weights
    // (it was blended from step 2 on).
    let fresh = common::saved_weights(
        &config,
        &straight.root.join("checkpoints/step-000002/model.mpk"),
    );
    let end = common::saved_weights(&config, &a.join("model.mpk"));
    assert_ne!(fresh, end);
    assert_ne!(common::saved_weights(&config, &a.join("ema.mpk")), end);

    // metrics.jsonl has each step once, in order, in both runs.
    for run in [&straight, &split] {
        let steps: Vec<u64> = common::logged(run, "step");
        assert_eq!(steps, vec![1, 2, 3, 4]);
    }
}
