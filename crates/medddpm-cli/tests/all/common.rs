//! What the command tests share.

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
