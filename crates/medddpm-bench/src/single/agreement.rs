//! The agreement probe of a configuration; fills the record's agreement fields. Strict FP32
//! (and the CPU) is compared with a float64 CPU evaluation at a small size; on a GPU its output
//! at the benchmarked size is then kept, and the other precisions are compared with it there.
//! An output that disagrees is explained: the first operation that gave NaN or infinity, or
//! (when asked) the first whose output deviates from the float64 pass.

use std::path::{Path, PathBuf};

use medddpm_backend::{BackendKind, KernelAutodiffBackend, Precision};
use medddpm_unet::UNetConfig;

use super::{size_label, Run};
use crate::error::{Error, FileAction, Result};
use crate::probe::{probe_key, read_f64, write_f64, Located, Probe, ProbeCase, ProbeResult};

/// Runs the probe of `run`'s configuration and records how its output agrees.
pub(super) fn check<B: KernelAutodiffBackend>(run: &mut Run<B>) -> Result<()> {
    let (config, env) = (run.config, run.env);
    let tolerance = env.precision.agreement_tolerance();
    let case = ProbeCase {
        unet: &config.unet,
        dtype: env.compute_dtype(),
        compute: env.compute(),
        tolerance,
    };
    let gpu = env.backend != BackendKind::Cpu;
    // The strict-FP32 output of this backend at the benchmarked size, written by its fp32 run.
    let fp32_path = match &config.probe_cache {
        Some(dir) => Some(dir.join(format!(
            "{}-fp32-{}.f64",
            env.backend,
            probe_key(&config.unet, config.workload.size, config.seed)?
        ))),
        None => None,
    };
    if env.precision != Precision::Fp32 {
        if let Some(path) = fp32_path.as_ref().filter(|p| p.is_file()) {
            return against_fp32_output(run, &case, path);
        }
        if gpu {
            run.say(&format!(
                "no strict-FP32 output of {} at {} is cached (run fp32 first): checking against float64 at the small size instead",
                env.backend,
                size_label(config.workload.size)
            ));
        }
    }
    let (probe, result) = against_float64(run, &case)?;
    if env.precision == Precision::Fp32 && gpu && result.agrees() {
        if let Some(path) = &fp32_path {
            keep_fp32_output(run, &case, path)?;
        }
    }
    if !result.rel_l2.is_finite() {
        locate_non_finite(run, &probe, &case)?;
    } else if !result.agrees() {
        if let Some(dir) = &config.locate {
            locate_deviation(run, &probe, &case, dir)?;
        }
    }
    Ok(())
}

/// The float64 probe's size: at most 32 per axis, a multiple of the network's size divisor.
pub(super) fn small_probe_size(unet: &UNetConfig, size: [usize; 3]) -> [usize; 3] {
    let divisor = unet.size_divisor();
    let cap = 32usize.max(divisor).div_ceil(divisor) * divisor;
    size.map(|s| s.min(cap))
}

/// Compares the output at the benchmarked size with this backend's strict-FP32 output there.
fn against_fp32_output<B: KernelAutodiffBackend>(
    run: &mut Run<B>,
    case: &ProbeCase,
    path: &Path,
) -> Result<()> {
    let (config, env, tolerance) = (run.config, run.env, case.tolerance);
    run.say(&format!(
        "agreement probe: {:?} on {} {} {} against this backend's strict-FP32 output",
        config.workload.size, env.backend, env.precision, env.layout
    ));
    let probe = Probe::against(
        &config.unet,
        config.workload.size,
        config.seed,
        read_f64(path)?,
    )?;
    let out = probe.output::<B::InnerBackend>(case, run.device)?;
    let result = probe.compare(&out, tolerance);
    run.record.agreement_rel_l2 = Some(result.rel_l2);
    run.record.agreement_tolerance = Some(tolerance);
    run.record.agreement_reference = Some(format!(
        "{} fp32 at {}",
        env.backend,
        size_label(config.workload.size)
    ));
    run.say(&format!(
        "agreement: rel. L2 {:.3e} (max abs {:.3e}) against {} fp32, tolerance {:.0e}",
        result.rel_l2, result.max_abs, env.backend, tolerance
    ));
    if !result.agrees() {
        run.record.message = Some(format!(
            "output {:.2e} from the strict-FP32 output of the same backend (tolerance {tolerance:.0e})",
            result.rel_l2
        ));
    }
    Ok(())
}

