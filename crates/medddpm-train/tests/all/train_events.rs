//! The TensorBoard event files a run writes beside `metrics.jsonl`: the same scalars for every
//! logged step, the periodic samples' slices as PNG pictures, the settings as text, and a
//! restart mark per session, so that a resumed run reads as one curve.

use crate::common;
use medddpm_tensorboard::{event_files, read_dir_events, read_events, scalars, Data, Event, What};
use medddpm_train::RunDir;

/// Width and height from a PNG's IHDR chunk.
fn png_size(png: &[u8]) -> (u32, u32) {
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let be = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().unwrap());
    (be(16), be(20))
}

/// Values logged under `tag` as `(step, data)`.
fn tagged<'a>(events: &'a [Event], tag: &str) -> Vec<(i64, &'a Data)> {
    events
        .iter()
        .flat_map(|e| e.values().iter().map(move |v| (e.step, v)))
        .filter(|(_, v)| v.tag == tag)
        .map(|(step, v)| (step, &v.data))
        .collect()
}

/// What TensorBoard keeps of a folder's events: a session's restart mark at step `s` drops
/// what earlier files logged at `s` and later (`EventAccumulator._CheckForRestartAndMaybePurge`).
fn as_tensorboard_reads(events: Vec<Event>) -> Vec<Event> {
    let mut kept: Vec<Event> = Vec::new();
    for e in events {
        if e.what == What::SessionStart {
            kept.retain(|k| k.step < e.step);
        }
        kept.push(e);
    }
    kept
}

#[test]
fn a_run_logs_scalars_samples_and_settings() {
    let (_serial, tmp, mut config) = common::tiny_setup(2);
    config.train.samples_per_checkpoint = 1;
    let run = RunDir::new(tmp.path().join("run"));
    common::session(&config, &run, false, None).unwrap();

    let files = event_files(&run.root).unwrap();
    assert_eq!(files.len(), 1, "{files:?}");
    let events = read_events(&files[0]).unwrap();
    assert!(matches!(&events[0].what, What::FileVersion(v) if v == "brain.Event:2"));
    assert_eq!((events[1].step, &events[1].what), (1, &What::SessionStart));

    // The settings: the resolved experiment, at step 0.
    let settings = tagged(&events, "settings");
    let [(0, Data::Text(text))] = settings.as_slice() else {
        panic!("{settings:?}")
    };
    assert!(
        text.contains("```toml") && text.contains(&config.to_toml()),
        "{text}"
    );

    // Every logged step's scalars, equal to metrics.jsonl's.
    let steps: Vec<i64> = (1..=config.train.steps as i64).collect();
    let losses: Vec<f32> = common::logged(&run, "loss");
    let series = scalars(&events, "train/loss");
    assert_eq!(
        series,
        steps.iter().copied().zip(losses).collect::<Vec<_>>()
    );
    let lrs: Vec<f64> = common::logged(&run, "lr");
    let lr_series = scalars(&events, "train/lr");
    assert_eq!(lr_series.len(), steps.len());
    assert!(lr_series.iter().zip(&lrs).all(|(t, m)| t.1 == *m as f32));
    let norms: Vec<f32> = common::logged(&run, "grad_norm");
    assert!(norms.iter().all(|n| n.is_finite() && *n > 0.0), "{norms:?}");
    let norm_series = scalars(&events, "train/grad_norm");
    assert_eq!(
        norm_series,
        steps.iter().copied().zip(norms).collect::<Vec<_>>()
    );
    assert_eq!(scalars(&events, "train/steps_per_s").len(), steps.len());
    // f32 training has no loss scale.
    assert!(scalars(&events, "train/loss_scale").is_empty());

    // The periodic samples (steps 2 and 4): three slices of the one sampled case.
    for plane in ["axial", "coronal", "sagittal"] {
        let images = tagged(&events, &format!("samples/phantom_000/{plane}"));
        assert_eq!(images.iter().map(|i| i.0).collect::<Vec<_>>(), [2, 4]);
        for (_, data) in images {
            let Data::Image(image) = data else {
                panic!("{data:?}")
            };
            assert_eq!(image.colorspace, 3);
            assert_eq!(png_size(&image.png), (image.width, image.height));
            assert!(image.width >= 192 || image.height >= 192, "{image:?}");
        }
    }
}

/// A session that crashed after logging steps its checkpoint never kept: the resumed session
/// logs those steps again, and TensorBoard's restart rule leaves each step once, as
/// `metrics.jsonl` has them.
#[cfg(debug_assertions)]
#[test]
fn a_resumed_run_reads_as_one_curve() {
    let (_serial, tmp, config) = common::tiny_setup(2);
    let run = RunDir::new(tmp.path().join("run"));
    common::session(&config, &run, false, Some(2)).unwrap();
    medddpm_train::checkpoint::inject_rename_failure(&run.root);
    common::session(&config, &run, true, None).unwrap_err();
    common::session(&config, &run, true, None).unwrap();

    let files = event_files(&run.root).unwrap();
    assert_eq!(files.len(), 3, "one file per session: {files:?}");
    // The crashed session logged steps 3 and 4; so did the one after it.
    let crashed = read_events(&files[1]).unwrap();
    assert_eq!(scalars(&crashed, "train/loss").len(), 2);
    let resumed = read_events(&files[2]).unwrap();
    assert_eq!(
        (resumed[1].step, &resumed[1].what),
        (3, &What::SessionStart)
    );
    assert_eq!(tagged(&resumed, "settings")[0].0, 2);

    let read = as_tensorboard_reads(read_dir_events(&run.root).unwrap());
    let losses: Vec<f32> = common::logged(&run, "loss");
    assert_eq!(losses.len(), 4);
    let series = scalars(&read, "train/loss");
    assert_eq!(series, (1..=4).zip(losses).collect::<Vec<_>>());
}

/// `[train] tensorboard = false` writes no event file; `grad_norm = false` leaves the norm out
/// of both logs.
#[test]
fn switches_turn_events_and_the_norm_off() {
    let (_serial, tmp, mut config) = common::tiny_setup(2);
    config.train.steps = 2;
    config.train.tensorboard = false;
    config.train.grad_norm = false;
    let run = RunDir::new(tmp.path().join("run"));
    common::session(&config, &run, false, None).unwrap();
    assert!(event_files(&run.root).unwrap().is_empty());
    let text = std::fs::read_to_string(run.metrics_path()).unwrap();
    assert_eq!(text.lines().count(), 2);
    assert!(!text.contains("grad_norm"), "{text}");

    config.train.tensorboard = true;
    let run = RunDir::new(tmp.path().join("with-events"));
    common::session(&config, &run, false, None).unwrap();
    let events = read_dir_events(&run.root).unwrap();
    assert_eq!(scalars(&events, "train/loss").len(), 2);
    assert!(scalars(&events, "train/grad_norm").is_empty());
}
