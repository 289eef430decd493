//! `medddpm eval`: generated volumes against real ones, by mask, and against the training set
//! (`memorisation`: is the synthetic data new?).

mod memorisation;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::Args;
use medddpm_metrics::{
    evaluate, EvalInput, EvalReport, MsSsimOptions, NamedImage, NamedLabels, NamedVolume,
};
use medddpm_nifti::{Normalization, Volume};
use medddpm_train::data::list_masks;
use medddpm_train::data::nifti_stem;
use medddpm_train::sample::case_id;

#[derive(Debug, Args)]
pub struct EvalArgs {
    /// A mask file or a folder of masks (*.nii, *.nii.gz): the label maps the volumes belong to.
    /// Optional with --train-dir, which then runs alone.
    #[arg(long, required_unless_present = "train_dir")]
    masks: Option<PathBuf>,
    /// Generated volumes (a file or a folder), named `<mask>_seed-<s>_sample-<n>.nii.gz` as
    /// `medddpm sample` writes them (any `<mask>_..._sample-<n>` pairs with `<mask>`). Without
    /// --masks, every volume of the folder, named as you like.
    #[arg(long)]
    synthetic: PathBuf,
    /// Real volumes (a file or a folder), named like their mask (`<mask>.nii.gz`, or
    /// `<mask>_<anything>.nii.gz`). Without them only diversity is computed.
    #[arg(long, requires = "masks")]
    real: Option<PathBuf>,
    /// Is the data new? The training set to compare every synthetic volume with (its nearest
    /// training volume by SSIM inside the head, and the fraction of near-copies): a folder as
    /// `medddpm train` reads it (whole-head with image/ and mask/, BraTS) or of images.
    #[arg(long)]
    train_dir: Option<PathBuf>,
    /// How training intensities are brought to [-1, 1]; the values of --real-normalization.
    /// Pick the mode the model was trained with (whole-head: reference-per-slice).
    #[arg(long, default_value = "auto")]
    train_normalization: String,
    /// A training volume at this SSIM or above makes a near-copy (library default 0.95).
    #[arg(long)]
    near_copy_ssim: Option<f64>,
    /// A training volume at this correlation or above makes a near-copy (library default
    /// 0.98; catches copies with other intensities).
    #[arg(long)]
    near_copy_correlation: Option<f64>,
    /// Training volumes per synthetic volume compared at full resolution after the coarse
    /// correlation prefilter; 0 compares every pair (library default 5).
    #[arg(long)]
    memorisation_candidates: Option<usize>,
    /// Only files whose name ends in `_<CHANNEL>` (multi-channel samples, e.g. `t1`).
    #[arg(long)]
    channel: Option<String>,
    /// How real intensities are brought to the samples' [-1, 1]: `none`, `volume-minmax`,
    /// `reference-per-slice`, `percentile` (0.5-99.5), or `auto` (none when the real volume
    /// already lies in [-1, 1], else volume-minmax).
    #[arg(long, default_value = "auto")]
    real_normalization: String,
    /// Folder for `eval.json` and `eval.md` (written atomically); the table also goes to stdout.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Replace `eval.json` and `eval.md` in --out (without it, eval refuses to start when either
    /// exists, so that an earlier evaluation is never lost).
    #[arg(long)]
    overwrite: bool,
}

/// A NIfTI file's name without `.nii` / `.nii.gz`, or None for other files and hidden ones.
fn stem_of(path: &Path) -> Option<String> {
    nifti_stem(path).map(str::to_string)
}