/// Compares the output with a float64 CPU evaluation at a small size (float64 on the CPU
/// costs minutes at 128^3); returns the probe for explaining a disagreement.
fn against_float64<B: KernelAutodiffBackend>(
    run: &mut Run<B>,
    case: &ProbeCase,
) -> Result<(Probe, ProbeResult)> {
    let (config, env, tolerance) = (run.config, run.env, case.tolerance);
    let small = small_probe_size(&config.unet, config.workload.size);
    run.say(&format!(
        "agreement probe: float64 reference on the CPU at {} (cached after the first run)",
        size_label(small)
    ));
    let probe = Probe::new(
        &config.unet,
        small,
        config.seed,
        config.probe_cache.as_deref(),
    )?;
    run.say(&format!(
        "agreement probe: {:?} on {} {} {}",
        probe.size, env.backend, env.precision, env.layout
    ));
    let result = probe.run::<B::InnerBackend>(case, run.device)?;
    run.record.agreement_rel_l2 = Some(result.rel_l2);
    run.record.agreement_tolerance = Some(tolerance);
    run.record.agreement_reference = Some(format!("float64 cpu at {}", size_label(small)));
    run.say(&format!(
        "agreement: rel. L2 {:.3e} (max abs {:.3e}) against float64, tolerance {:.0e}",
        result.rel_l2, result.max_abs, tolerance
    ));
    Ok((probe, result))
}

/// Keeps this backend's strict-FP32 output at the benchmarked size: the reference of its
/// other precisions there.
fn keep_fp32_output<B: KernelAutodiffBackend>(
    run: &mut Run<B>,
    case: &ProbeCase,
    path: &Path,
) -> Result<()> {
    let config = run.config;
    let at_size = Probe::against(&config.unet, config.workload.size, config.seed, Vec::new())?;
    let out = at_size.output::<B::InnerBackend>(case, run.device)?;
    write_f64(path, &out)?;
    run.say(&format!(
        "kept the strict-FP32 output at {} as the other precisions' reference: {}",
        size_label(config.workload.size),
        path.display()
    ));
    Ok(())
}

/// Names the first operation whose output was NaN or infinite.
fn locate_non_finite<B: KernelAutodiffBackend>(
    run: &mut Run<B>,
    probe: &Probe,
    case: &ProbeCase,
) -> Result<()> {
    run.say("the output is not finite: locating the first operation that produced NaN or infinity");
    let place = probe
        .locate_non_finite::<B::InnerBackend>(case, run.device)?
        .unwrap_or_else(|| {
            "no single operation (every output was finite when run one by one)".into()
        });
    run.say(&format!("first non-finite output: {place}"));
    run.record.message = Some(format!("non-finite output, first at: {place}"));
    Ok(())
}

/// Compares every operation's output with the float64 pass's, names the first that deviates,
/// and writes every deviation to `locate-<backend>-<precision>-<layout>.json` in `dir`.
fn locate_deviation<B: KernelAutodiffBackend>(
    run: &mut Run<B>,
    probe: &Probe,
    case: &ProbeCase,
    dir: &Path,
) -> Result<()> {
    run.say("locating the first operation whose output deviates from float64");
    let located = probe.locate_deviation::<B::InnerBackend>(case, run.device)?;
    if let Some(i) = located.first_over() {
        print_deviations(run, &located, i);
    }
    let summary = located.summary();
    run.say(&summary);
    let path = write_located(run, &located, dir)?;
    run.say(&format!("per-operation deviations: {}", path.display()));
    run.record.message = Some(summary);
    Ok(())
}

/// The operations around the first over the tolerance, `i`, with their deviations.
fn print_deviations<B: KernelAutodiffBackend>(run: &mut Run<B>, located: &Located, i: usize) {
    for (j, o) in located
        .ops
        .iter()
        .enumerate()
        .skip(i.saturating_sub(3))
        .take(7)
    {
        run.say(&format!(
            "  {:>4} {:<22} {:<24} deviation {:.2e}{}",
            j + 1,
            o.op,
            format!("{:?}", o.dims),
            o.deviation,
            if j == i {
                "  <- first over tolerance"
            } else {
                ""
            }
        ));
    }
}

/// Writes the per-operation deviations into `dir`; returns the file.
fn write_located<B: KernelAutodiffBackend>(
    run: &Run<B>,
    located: &Located,
    dir: &Path,
) -> Result<PathBuf> {
    let env = run.env;
    std::fs::create_dir_all(dir).map_err(Error::io(FileAction::CreateDir, dir))?;
    let path = dir.join(format!(
        "locate-{}-{}-{}.json",
        env.backend, env.precision, env.layout
    ));
    medddpm_atomic::write(&path, &serde_json::to_vec_pretty(located)?)
        .map_err(Error::io(FileAction::Write, &path))?;
    Ok(path)
}
