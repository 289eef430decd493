//! `medddpm plan` and the memory check of `train`, `sample` and `bench` (on the CPU: against
//! the host's available memory).

use crate::common::{arg, medddpm, tiny_experiment};

/// The plan names its parts, says it fits, and its JSON carries the same totals.
#[test]
fn plan_prints_the_parts_and_whether_they_fit() {
    let (ok, out, err) = medddpm(&["plan", "quickstart", "--device", "cpu"]);
    assert!(ok, "{err}");
    for part in [
        "Adam moments",
        "EMA weights",
        "activations kept for the backward pass",
        "sampling (one volume)",
        "fits: training uses about",
    ] {
        assert!(out.contains(part), "no {part:?} in:\n{out}");
    }
    let (ok, json, err) = medddpm(&["plan", "quickstart", "--device", "cpu", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let parts: u64 = v["training"]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(v["training_bytes"].as_u64(), Some(parts));
    let (ok, _, err) = medddpm(&["plan", "quickstart", "--device", "cuda:x"]);
    assert!(!ok && err.contains("cuda:N"), "{err}");
}

/// The users' out-of-memory settings are refused before anything is allocated or written,
/// with the estimate and the cheapest change that fits; `inspect` says so too.
#[test]
fn runs_beyond_the_machine_are_refused_before_they_start() {
    let dir = tempfile::tempdir().unwrap();
    for (setting, remedy) in [
        (
            "batch_size = 1000000",
            "the cheapest change that fits is batch_size = ",
        ),
        (
            "model_channels = 100000",
            "the grid or the model must be smaller",
        ),
        (
            "num_res_blocks = 100000",
            "the grid or the model must be smaller",
        ),
    ] {
        let text = tiny_experiment(dir.path(), 2, "steps = 1\n");
        let text = match setting.starts_with("batch") {
            true => text.replace("[train]\n", &format!("[train]\n{setting}\n")),
            false => text.replace("[model]\n", &format!("[model]\n{setting}\n")),
        };
        // The tiny experiment names these once; the setting above comes first.
        let text = dedupe_first(&text, setting);
        let file = dir.path().join("e.toml");
        std::fs::write(&file, text).unwrap();
        let run = dir.path().join("run");
        let file = arg(&file);
        let (ok, _, err) = medddpm(&["train", "--experiment", file, "--run-dir", arg(&run)]);
        assert!(!ok, "{setting}: started");
        assert!(
            err.contains("training needs about") && err.contains(remedy),
            "{setting}: {err}"
        );
        assert!(!run.exists(), "{setting}: the run folder was made");
        assert!(
            !dir.path().join("phantoms").exists(),
            "{setting}: phantoms were generated"
        );
        let (ok, _, err) = medddpm(&["inspect", file]);
        assert!(ok, "{err}");
        assert!(
            err.contains("warning: training needs about"),
            "{setting}: {err}"
        );
    }
}

/// A grid far beyond memory is refused too, by the bench as well as by training.
#[test]
fn the_bench_refuses_a_configuration_that_cannot_fit() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bench");
    let (ok, _, err) = crate::common::cpu_bench(&out, "ncdhw", &["--size", "1024"]);
    assert!(!ok);
    assert!(
        err.contains("the cpu fp32 configuration needs about") && err.contains("TiB"),
        "{err}"
    );
    assert!(!out.exists(), "the bench started");
}

/// `text` with only the first line that sets `setting`'s key kept.
fn dedupe_first(text: &str, setting: &str) -> String {
    let key = setting.split(" = ").next().unwrap();
    let mut seen = false;
    text.lines()
        .filter(|line| {
            if line.split(" = ").next() != Some(key) {
                return true;
            }
            let keep = !seen;
            seen = true;
            keep
        })
        .collect::<Vec<_>>()
        .join("\n")
}
