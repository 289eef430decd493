//! `medddpm check-kernels --collective-devices`: the all-reduce that averages the gradients of
//! data-parallel training (NCCL on CUDA), one thread per device, against known means.

use anyhow::bail;
use burn::tensor::backend::{Device as _, DeviceId, DeviceOps};
use medddpm_backend::{BackendKind, BackendTask, KernelAutodiffBackend, RunEnv};
use medddpm_kernels::collective::{check_all_reduce, CollectiveCheck};

/// Which devices form the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceList {
    /// Every CUDA device the process sees.
    All,
    /// These device indices.
    Indices(Vec<u16>),
}

/// `all`, or device indices separated by commas (`0,1`).
pub fn parse_devices(s: &str) -> Result<DeviceList, String> {
    if s.trim() == "all" {
        return Ok(DeviceList::All);
    }
    let indices = s
        .split(',')
        .map(|part| {
            part.trim()
                .parse::<u16>()
                .map_err(|_| format!("`{part}` is not a device index (use e.g. `0,1` or `all`)"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut sorted = indices.clone();
    sorted.sort_unstable();
    if sorted.windows(2).any(|w| w[0] == w[1]) {
        return Err(format!("a device is listed twice in `{s}`"));
    }
    Ok(DeviceList::Indices(indices))
}

pub struct Task {
    pub devices: DeviceList,
}

impl BackendTask for Task {
    type Output = CollectiveCheck;
    type Error = anyhow::Error;
    fn run<B: KernelAutodiffBackend>(
        self,
        device: B::Device,
        env: &RunEnv,
    ) -> anyhow::Result<CollectiveCheck> {
        let own = device.id();
        let indices = match self.devices {
            DeviceList::Indices(indices) => indices,
            DeviceList::All if env.backend == BackendKind::Cuda => {
                let count = medddpm_kernels::collective::cuda_device_count()?;
                (0..count.min(u16::MAX as usize) as u16).collect()
            }
            // Other backends have no collective: the check says so.
            DeviceList::All => vec![own.index_id],
        };
        if indices.is_empty() {
            bail!("no devices to check the all-reduce on");
        }
        let devices: Vec<B::Device> = indices
            .iter()
            .map(|&i| B::Device::from_id(DeviceId::new(own.type_id, i)))
            .collect();
        if env.backend == BackendKind::Cuda {
            match medddpm_kernels::collective::nccl_status() {
                Ok(v) => eprintln!("{v}"),
                Err(e) => bail!("{e}"),
            }
        }
        eprintln!(
            "all-reduce (mean) over {} device(s) {indices:?}, one thread each",
            devices.len()
        );
        Ok(check_all_reduce::<B::InnerBackend>(&devices)?)
    }
}

/// Prints one line per row and a summary; the number of rows outside tolerance.
pub fn print(check: &CollectiveCheck) -> usize {
    for r in &check.rows {
        eprintln!(
            "call {} {} {:?} {}: error {:.2e} (tolerance {:.0e}){} {}",
            r.call,
            r.dtype,
            r.shape,
            r.input,
            r.error,
            r.tolerance,
            if r.input_kept {
                ""
            } else {
                ", CALLER'S INPUT CHANGED"
            },
            super::verdict(r.pass)
        );
    }
    let failed = check.failed();
    println!(
        "{}: {} of {} all-reduce cases within tolerance",
        check.collective,
        check.rows.len() - failed,
        check.rows.len()
    );
    failed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_lists_parse() {
        assert_eq!(parse_devices("all"), Ok(DeviceList::All));
        assert_eq!(parse_devices("0"), Ok(DeviceList::Indices(vec![0])));
        assert_eq!(parse_devices("1, 0"), Ok(DeviceList::Indices(vec![1, 0])));
        assert!(parse_devices("0,x")
            .unwrap_err()
            .contains("`x` is not a device index"));
        assert!(parse_devices("").is_err());
        assert!(parse_devices("0,1,0").unwrap_err().contains("twice"));
    }
}
