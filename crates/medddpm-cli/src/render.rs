//! `medddpm render`: pictures of volumes, without another program.

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use medddpm_nifti::Volume;
use medddpm_render::{
    montage, sweep_frames, MontageOptions, Plane, RgbImage, Row, SweepOptions, Window,
};

#[derive(Debug, Clone, Copy, ValueEnum)]
enum PlaneArg {
    Axial,
    Coronal,
    Sagittal,
}

#[derive(Debug, Args)]
pub struct RenderArgs {
    /// Volumes (NIfTI), one row each, top to bottom: e.g. the real image, then samples.
    #[arg(required = true)]
    volumes: Vec<PathBuf>,
    /// A label map on the volumes' grid, outlined on every row (label 1 green, 2 red, ...).
    #[arg(long)]
    mask: Option<PathBuf>,
    /// Row titles, comma-separated (default: the file names).
    #[arg(long, value_delimiter = ',')]
    titles: Option<Vec<String>>,
    /// The three-plane montage (PNG; radiological display: the subject's right on the left); a
    /// name ending in `.png`, so that no file of another kind (a volume) is ever replaced.
    #[arg(long)]
    out: PathBuf,
    /// Also an animated GIF sweeping through the slices of one plane, all rows together; a name
    /// ending in `.gif`.
    #[arg(long)]
    gif: Option<PathBuf>,
    /// The plane the GIF sweeps.
    #[arg(long, value_enum, default_value = "axial")]
    plane: PlaneArg,
    /// Grey-level window LO,HI for every row (default: [-1, 1] for volumes in that range, else
    /// each volume's 0.5-99.5 percentiles of its non-zero voxels).
    #[arg(long, value_parser = parse_window)]
    window: Option<(f64, f64)>,
}

fn parse_window(s: &str) -> Result<(f64, f64), String> {
    let (a, b) = s
        .split_once(',')
        .ok_or_else(|| format!("'{s}': expected LO,HI"))?;
    let lo: f64 = a.trim().parse().map_err(|e| format!("'{a}': {e}"))?;
    let hi: f64 = b.trim().parse().map_err(|e| format!("'{b}': {e}"))?;
    // NaN is neither below nor above anything, so it is refused too.
    if lo.partial_cmp(&hi) != Some(std::cmp::Ordering::Less) {
        return Err(format!("'{s}': LO must be below HI"));
    }
    Ok((lo, hi))
}

/// Refuses an output whose name does not end in `extension` (case aside): a picture written
/// over a volume (`--out VOL`, `--gif existing.nii.gz`) would replace the user's data.
fn picture_name(flag: &str, path: &std::path::Path, extension: &str) -> anyhow::Result<()> {
    let ok = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case(extension));
    if !ok {
        bail!(
            "{flag} {}: the picture is written as a .{extension} file; give a name ending in .{extension} (a file of another kind is never replaced)",
            path.display()
        );
    }
    Ok(())
}

pub fn run(args: RenderArgs) -> anyhow::Result<()> {
    picture_name("--out", &args.out, "png")?;
    if let Some(gif) = &args.gif {
        picture_name("--gif", gif, "gif")?;
    }
    let volumes: Vec<Volume> = args
        .volumes
        .iter()
        .map(|p| Volume::read(p).with_context(|| format!("reading {}", p.display())))
        .collect::<anyhow::Result<_>>()?;
    let mask = args
        .mask
        .as_ref()
        .map(|p| Volume::read(p).with_context(|| format!("reading {}", p.display())))
        .transpose()?;
    let titles: Vec<String> = match &args.titles {
        Some(t) if t.len() != volumes.len() => bail!(
            "--titles has {} name(s) for {} volume(s)",
            t.len(),
            volumes.len()
        ),
        Some(t) => t.clone(),
        None => args
            .volumes
            .iter()
            .map(|p| medddpm_nifti::file_name(p))
            .collect(),
    };
    let rows: Vec<Row> = volumes
        .iter()
        .zip(&titles)
        .map(|(v, t)| Row {
            title: t.clone(),
            volume: v,
            mask: mask.as_ref(),
            window: match args.window {
                Some((lo, hi)) => Window::Fixed { lo, hi },
                None => Window::auto(v),
            },
        })
        .collect();
    let picture = montage(&rows, &MontageOptions::default())?;
    medddpm_render::write_png(&args.out, &picture)?;
    eprintln!(
        "wrote {} ({}x{} px)",
        args.out.display(),
        picture.width(),
        picture.height()
    );

    if let Some(gif) = &args.gif {
        let plane = match args.plane {
            PlaneArg::Axial => Plane::Axial,
            PlaneArg::Coronal => Plane::Coronal,
            PlaneArg::Sagittal => Plane::Sagittal,
        };
        let opts = SweepOptions::default();
        let per_row: Vec<Vec<RgbImage>> = rows
            .iter()
            .map(|r| sweep_frames(r.volume, r.mask, plane, r.window, &opts))
            .collect::<Result<_, _>>()?;
        let frames = stack_rows(&per_row)?;
        medddpm_render::frames_gif(&frames, opts.delay_ms, gif)?;
        eprintln!("wrote {} ({} frames)", gif.display(), frames.len());
    }
    Ok(())
}

/// Frame n of every row, stacked top to bottom (rows may differ in slice count: a shorter row
/// holds its last slice).
fn stack_rows(rows: &[Vec<RgbImage>]) -> anyhow::Result<Vec<RgbImage>> {
    let count = rows.iter().map(Vec::len).max().unwrap_or(0);
    let width = rows
        .iter()
        .filter_map(|r| r.first())
        .map(RgbImage::width)
        .max()
        .unwrap_or(0);
    let mut frames = Vec::with_capacity(count);
    for n in 0..count {
        let parts: Vec<&RgbImage> = rows
            .iter()
            .filter_map(|r| r.get(n).or_else(|| r.last()))
            .collect();
        let height = parts.iter().map(|p| p.height()).sum();
        let mut frame = RgbImage::new(width, height);
        let mut y = 0;
        for p in parts {
            frame.blit(p, 0, y);
            y += i64::from(p.height());
        }
        frames.push(frame);
    }
    Ok(frames)
}
