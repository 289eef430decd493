//! The driver of `medddpm bench` and `medddpm check`: every configuration of the matrix in its
//! own child process, each record appended to the JSON lines as it finishes, then the reports.

use std::path::PathBuf;

use crate::error::{Error, FileAction, Result};
use crate::matrix::{placeholder, run_cell, Cell, ChildSpec};
use crate::options::BenchOptions;
use crate::record::{BenchRecord, RecordStatus};
use crate::report::{append_jsonl, read_jsonl, to_csv, to_markdown, write_png_chart};
use crate::single::SingleConfig;

/// What a bench run leaves its caller to show: the table of each configuration's latest
/// record, where the reports went, and which configurations failed or disagreed.
#[derive(Debug)]
pub struct BenchReport {
    /// The reports' table as Markdown (also `results.md`).
    pub markdown: String,
    /// The folder of `results.{jsonl,csv,md,png}`.
    pub out: PathBuf,
    outcome: Outcome,
}

impl BenchReport {
    /// An error naming this run's configurations that failed or disagreed, so that scripts and
    /// CI see them (the reports are written either way).
    pub fn into_result(self) -> Result<()> {
        self.outcome.into_result()
    }
}

/// Runs the benchmark `options` ask for. `command` is how to start this program's `bench`
/// subcommand again (for the child processes). `None` when this process is one
/// configuration's child (its record is its output).
pub fn run_bench(options: BenchOptions, command: Vec<String>) -> Result<Option<BenchReport>> {
    if let Some(config_path) = &options.single_config {
        crate::child::run_single(&options, config_path)?;
        return Ok(None);
    }
    std::fs::create_dir_all(&options.out)
        .map_err(Error::io(FileAction::CreateOut, &options.out))?;
    // This run's configurations that failed or disagreed (the JSON lines may hold earlier runs').
    let mut outcome = Outcome::default();
    if !options.report_only {
        let config = single_config(&options)?;
        run_matrix(&options, &config, command, &mut outcome)?;
    }
    let records = write_reports(&options)?;
    Ok(Some(BenchReport {
        markdown: to_markdown(&records),
        out: options.out,
        outcome,
    }))
}

/// What every configuration's child measures, once the options are known to be runnable.
fn single_config(options: &BenchOptions) -> Result<SingleConfig> {
    let unet = options.workload.model.config();
    unet.validate()?;
    options.validate(&unet)?;
    Ok(SingleConfig {
        workload: options.workload,
        unet,
        warmup: options.warmup,
        steps: options.steps,
        lr: 1e-5,
        breakdown: options.breakdown,
        check_only: options.check_only,
        seed: options.seed,
        conv_engine: options.conv_engine,
        norm_engine: options.norm_engine,
        probe_cache: Some(
            options
                .tune_cache
                .clone()
                .unwrap_or_else(medddpm_backend::default_tune_cache)
                .join("probe-reference"),
        ),
        locate: options.locate.then(|| options.out.clone()),
        host_profile: options.host_profile.then(|| options.out.clone()),
        cuda_graphs: options.cuda_graphs,
    })
}

/// The configurations of this run that failed or disagreed.
#[derive(Debug, Default)]
struct Outcome {
    failed: Vec<Cell>,
    disagreeing: Vec<Cell>,
}

impl Outcome {
    fn note(&mut self, cell: Cell, status: RecordStatus) {
        match status {
            RecordStatus::Failed => self.failed.push(cell),
            RecordStatus::Disagrees => self.disagreeing.push(cell),
            RecordStatus::Ok | RecordStatus::Unsupported => {}
        }
    }

    fn into_result(self) -> Result<()> {
        if self.failed.is_empty() && self.disagreeing.is_empty() {
            Ok(())
        } else {
            Err(Error::Configurations {
                failed: self.failed,
                disagreeing: self.disagreeing,
            })
        }
    }
}

/// Runs every backend x precision x layout of `options`, each in its own child process,
/// appending each record to results.jsonl as it comes.
fn run_matrix(
    options: &BenchOptions,
    config: &SingleConfig,
    command: Vec<String>,
    outcome: &mut Outcome,
) -> Result<()> {
    let spec = ChildSpec {
        command,
        timeout: options.timeout,
        tune_cache: options.tune_cache.clone(),
        shipped_tuning: options.shipped_tuning,
    };
    let jsonl = options.out.join("results.jsonl");
    for &backend in &options.backends {
        let backend = backend.resolve();
        for &precision in &options.precisions {
            for &layout in &options.layouts {
                let cell = Cell {
                    backend,
                    precision,
                    layout,
                };
                let record = run_one(&spec, cell, config, options);
                outcome.note(cell, record.status);
                append_jsonl(&jsonl, &record)?;
            }
        }
    }
    Ok(())
}

/// One cell of the matrix, announced before and after.
fn run_one(
    spec: &ChildSpec,
    cell: Cell,
    config: &SingleConfig,
    options: &BenchOptions,
) -> BenchRecord {
    let Cell {
        backend,
        precision,
        layout,
    } = cell;
    log::info!("== {backend} / {precision} / {layout}");
    let record = if backend.compiled_in() {
        run_cell(spec, cell, config, &options.out)
    } else {
        placeholder(
            cell,
            config,
            RecordStatus::Unsupported,
            format!("the {backend} backend is not compiled into this binary"),
        )
    };
    log::info!(
        "== {backend} / {precision} / {layout}: {:?}{}",
        record.status,
        record
            .full_message()
            .map(|m| format!(" ({m})"))
            .unwrap_or_default()
    );
    record
}

/// Keeps the last record of each configuration (reruns replace earlier results).
fn latest_per_configuration(records: Vec<BenchRecord>) -> Vec<BenchRecord> {
    let mut out: Vec<BenchRecord> = Vec::new();
    for r in records {
        let same = |o: &BenchRecord| {
            o.backend == r.backend
                && o.precision == r.precision
                && o.layout == r.layout
                && o.model == r.model
                && o.size == r.size
                && o.batch == r.batch
        };
        if let Some(i) = out.iter().position(same) {
            out.remove(i);
        }
        out.push(r);
    }
    out
}

/// Rewrites results.csv, results.md and results.png from results.jsonl.
pub fn write_reports(options: &BenchOptions) -> Result<Vec<BenchRecord>> {
    let out = &options.out;
    let mut records = latest_per_configuration(read_jsonl(&out.join("results.jsonl"))?);
    if let Some(gpu) = options.pytorch_reference.as_deref() {
        records.extend(crate::reference::pytorch_reference(gpu)?);
    }
    let title = options.title.clone().unwrap_or_else(|| {
        let r = records.first();
        format!(
            "Med-DDPM U-Net ({}, {}), batch {}",
            r.map_or("?".into(), |r| r.model.to_string()),
            r.map_or("?".into(), |r| r.size.map(|s| s.to_string()).join("x")),
            r.map_or(1, |r| r.batch)
        )
    });
    let write = |name: &str, bytes: &[u8]| {
        let path = out.join(name);
        medddpm_atomic::write(&path, bytes).map_err(Error::io(FileAction::Write, &path))
    };
    write("results.csv", to_csv(&records).as_bytes())?;
    write(
        "results.md",
        format!("# {title}\n\n{}", to_markdown(&records)).as_bytes(),
    )?;
    write_png_chart(&records, &out.join("results.png"), &title)?;
    Ok(records)
}
