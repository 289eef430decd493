//! Host-side sampling of the timed training steps: where the CPU time goes while the GPU
//! waits for work (the GPU profiler sees only the kernels). Built with the `host-profile`
//! feature (pprof's signal-driven sampler); without it, asking for a profile is an error.

use std::path::{Path, PathBuf};

use crate::error::HostProfileError;

/// A running profile; [`HostProfile::finish`] writes it.
pub struct HostProfile {
    path: PathBuf,
    #[cfg(feature = "host-profile")]
    guard: pprof::ProfilerGuard<'static>,
}

/// Samples per second of CPU time (each sample costs an unwind of the interrupted thread).
#[cfg(feature = "host-profile")]
const FREQUENCY_HZ: i32 = 997;

impl HostProfile {
    /// Starts sampling every thread of the process.
    pub fn start(path: &Path) -> Result<Self, HostProfileError> {
        #[cfg(feature = "host-profile")]
        {
            let guard = pprof::ProfilerGuardBuilder::default()
                .frequency(FREQUENCY_HZ)
                .blocklist(&["libc", "libgcc", "pthread", "vdso"])
                .build()
                .map_err(|e| HostProfileError::Start {
                    cause: e.to_string(),
                })?;
            Ok(Self {
                path: path.to_path_buf(),
                guard,
            })
        }
        #[cfg(not(feature = "host-profile"))]
        {
            Err(HostProfileError::NotBuilt {
                path: path.to_path_buf(),
            })
        }
    }

    /// Stops sampling and writes the folded stacks (root first, `;`-separated, then the
    /// sample count), heaviest first.
    pub fn finish(self) -> Result<(), HostProfileError> {
        #[cfg(feature = "host-profile")]
        {
            use std::fmt::Write as _;
            let report = self
                .guard
                .report()
                .build()
                .map_err(|e| HostProfileError::Build {
                    cause: e.to_string(),
                })?;
            let mut lines: Vec<(String, isize)> = report
                .data
                .iter()
                .map(|(frames, &count)| {
                    let mut stack = frames.thread_name_or_id();
                    for frame in frames.frames.iter().rev() {
                        for symbol in frame.iter().rev() {
                            stack.push(';');
                            stack.push_str(&symbol.name());
                        }
                    }
                    (stack, count)
                })
                .collect();
            lines.sort_by_key(|l| std::cmp::Reverse(l.1));
            let mut text = String::new();
            for (stack, count) in lines {
                let _ = writeln!(text, "{stack} {count}");
            }
            medddpm_atomic::write(&self.path, text.as_bytes()).map_err(|source| {
                HostProfileError::Write {
                    path: self.path.clone(),
                    source,
                }
            })
        }
        #[cfg(not(feature = "host-profile"))]
        {
            let _ = &self.path;
            Ok(()) // never reached: `start` refuses without the feature
        }
    }
}