fn nifti_files(path: &Path, what: &str) -> anyhow::Result<Vec<PathBuf>> {
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    if !path.is_dir() {
        bail!("{what} {}: no such file or folder", path.display());
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .with_context(|| format!("listing {}", path.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && stem_of(p).is_some())
        .collect();
    files.sort();
    Ok(files)
}

/// The normalisation a volume with voxels `data` gets under the mode `name` of `flag`.
fn normalization(flag: &str, name: &str, data: &[f32]) -> anyhow::Result<Option<Normalization>> {
    Ok(match name {
        "auto" => data
            .iter()
            .filter(|v| v.is_finite())
            .any(|v| v.abs() > 1.0 + 1e-6)
            .then_some(Normalization::VolumeMinMax),
        "none" => None,
        "volume-minmax" => Some(Normalization::VolumeMinMax),
        "reference-per-slice" => Some(Normalization::ReferencePerSlice),
        "percentile" => Some(Normalization::Percentile {
            low: 0.5,
            high: 99.5,
        }),
        other => bail!(
            "{flag} {other}: expected auto, none, volume-minmax, reference-per-slice or percentile"
        ),
    })
}

fn labels_of(mask: &Volume, path: &Path) -> anyhow::Result<Vec<u32>> {
    mask.data()
        .iter()
        .map(|&v| {
            if v.is_finite() && v >= 0.0 && (v - v.round()).abs() < 1e-3 {
                Ok(v.round() as u32)
            } else {
                bail!(
                    "{}: labels must be non-negative integers, found {v}",
                    path.display()
                )
            }
        })
        .collect()
}

/// Which mask a file belongs to: the longest mask stem that the file's stem equals or starts
/// with followed by `_` (so `case_1_sample-0` goes to `case_1`, not `case`).
fn owner(stem: &str, masks: &[String]) -> Option<usize> {
    masks
        .iter()
        .enumerate()
        .filter(|(_, m)| stem == m.as_str() || stem.starts_with(&format!("{m}_")))
        .max_by_key(|(_, m)| m.len())
        .map(|(i, _)| i)
}

pub fn run(args: EvalArgs) -> anyhow::Result<()> {
    if let (Some(out), false) = (&args.out, args.overwrite) {
        for name in ["eval.json", "eval.md"] {
            let file = out.join(name);
            if file.exists() {
                bail!(
                    "{} exists (an earlier evaluation): choose another --out, or add --overwrite to replace it",
                    file.display()
                );
            }
        }
    }
    // A bad mode is refused before minutes of evaluation by mask.
    normalization("--train-normalization", &args.train_normalization, &[])?;
    let report = match (&args.masks, &args.train_dir) {
        (Some(masks), train_dir) => {
            let (mut report, input) = by_mask(&args, masks)?;
            if let Some(dir) = train_dir {
                let synthetic: Vec<NamedVolume> = input
                    .synthetic
                    .into_iter()
                    .map(|s| NamedVolume {
                        name: s.name,
                        data: s.data,
                    })
                    .collect();
                let (section, notes) = memorisation::check(&args, dir, &synthetic, input.dims)?;
                report.memorisation = Some(section);
                report.notes.extend(notes);
            }
            report
        }
        (None, Some(dir)) => {
            let (dims, synthetic, normalised) = memorisation::load_synthetic_any(&args)?;
            let (section, notes) = memorisation::check(&args, dir, &synthetic, dims)?;
            let mut report = EvalReport::memorisation_only(dims, section);
            report.notes.extend(notes);
            if normalised > 0 {
                report.notes.push(format!(
                    "memorisation: {normalised} --synthetic volume(s) outside [-1, 1] were \
                     normalised as the training images (--train-normalization {})",
                    args.train_normalization
                ));
            }
            report
        }
        (None, None) => bail!("give --masks, --train-dir or both"),
    };
    let markdown = report.to_markdown();
    println!("{markdown}");
    if let Some(out) = &args.out {
        write_report(out, &report, &markdown)?;
    }
    Ok(())
}

/// The evaluation by mask (paired fidelity, diversity, MMD, adherence) and its input.
fn by_mask(args: &EvalArgs, masks: &Path) -> anyhow::Result<(EvalReport, EvalInput)> {
    let (grid, masks) = load_masks(masks)?;
    let dims = grid.first.dims();
    let names: Vec<String> = masks.iter().map(|m| m.name.clone()).collect();
    let synthetic = load_synthetic(args, &grid, &names)?;
    let real = match &args.real {
        Some(dir) => load_real(args, dir, &grid, &names)?,
        None => Vec::new(),
    };
    let scales = ms_ssim_scales(dims);
    let input = EvalInput {
        dims,
        masks,
        real,
        synthetic,
        ms_ssim: MsSsimOptions {
            scales,
            ..Default::default()
        },
        ..Default::default()
    };
    eprintln!(
        "evaluating {} generated and {} real volume(s) over {} mask(s) on a {}x{}x{} grid",
        input.synthetic.len(),
        input.real.len(),
        input.masks.len(),
        dims[0],
        dims[1],
        dims[2]
    );
    let mut report = evaluate(&input).context("evaluating")?;
    if scales < 5 {
        report.notes.push(format!(
            "MS-SSIM over {scales} scale(s): the {}x{}x{} grid is too small for the usual 5",
            dims[0], dims[1], dims[2]
        ));
    }
    Ok((report, input))
}

/// The voxel grid every volume of an evaluation shares: the first mask's dimensions and its
/// voxel-to-world affine (a volume on the same dimensions but shifted or rotated is another
/// place, and scoring it against the mask would be silently wrong).
struct Grid {
    first: Volume,
    path: PathBuf,
}

/// The label maps of `--masks` (named by their case ids: file stems without `_seg`) and the grid they all share.
fn load_masks(path: &Path) -> anyhow::Result<(Grid, Vec<NamedLabels>)> {
    let mask_files =
        list_masks(path).with_context(|| format!("finding masks in {}", path.display()))?;
    let mut grid: Option<Grid> = None;
    let mut masks = Vec::new();
    for path in &mask_files {
        let vol = Volume::read(path).with_context(|| format!("reading {}", path.display()))?;
        if let Some(g) = &grid {
            check_grid(g, &vol, path)?;
        }
        masks.push(NamedLabels {
            name: case_id(path),
            labels: labels_of(&vol, path)?,
        });
        if grid.is_none() {
            grid = Some(Grid {
                first: vol,
                path: path.clone(),
            });
        }
    }
    Ok((grid.context("no masks")?, masks))
}

/// Whether a file stem belongs to the `--channel` asked for (every stem without one).
fn has_channel(stem: &str, channel: Option<&str>) -> bool {
    match channel {
        Some(c) => stem.ends_with(&format!("_{c}")),
        None => true,
    }
}

/// The generated volumes of `--synthetic`, each given to the mask its name starts with; a
/// sample without its mask, or no sample at all, is an error.
fn load_synthetic(
    args: &EvalArgs,
    grid: &Grid,
    names: &[String],
) -> anyhow::Result<Vec<NamedImage>> {
    let mut synthetic = Vec::new();
    for path in nifti_files(&args.synthetic, "--synthetic")? {
        let stem = stem_of(&path).unwrap_or_default();
        if !has_channel(&stem, args.channel.as_deref()) || !stem.contains("_sample-") {
            continue;
        }
        let Some(m) = owner(&stem, names) else {
            bail!(
                "{}: no mask named like it (expected <mask>_seed-<s>_sample-<n> or <mask>_sample-<n>; masks: {})",
                path.display(),
                names.join(", ")
            );
        };
        let vol = Volume::read(&path).with_context(|| format!("reading {}", path.display()))?;
        check_grid(grid, &vol, &path)?;
        check_finite(&vol, &path)?;
        synthetic.push(NamedImage {
            name: stem,
            mask_index: m,
            data: vol.into_data(),
        });
    }
    if synthetic.is_empty() {
        bail!(
            "{}: no generated volumes named <mask>_sample-<n>.nii(.gz){}",
            args.synthetic.display(),
            args.channel
                .as_ref()
                .map(|c| format!(" ending in _{c}"))
                .unwrap_or_default()
        );
    }
    Ok(synthetic)
}

/// The real volumes in `dir` named like a mask, normalised as `--real-normalization` says;
/// finding none is an error.
fn load_real(
    args: &EvalArgs,
    dir: &Path,
    grid: &Grid,
    names: &[String],
) -> anyhow::Result<Vec<NamedImage>> {
    let mut real = Vec::new();
    for path in nifti_files(dir, "--real")? {
        let stem = stem_of(&path).unwrap_or_default();
        if !has_channel(&stem, args.channel.as_deref()) && !names.contains(&stem) {
            continue;
        }
        let Some(m) = owner(&stem, names) else {
            continue;
        };
        let vol = Volume::read(&path).with_context(|| format!("reading {}", path.display()))?;
        check_grid(grid, &vol, &path)?;
        check_finite(&vol, &path)?;
        let vol = match normalization("--real-normalization", &args.real_normalization, vol.data())?
        {
            Some(n) => vol
                .normalized(n)
                .with_context(|| format!("normalising {}", path.display()))?,
            None => vol,
        };
        real.push(NamedImage {
            name: stem,
            mask_index: m,
            data: vol.into_data(),
        });
    }
    if real.is_empty() {
        bail!(
            "{}: no real volume is named like a mask ({})",
            dir.display(),
            names.join(", ")
        );
    }
    Ok(real)
}

/// The most MS-SSIM scales the grid holds (5 need about 112 voxels per axis).
fn ms_ssim_scales(dims: [usize; 3]) -> usize {
    (1..=5)
        .rev()
        .find(|&s| {
            MsSsimOptions {
                scales: s,
                ..Default::default()
            }
            .check_dims(dims)
            .is_ok()
        })
        .unwrap_or(1)
}

/// Writes `eval.json` and `eval.md` into `out` (created if needed), each atomically.
fn write_report(out: &Path, report: &EvalReport, markdown: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let json = serde_json::to_vec_pretty(report)?;
    medddpm_render::write_atomic(&out.join("eval.json"), &json)?;
    medddpm_render::write_atomic(&out.join("eval.md"), markdown.as_bytes())?;
    eprintln!("wrote {} and eval.md", out.join("eval.json").display());
    Ok(())
}

/// Fails unless `vol` is on `grid` ([`Volume::same_grid`], as `prepare` requires of a case's
/// files).
fn check_grid(grid: &Grid, vol: &Volume, path: &Path) -> anyhow::Result<()> {
    if vol.dims() != grid.first.dims() {
        bail!(
            "{}: grid {:?}, where the first mask's is {:?} (every volume must be on the masks' grid)",
            path.display(),
            vol.dims(),
            grid.first.dims()
        );
    }
    if !grid.first.same_grid(vol) {
        bail!(
            "{}: its voxels lie elsewhere in space than the masks' (affine {:?}, where {} has {:?}): every volume must be on the masks' grid",
            path.display(),
            vol.affine(),
            grid.path.display(),
            grid.first.affine()
        );
    }
    Ok(())
}

/// Fails on a volume holding NaN or infinite voxels (its scores would be NaN).
fn check_finite(vol: &Volume, path: &Path) -> anyhow::Result<()> {
    let bad = vol.data().iter().filter(|v| !v.is_finite()).count();
    if bad > 0 {
        bail!(
            "{}: {bad} voxel(s) are NaN or infinite, so no score of it would mean anything",
            path.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::owner;

    #[test]
    fn files_go_to_the_longest_matching_mask() {
        let masks = vec!["case".to_string(), "case_1".to_string()];
        assert_eq!(owner("case_1_sample-0", &masks), Some(1));
        assert_eq!(owner("case_1_seed-7_sample-0", &masks), Some(1));
        assert_eq!(owner("case_sample-0", &masks), Some(0));
        assert_eq!(owner("case_1", &masks), Some(1));
        assert_eq!(owner("other_sample-0", &masks), None);
    }
}
