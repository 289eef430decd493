//! What the command tests share.

use std::path::Path;
use std::process::Command;

/// Runs the `medddpm` binary: whether it succeeded, its stdout and its stderr.
pub fn medddpm(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_medddpm"))
        .args(args)
        .output()
        .expect("runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// Asserts that a run (what [`medddpm`] returns) failed and its standard error names each of
/// `names`.
pub fn assert_refused((ok, _, stderr): &(bool, String, String), names: &[&str]) {
    assert!(!ok, "{stderr}");
    assert_mentions(stderr, names);
}

/// Asserts that `text` names each of `names`.
pub fn assert_mentions(text: &str, names: &[&str]) {
    assert!(names.iter().all(|n| text.contains(n)), "{text}");
}

/// `path` as an argument of the command (the tests' paths are UTF-8).
pub fn arg(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// [`medddpm`] with `args`, then `extra`.
pub fn medddpm_with(args: &[&str], extra: &[&str]) -> (bool, String, String) {
    medddpm(&[args, extra].concat())
}

/// `medddpm COMMAND` (`bench` or `check`) of the CPU in `precisions`, reports into `out`, with
/// `extra` switches.
pub fn on_cpu(
    command: &str,
    precisions: &str,
    out: &Path,
    extra: &[&str],
) -> (bool, String, String) {
    let out = arg(out);
    let args = [
        command,
        "--backends",
        "cpu",
        "--precisions",
        precisions,
        "--out",
        out,
    ];
    medddpm_with(&args, extra)
}

/// `medddpm bench` of the CPU's fp32 configuration in `layout`, reports into `out`, with
/// `extra` switches.
pub fn cpu_bench(out: &Path, layout: &str, extra: &[&str]) -> (bool, String, String) {
    on_cpu(
        "bench",
        "fp32",
        out,
        &[&["--layouts", layout][..], extra].concat(),
    )
}

/// A tiny experiment on `phantoms` 16^3 phantoms in `dir/phantoms`, with `train` as its
/// `[train]` section.
pub fn tiny_experiment(dir: &Path, phantoms: usize, train: &str) -> String {
    format!(
        r#"
[model]
in_channels = 3
out_channels = 1
model_channels = 8
channel_mult = [1, 2]
attention_resolutions = []
image_size = 16
num_groups = 8

[diffusion]
timesteps = 50

[data]
source = {{ layout = "phantom", dir = {:?}, count = {phantoms}, size = [16, 16, 16], seed = 3 }}

[train]
{train}"#,
        dir.join("phantoms")
    )
}
