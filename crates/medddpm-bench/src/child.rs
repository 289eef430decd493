//! A configuration's child process: runs the one configuration it is given on its backend and
//! writes the record (after every phase, so a run killed mid-way leaves what it measured).

use std::path::Path;

use medddpm_backend::{run_on, BackendTask, ComputeSettings, KernelAutodiffBackend, RunEnv};

use crate::error::{Error, FileAction, Result};
use crate::matrix::{placeholder, Cell};
use crate::options::BenchOptions;
use crate::record::{BenchRecord, RecordStatus};
use crate::single::{bench_one_with_partial, SingleConfig};

/// One configuration measured in this process; with `out`, the record as it stands is written
/// there after every phase.
pub(crate) struct SingleTask<'a> {
    pub config: &'a SingleConfig,
    pub out: Option<&'a Path>,
}

impl BackendTask for SingleTask<'_> {
    type Output = BenchRecord;
    type Error = Error;
    fn run<B: KernelAutodiffBackend>(self, device: B::Device, env: &RunEnv) -> Result<BenchRecord> {
        let out = self.out;
        bench_one_with_partial::<B>(
            &device,
            env,
            self.config,
            |p| log::info!("{p}"),
            |r| {
                if let (Some(out), Ok(bytes)) = (out, serde_json::to_vec_pretty(r)) {
                    let _ = medddpm_atomic::write(out, &bytes);
                }
            },
        )
    }
}

/// The child's side of `run_bench`: runs the configuration in `config_path` on the one
/// backend, precision and layout of `options` and writes its record to `options.single_out`
/// (an unsupported or failed one when the run could not be made).
pub(crate) fn run_single(options: &BenchOptions, config_path: &Path) -> Result<()> {
    let out = options
        .single_out
        .as_deref()
        .ok_or(Error::SingleRun("--single-config needs --single-out"))?;
    let text =
        std::fs::read_to_string(config_path).map_err(Error::io(FileAction::Read, config_path))?;
    let config: SingleConfig = serde_json::from_str(&text).map_err(|source| Error::Parse {
        path: config_path.to_path_buf(),
        source,
    })?;
    let cell = the_cell(options)?;
    let settings = ComputeSettings {
        backend: cell.backend,
        precision: Some(cell.precision),
        layout: cell.layout,
        conv_engine: config.conv_engine,
        norm_engine: config.norm_engine,
        tune_cache: options.tune_cache.clone(),
        show_tuning: true,
        shipped_tuning: options.shipped_tuning,
        ..Default::default()
    };
    let task = SingleTask {
        config: &config,
        out: Some(out),
    };
    let record = match run_on(&settings, task) {
        Ok(r) => r,
        Err(e) => {
            let status = if e.is_unsupported() {
                RecordStatus::Unsupported
            } else {
                RecordStatus::Failed
            };
            log::error!("{status:?}: {}", e.chain());
            placeholder(cell, &config, status, e.chain())
        }
    };
    medddpm_atomic::write(out, &serde_json::to_vec_pretty(&record)?)
        .map_err(Error::io(FileAction::Write, out))
}

/// The one backend, precision and layout a child runs.
fn the_cell(options: &BenchOptions) -> Result<Cell> {
    let [backend] = options.backends[..] else {
        return Err(Error::SingleRun("one backend per single run"));
    };
    let [precision] = options.precisions[..] else {
        return Err(Error::SingleRun("one precision per single run"));
    };
    let [layout] = options.layouts[..] else {
        return Err(Error::SingleRun("one layout per single run"));
    };
    Ok(Cell {
        backend,
        precision,
        layout,
    })
}
