//! `medddpm prepare`: raw scans to the folders `medddpm train` reads.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use anyhow::bail;
use clap::{Args, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use medddpm_prepare::brats::{prepare_brats, BratsConfig};
use medddpm_prepare::head_mask::{prepare_head_masks, HeadMaskConfig, HeadMaskSettings};
use medddpm_prepare::real_demo::{prepare_real_demo, RealDemoConfig};
use medddpm_prepare::whole_head::{prepare_whole_head, Scaling, WholeHeadConfig};
use medddpm_prepare::{CaseDetails, CaseProblem, PrepareError, Progress, Report, REPORT_FILE};
use serde::Serialize;

#[derive(Debug, Args)]
pub struct PrepareArgs {
    #[command(subcommand)]
    command: PrepareCommand,
}

#[derive(Debug, Subcommand)]
enum PrepareCommand {
    /// Raw BraTS 2021 cases (<case>/<case>_{t1,t1ce,t2,flair,seg}.nii.gz) to the layout the
    /// `brats` data source reads: centre crop to 192x192x144, modalities min-max scaled to
    /// [-1, 1], seg 4 -> 3 and brain label 4 where the T1 is above its background.
    Brats(BratsArgs),
    /// Image/mask pairs (paired by file name) resampled to the model grid in the whole-head
    /// layout (OUT/{image,mask}/<name>.nii.gz), mask labels checked.
    WholeHead(WholeHeadArgs),
    /// Head (and brain) label maps from T1 images by Otsu thresholds and morphology:
    /// 0 background, 1 head, 2 brain (with --brain).
    HeadMask(HeadMaskArgs),
    /// A labelled demo set (0 background, 1 head, 2 brain) from the MNI152 and Colin27 files
    /// scripts/fetch-real-data.sh fetches, with augmented copies on a small grid.
    RealDemo(RealDemoArgs),
}

/// Options every subcommand has.
#[derive(Debug, Args)]
struct Common {
    /// Output folder (created if needed; existing outputs are refused unless --overwrite).
    #[arg(long)]
    out: PathBuf,
    /// Replace outputs that already exist.
    #[arg(long)]
    overwrite: bool,
    /// Cases prepared at once (default: the machine's cores, up to 4).
    #[arg(long, default_value_t = 0, hide_default_value = true)]
    jobs: usize,
}

#[derive(Debug, Args)]
pub struct BratsArgs {
    /// Folder of raw case folders.
    #[arg(long)]
    raw: PathBuf,
    /// Only these cases: one case id per line, no header (e.g. the reference's
    /// selected_samples.csv); listed ids that are absent are reported.
    #[arg(long)]
    cases: Option<PathBuf>,
    /// Grid after the centre crop/pad, I,J,K.
    #[arg(long, value_parser = parse_grid, default_value = "192,192,144")]
    grid: [usize; 3],
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ScaleArg {
    /// Intensities as read (the trainer normalises them).
    None,
    /// Whole-volume min-max to [-1, 1].
    MinusOneOne,
}

#[derive(Debug, Args)]
pub struct WholeHeadArgs {
    /// Folder of images.
    #[arg(long)]
    images: PathBuf,
    /// Folder of label maps, named like their images.
    #[arg(long)]
    masks: PathBuf,
    /// Model grid, I,J,K (or one size for a cube).
    #[arg(long, value_parser = parse_grid, default_value = "128,128,128")]
    grid: [usize; 3],
    /// Voxel size in mm (MM or MM,MM,MM): the grid is centred on the volume at this spacing,
    /// cropping or padding the field of view. Default: keep the field of view.
    #[arg(long, value_parser = parse_spacing)]
    spacing: Option<[f64; 3]>,
    /// Labels a mask may hold; a case with others is skipped.
    #[arg(long, value_delimiter = ',', default_value = "0,1,2")]
    labels: Vec<i64>,
    /// Intensity scaling of the images.
    #[arg(long, value_enum, default_value = "none")]
    scale: ScaleArg,
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, Args)]
pub struct HeadMaskArgs {
    /// Folder of T1 images.
    #[arg(long)]
    images: PathBuf,
    /// Also label the brain (2) inside the head (1).
    #[arg(long)]
    brain: bool,
    /// Radius (mm) of the closing that smooths the head.
    #[arg(long, default_value_t = HeadMaskSettings::default().closing_mm)]
    closing_mm: f64,
    /// Radius (mm) of the smaller closing of the head that bounds the brain search (keeps
    /// sinus air out of the brain threshold).
    #[arg(long, default_value_t = HeadMaskSettings::default().brain_head_closing_mm)]
    brain_head_closing_mm: f64,
    /// Depth (mm) below the head's surface where the brain threshold and core are sought.
    #[arg(long, default_value_t = HeadMaskSettings::default().brain_erosion_mm)]
    brain_erosion_mm: f64,
    /// Otsu classes inside the eroded head: 2 for whole-head T1s, 3 for skull-stripped ones.
    #[arg(long, default_value_t = HeadMaskSettings::default().brain_classes)]
    brain_classes: usize,
    /// Radius (mm) of the opening that detaches the brain from its surroundings.
    #[arg(long, default_value_t = HeadMaskSettings::default().brain_opening_mm)]
    brain_opening_mm: f64,
    /// Radius (mm) of the closing that takes in the sulci.
    #[arg(long, default_value_t = HeadMaskSettings::default().brain_closing_mm)]
    brain_closing_mm: f64,
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, Args)]
pub struct RealDemoArgs {
    /// Folder holding mni152-2009/ and colin27/ (scripts/fetch-real-data.sh's --dest).
    #[arg(long)]
    data: PathBuf,
    /// Augmented copies per subject.
    #[arg(long, default_value_t = RealDemoConfig::default().copies)]
    copies: usize,
    /// Output grid, I,J,K (or one size for a cube).
    #[arg(long, value_parser = parse_grid, default_value = "32,32,32")]
    grid: [usize; 3],
    /// Seed of the augmentations.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Space (mm) kept around the head's bounding box.
    #[arg(long, default_value_t = RealDemoConfig::default().margin_mm)]
    margin_mm: f64,
    /// Output folder (created if needed; existing outputs are refused unless --overwrite).
    #[arg(long)]
    out: PathBuf,
    /// Replace outputs that already exist.
    #[arg(long)]
    overwrite: bool,
}

