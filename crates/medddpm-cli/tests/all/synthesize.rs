//! `medddpm synthesize` end to end on the CPU with a tiny trained model and 16^3 phantom
//! masks: both layouts, kill -9 in the middle and a rerun, a torn manifest line, other
//! settings refused, and one process per "device" (`--launch processes`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use medddpm_nifti::Volume;

use crate::common::{arg, assert_refused, medddpm, medddpm_with};

/// A tiny model trained for two steps in `dir/run`, on two phantoms in `dir/phantoms`.
fn trained(dir: &Path) -> (PathBuf, PathBuf) {
    let toml = dir.join("exp.toml");
    let train = "steps = 2\nlr = 1e-3\nsave_every = 2\nsamples_per_checkpoint = 0\nema_start = 1\n";
    std::fs::write(&toml, crate::common::tiny_experiment(dir, 2, train)).unwrap();
    let run = dir.join("run");
    let (ok, _, stderr) = medddpm(&[
        "train",
        "--backend",
        "cpu",
        "--experiment",
        arg(&toml),
        "--run-dir",
        arg(&run),
    ]);
    assert!(ok, "{stderr}");
    (run, dir.join("phantoms/mask"))
}

/// Switches written as on a command line (no value with a space in it).
fn switches(line: &str) -> Vec<&str> {
    line.split(' ').collect()
}

/// The arguments of `medddpm synthesize` of `run`'s model from `masks` into `out`.
fn synthesize_args<'a>(run: &'a Path, masks: &'a Path, out: &'a Path) -> [&'a str; 9] {
    [
        "synthesize",
        "--backend",
        "cpu",
        "--checkpoint",
        arg(run),
        "--masks",
        arg(masks),
        "--out",
        arg(out),
    ]
}

/// `medddpm synthesize` of `run`'s model from `masks` into `out`, with `extra` switches.
fn synthesize(run: &Path, masks: &Path, out: &Path, extra: &[&str]) -> (bool, String, String) {
    medddpm_with(&synthesize_args(run, masks, out), extra)
}

/// The manifest's pair ids, in file order (complete lines only: a kill may tear the last).
fn listed(out: &Path) -> Vec<u64> {
    let text = std::fs::read_to_string(out.join("manifest.jsonl")).unwrap_or_default();
    let complete = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
    complete
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["pair"]
                .as_u64()
                .unwrap()
        })
        .collect()
}

/// Every file under `dir`, relative.
fn files_under(dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.strip_prefix(dir).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    out
}

/// Asserts `out` holds exactly pairs `0..n`, each listed once, every file whole.
fn assert_complete(out: &Path, n: u64, layout_files: usize) {
    assert_eq!(listed(out), (0..n).collect::<Vec<_>>());
    let files = files_under(out);
    assert!(
        !files
            .iter()
            .any(|f| f.ends_with(".tmp") || f.contains("rank-")),
        "{files:?}"
    );
    let nifti: Vec<&String> = files.iter().filter(|f| f.ends_with(".nii.gz")).collect();
    assert_eq!(nifti.len(), n as usize * layout_files, "{files:?}");
    for f in nifti {
        Volume::read(out.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    }
}

#[test]
fn synthesize_makes_both_layouts_resumes_after_kill_and_refuses_other_settings() {
    let tmp = tempfile::tempdir().unwrap();
    let (run, masks) = trained(tmp.path());
    // Ours: image/ and mask/, as `train` reads them.
    let ours = tmp.path().join("ours");
    let (ok, stdout, stderr) = synthesize(&run, &masks, &ours, &["--count", "3", "--steps", "2"]);
    assert!(ok, "{stderr}");
    assert_eq!(stdout.trim(), arg(&ours));
    assert_complete(&ours, 3, 2);
    assert!(ours.join("image/phantom_000_syn001.nii.gz").is_file());
    let line: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(ours.join("manifest.jsonl"))
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        (line["sampler"].as_str(), line["steps"].as_u64()),
        (Some("dpm-solver++"), Some(2))
    );
    assert!(
        line["augmentation"].is_null() && line["seconds"].as_f64().unwrap() > 0.0,
        "{line}"
    );
    // Done already: a rerun makes nothing and says where the set is.
    let (ok, _, stderr) = synthesize(&run, &masks, &ours, &["--count", "3", "--steps", "2"]);
    assert!(ok && stderr.contains("3 of 3 pairs"), "{stderr}");
    // Other settings are refused, naming the manifest.
    let refused = synthesize(&run, &masks, &ours, &["--count", "3", "--steps", "3"]);
    assert_refused(&refused, &["manifest.jsonl", "steps"]);

    // nnU-Net: a dataset.json beside imagesTr and labelsTr.
    let nn = tmp.path().join("nn");
    let nn_args = switches("--count 2 --steps 2 --dataset-layout nnunet --dataset-id 42");
    let (ok, _, stderr) = synthesize(&run, &masks, &nn, &nn_args);
    assert!(ok, "{stderr}");
    let set = nn.join("Dataset042_Synthetic");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(set.join("dataset.json")).unwrap()).unwrap();
    assert_eq!(json["numTraining"], 2);
    assert_eq!(json["file_ending"], ".nii.gz");
    assert_eq!(json["channel_names"]["0"], "MRI");
    assert_eq!(
        json["labels"],
        serde_json::json!({"background": 0, "head": 1, "tumour": 2})
    );
    assert!(set
        .join("imagesTr/phantom_001_syn000_0000.nii.gz")
        .is_file());
    assert!(set.join("labelsTr/phantom_001_syn000.nii.gz").is_file());

    // A torn last line and a temporary, as a kill leaves them.
    let manifest = nn.join("manifest.jsonl");
    let mut text = std::fs::read_to_string(&manifest).unwrap();
    text.push_str("{\"pair\": 7, \"ca");
    std::fs::write(&manifest, text).unwrap();
    std::fs::write(
        set.join("imagesTr/.phantom_000_syn001_0000.nii.gz.1.0.tmp"),
        b"half",
    )
    .unwrap();
    let (ok, _, stderr) = synthesize(&run, &masks, &nn, &nn_args);
    assert!(ok && stderr.contains("1 torn manifest line"), "{stderr}");
    assert_complete(&nn, 2, 2);
}

