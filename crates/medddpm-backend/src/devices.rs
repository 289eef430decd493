//! Which devices a run uses and how their replicas average gradients: the `--devices` list
//! checked against the backend and the machine, and `--collective` resolved (never `auto`
//! after this).

use medddpm_kernels::{Collective, CollectiveUnavailable, Launch};

use crate::{BackendKind, Error};

/// Checks a device list before anything starts: at least one device, none twice, and only
/// the default device (`0`) on a backend other than CUDA (the CPU backend is one device; wgpu
/// runs on its default adapter), except for the CPU with `--launch processes`: a process per
/// listed index, each with the whole CPU backend (the multi-process path, tested without a
/// GPU; not faster).
pub(crate) fn check_devices(
    backend: BackendKind,
    devices: &[usize],
    launch: Launch,
) -> Result<(), Error> {
    if devices.is_empty() {
        return Err(Error::NoDevicesListed);
    }
    for (i, &device) in devices.iter().enumerate() {
        if devices[..i].contains(&device) {
            return Err(Error::DuplicateDevice {
                device,
                devices: devices.to_vec(),
            });
        }
    }
    let cpu_processes = backend == BackendKind::Cpu && launch == Launch::Processes;
    if backend != BackendKind::Cuda && devices != [0] && !cpu_processes {
        return Err(Error::DevicesNeedCuda {
            backend,
            devices: devices.to_vec(),
        });
    }
    Ok(())
}

/// Checks that every listed device exists among the `count` the backend sees.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn check_count(
    backend: BackendKind,
    devices: &[usize],
    count: usize,
) -> Result<(), Error> {
    match devices.iter().find(|&&d| d >= count) {
        Some(&device) => Err(Error::NoSuchDevice {
            backend,
            device,
            count,
        }),
        None => Ok(()),
    }
}

/// `--collective` resolved for `devices` devices of `backend`, with the line to print about it
/// (none where there is nothing to average). `nccl` says whether NCCL loads: `Ok` with what
/// loaded (e.g. its version), or why not; it is asked only on CUDA with several devices.
///
/// - One device: `host` (nothing to average; no collective runs), unless `nccl` is asked for
///   by name on CUDA: a group of one, which runs the multi-device path and its all-reduce on
///   one GPU (to check it and measure what it costs).
/// - CUDA, several devices: `auto` is NCCL when it loads, else the host, saying why; `nccl`
///   where it does not load is [`Error::Nccl`].
/// - Other backends run one device ([`check_devices`]); should several reach here, the host.
pub(crate) fn resolve_collective(
    backend: BackendKind,
    requested: Collective,
    devices: usize,
    nccl: impl FnOnce() -> Result<String, CollectiveUnavailable>,
) -> Result<(Collective, Option<String>), Error> {
    let group_of_one = backend == BackendKind::Cuda && requested == Collective::Nccl;
    if devices <= 1 && !group_of_one {
        return Ok((Collective::Host, None));
    }
    if backend != BackendKind::Cuda || requested == Collective::Host {
        let line = format!(
            "gradients averaged over {devices} devices: through the host (--collective {})",
            name(requested)
        );
        return Ok((Collective::Host, Some(line)));
    }
    match nccl() {
        Ok(what) => Ok((
            Collective::Nccl,
            Some(format!(
                "gradients averaged over {devices} devices: NCCL all-reduce ({what}; --collective {})",
                name(requested)
            )),
        )),
        Err(why) if requested == Collective::Auto => Ok((
            Collective::Host,
            Some(format!(
                "gradients averaged over {devices} devices: through the host (--collective auto: {why})"
            )),
        )),
        Err(cause) => Err(Error::Nccl { cause }),
    }
}

/// `--launch` resolved for `devices` devices of `backend`: one device is never split; `auto`
/// is a process per device on CUDA, threads elsewhere.
pub(crate) fn resolve_launch(backend: BackendKind, requested: Launch, devices: usize) -> Launch {
    match requested {
        _ if devices <= 1 => Launch::Threads,
        Launch::Auto if backend == BackendKind::Cuda => Launch::Processes,
        Launch::Auto => Launch::Threads,
        other => other,
    }
}

/// The lower-case name `--collective` takes.
fn name(collective: Collective) -> &'static str {
    match collective {
        Collective::Auto => "auto",
        Collective::Nccl => "nccl",
        Collective::Host => "host",
    }
}

/// [`Error::OneDevice`] for `command` unless `devices` is one device.
pub(crate) fn one_device(command: &str, devices: &[usize]) -> Result<(), Error> {
    if devices.len() > 1 {
        return Err(Error::OneDevice {
            command: command.to_string(),
            devices: devices.to_vec(),
        });
    }
    Ok(())
}

/// Whether NCCL loads on this machine: `Ok` with its version, or why not (and how to provide
/// it).
pub(crate) fn nccl_status() -> Result<String, CollectiveUnavailable> {
    medddpm_kernels::collective::nccl_status()
}

/// How many CUDA devices the driver reports; `None` where the driver does not start (then
/// opening the first device says why, as for one device).
#[cfg(feature = "cuda")]
pub(crate) fn cuda_device_count() -> Option<usize> {
    medddpm_kernels::panics::quiet_catch(|| {
        cudarc::driver::result::init().ok()?;
        cudarc::driver::result::device::get_count().ok()
    })
    .ok()
    .flatten()
    .map(|n| n.max(0) as usize)
}
