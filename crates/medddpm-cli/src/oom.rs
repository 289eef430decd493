//! A GPU running out of memory surfaces as a panic deep in cubecl, in its device thread
//! ("can't allocate buffer of size: 21254373376" on the H100), followed by hundreds of lines of
//! panics of everything that waited on it. The panic hook turns the first into one error:
//! what was running, with which settings, and what uses less memory; then the process exits
//! (nothing can continue on that device, and checkpoints are only ever replaced atomically).
//! The same hook turns `println!`'s panic on a standard output that cannot be written (`>
//! /dev/full`) into one error line.

use std::sync::Mutex;

/// What the process is doing, for the hint ("training 128x128x128 volumes, batch 1, ...").
static WORK: Mutex<Option<String>> = Mutex::new(None);

/// Records what the process is about to run.
pub fn describe(work: String) {
    *WORK.lock().unwrap_or_else(|e| e.into_inner()) = Some(work);
}

/// Whether a panic message is an allocation failure of the device.
pub fn is_out_of_memory(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("out of memory")
        || m.contains("can't allocate buffer")
        || m.contains("out-of-memory")
        || m.contains("outofmemory")
        || m.contains("cuda_error_out_of_memory")
}

/// The second line of the out-of-memory error: what ran, and what needs less memory.
pub fn hint(work: Option<&str>) -> String {
    format!(
        "the GPU ran out of memory{}. What needs less: --precision bf16 (the whole-head model's training peaked at 14,186 MiB in bf16 against 24,916 MiB in tf32 on an H100, docs/benchmarks), a smaller [data] grid, [train] batch_size = 1 with grad_accum for the same effective batch; `medddpm bench` measures a configuration's peak memory before a long run",
        work.map(|w| format!(" while {w}")).unwrap_or_default()
    )
}

/// Whether a panic message is `println!` failing to write standard output (a full disk, or
/// `> /dev/full`; a closed pipe ends the process quietly instead, see `main`).
pub fn is_stdout_failure(message: &str) -> bool {
    message.starts_with("failed printing to stdout")
}

/// Installs the hook: an out-of-memory panic becomes two error lines and exit status 1, a
/// standard output that cannot be written one line and status 1; every other panic goes to the
/// default hook.
pub fn install_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = medddpm_kernels::panics::panic_message(info.payload());
        if is_stdout_failure(message) {
            let cause = message.trim_start_matches("failed printing to stdout: ");
            eprintln!("error: cannot write to standard output: {cause}");
            std::process::exit(1);
        }
        if !is_out_of_memory(message) {
            return default(info);
        }
        let work = WORK.lock().unwrap_or_else(|e| e.into_inner()).clone();
        eprintln!("error: {}", message.lines().next().unwrap_or(message));
        eprintln!("error: {}", hint(work.as_deref()));
        std::process::exit(1);
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_memory_panics_get_the_settings_and_a_hint() {
        assert!(is_out_of_memory(
            "An out-of-memory error happened during launch\nCaused by:\n  ..."
        ));
        assert!(is_out_of_memory(
            "DriverError(CUDA_ERROR_OUT_OF_MEMORY, \"out of memory\")"
        ));
        assert!(is_out_of_memory(
            "called `Result::unwrap()` on an `Err` value: can't allocate buffer of size: 21254373376"
        ));
        assert!(!is_out_of_memory("index out of bounds"));
        let h = hint(Some(
            "training 256x256x256 volumes, batch 1, fp32, ncdhw on cuda",
        ));
        assert!(
            h.contains("while training 256x256x256") && h.contains("bf16"),
            "{h}"
        );
    }
}