fn parse_grid(s: &str) -> Result<[usize; 3], String> {
    let v: Vec<usize> = s
        .split(',')
        .map(|x| x.trim().parse::<usize>().map_err(|e| format!("'{x}': {e}")))
        .collect::<Result<_, _>>()?;
    match v[..] {
        [n] if n > 0 => Ok([n; 3]),
        [i, j, k] if i > 0 && j > 0 && k > 0 => Ok([i, j, k]),
        _ => Err(format!(
            "'{s}': expected I,J,K (or one size), each at least 1"
        )),
    }
}

fn parse_spacing(s: &str) -> Result<[f64; 3], String> {
    let v: Vec<f64> = s
        .split(',')
        .map(|x| x.trim().parse::<f64>().map_err(|e| format!("'{x}': {e}")))
        .collect::<Result<_, _>>()?;
    let ok = |x: f64| x.is_finite() && x > 0.0;
    match v[..] {
        [a] if ok(a) => Ok([a; 3]),
        [a, b, c] if ok(a) && ok(b) && ok(c) => Ok([a, b, c]),
        _ => Err(format!("'{s}': expected MM or MM,MM,MM, each above 0")),
    }
}

pub fn run(args: PrepareArgs) -> anyhow::Result<()> {
    match args.command {
        PrepareCommand::Brats(a) => {
            let config = BratsConfig {
                grid: a.grid,
                jobs: a.common.jobs,
                overwrite: a.common.overwrite,
                ..BratsConfig::default()
            };
            with_bar("brats", &a.common.out, |bar| {
                prepare_brats(&a.raw, &a.common.out, a.cases.as_deref(), &config, bar)
            })
        }
        PrepareCommand::WholeHead(a) => {
            let config = WholeHeadConfig {
                grid: a.grid,
                spacing: a.spacing,
                labels: a.labels,
                scale: match a.scale {
                    ScaleArg::None => Scaling::None,
                    ScaleArg::MinusOneOne => Scaling::MinusOneOne,
                },
                jobs: a.common.jobs,
                overwrite: a.common.overwrite,
            };
            with_bar("whole-head", &a.common.out, |bar| {
                prepare_whole_head(&a.images, &a.masks, &a.common.out, &config, bar)
            })
        }
        PrepareCommand::HeadMask(a) => {
            let config = HeadMaskConfig {
                settings: HeadMaskSettings {
                    brain: a.brain,
                    closing_mm: a.closing_mm,
                    brain_head_closing_mm: a.brain_head_closing_mm,
                    brain_erosion_mm: a.brain_erosion_mm,
                    brain_classes: a.brain_classes,
                    brain_opening_mm: a.brain_opening_mm,
                    brain_closing_mm: a.brain_closing_mm,
                    ..HeadMaskSettings::default()
                },
                jobs: a.common.jobs,
                overwrite: a.common.overwrite,
            };
            with_bar("head-mask", &a.common.out, |bar| {
                prepare_head_masks(&a.images, &a.common.out, &config, bar)
            })
        }
        PrepareCommand::RealDemo(a) => {
            let config = RealDemoConfig {
                copies: a.copies,
                grid: a.grid,
                seed: a.seed,
                margin_mm: a.margin_mm,
                overwrite: a.overwrite,
                ..RealDemoConfig::default()
            };
            with_bar("real-demo", &a.out, |bar| {
                prepare_real_demo(&a.data, &a.out, &config, bar)
            })
        }
    }
}