#[test]
#[cfg(target_os = "linux")]
fn a_run_killed_mid_way_completes_on_rerun_with_no_pair_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let (run, masks) = trained(tmp.path());
    let out = tmp.path().join("out");
    // DDPM's 50 network calls a pair: slow enough to be killed in the middle.
    let args = switches("--count 8 --sampler ddpm --dataset-layout nnunet");
    let mut child = Command::new(env!("CARGO_BIN_EXE_medddpm"))
        .args(synthesize_args(&run, &masks, &out))
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while listed(&out).len() < 2 {
        assert!(start.elapsed() < Duration::from_secs(300), "no pair listed");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: a signal to this test's own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    child.wait().unwrap();
    let at_kill = listed(&out).len();
    assert!(at_kill < 8, "the run ended before the kill");
    let (ok, _, stderr) = synthesize(&run, &masks, &out, &args);
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains(&format!("{at_kill} of 8 pairs done")),
        "{stderr}"
    );
    assert_complete(&out, 8, 2);
    let json: serde_json::Value = serde_json::from_slice(
        &std::fs::read(out.join("Dataset501_Synthetic/dataset.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(json["numTraining"], 8);
}

#[test]
fn one_process_per_device_makes_the_same_pairs_as_one() {
    let tmp = tempfile::tempdir().unwrap();
    let (run, masks) = trained(tmp.path());
    let make = |name: &str, extra: &[&str]| {
        let out = tmp.path().join(name);
        let args = [&["--count", "4", "--steps", "2"][..], extra].concat();
        let (ok, _, stderr) = synthesize(&run, &masks, &out, &args);
        assert!(ok, "{stderr}");
        assert_complete(&out, 4, 2);
        out
    };
    let one = make("one", &[]);
    let two = make("two", &["--devices", "0,1", "--launch", "processes"]);
    for f in files_under(&one).iter().filter(|f| f.ends_with(".nii.gz")) {
        let (a, b) = (
            Volume::read(one.join(f)).unwrap(),
            Volume::read(two.join(f)).unwrap(),
        );
        assert_eq!(a.data(), b.data(), "{f}");
    }
    // Several devices need CUDA, or the CPU with --launch processes.
    let refused = synthesize(
        &run,
        &masks,
        &tmp.path().join("x"),
        &["--count", "1", "--devices", "0,1"],
    );
    assert_refused(&refused, &["several devices need the CUDA backend"]);
}

/// `--augment-config`: every pair's manifest line records what was drawn, the label written is
/// that variant (on the source's grid, only the source's labels, not the source itself), a
/// rerun with other augmentation settings is refused, and the same settings resume. (Where
/// the tumour may go is `medddpm-mask`'s `augment` tests' subject.)
#[test]
fn augmented_pairs_record_their_draws_and_resume_only_with_the_same_settings() {
    let dir = tempfile::tempdir().unwrap();
    let (run, masks) = trained(dir.path());
    let small = dir.path().join("augment.toml");
    std::fs::write(
        &small,
        "flip_probability = 1.0\nmax_rotation_deg = 5.0\nscale_range = [0.95, 1.05]\nmax_tumour_shift = 1\ntumour_scale_range = [0.9, 1.1]\n",
    )
    .unwrap();
    let out = dir.path().join("aug");
    let cfg = [
        "--count",
        "3",
        "--steps",
        "2",
        "--augment-config",
        arg(&small),
    ];
    let (ok, _, stderr) = synthesize(&run, &masks, &out, &cfg);
    assert!(ok, "{stderr}");
    assert_complete(&out, 3, 2);
    let text = std::fs::read_to_string(out.join("manifest.jsonl")).unwrap();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let record = &v["augmentation"];
        assert_eq!(record["flip"], true, "{line}");
        assert!(record["seed"].is_u64(), "{line}");
        let label = Volume::read(out.join(v["files"][1].as_str().unwrap())).unwrap();
        let source = Volume::read(v["source_mask"].as_str().unwrap()).unwrap();
        assert_eq!(label.dims(), source.dims());
        assert!(label.data().iter().all(|&x| [0.0, 1.0, 2.0].contains(&x)));
        assert_ne!(
            label.data(),
            source.data(),
            "a flipped variant equals its mask"
        );
    }
    // The defaults are other settings: refused, nothing touched.
    let (ok, _, stderr) = synthesize(
        &run,
        &masks,
        &out,
        &["--count", "4", "--steps", "2", "--augment"],
    );
    assert!(!ok && stderr.contains("manifest"), "{stderr}");
    assert_complete(&out, 3, 2);
    let mut more = cfg.to_vec();
    more[1] = "4";
    let (ok, _, stderr) = synthesize(&run, &masks, &out, &more);
    assert!(ok, "{stderr}");
    assert_complete(&out, 4, 2);
}