/// Runs `prepare` with a bar over its cases, then prints the summary; fails when no case could
/// be prepared.
fn with_bar<S: Serialize, D: CaseDetails>(
    what: &'static str,
    out: &Path,
    prepare: impl FnOnce(&mut CaseBar) -> Result<Report<S, D>, PrepareError>,
) -> anyhow::Result<()> {
    let mut bar = CaseBar::new(what);
    let report = prepare(&mut bar)?;
    bar.bar.finish_and_clear();
    println!("{}", report.summary());
    println!("report: {}", out.join(REPORT_FILE).display());
    if report.cases_done == 0 {
        bail!(
            "no case could be prepared ({} skipped; reasons above and in {})",
            report.cases_skipped,
            out.join(REPORT_FILE).display()
        );
    }
    Ok(())
}

/// A bar over cases, or one line per case when stderr is not a terminal.
struct CaseBar {
    what: &'static str,
    bar: ProgressBar,
    plain: bool,
    done: usize,
    total: usize,
}

impl CaseBar {
    fn new(what: &'static str) -> Self {
        Self {
            what,
            bar: ProgressBar::hidden(),
            plain: !std::io::stderr().is_terminal(),
            done: 0,
            total: 0,
        }
    }
}

impl Progress for CaseBar {
    fn started(&mut self, total: usize) {
        self.total = total;
        if !self.plain {
            self.bar = ProgressBar::new(total as u64);
            self.bar.set_style(
                ProgressStyle::with_template(
                    "prepare {prefix} {bar:30} {pos}/{len} cases  {msg}  [{elapsed_precise} < {eta_precise}]",
                )
                .expect("valid template"),
            );
            self.bar.set_prefix(self.what);
        }
    }

    fn finished(&mut self, case: &str, problem: Option<&CaseProblem>) {
        self.done += 1;
        let outcome = if problem.is_some() { "skipped" } else { "done" };
        if self.plain {
            eprintln!(
                "prepare {} {}/{} {case} {outcome}",
                self.what, self.done, self.total
            );
        } else {
            self.bar.set_message(format!("{case} {outcome}"));
            self.bar.inc(1);
        }
    }
}
