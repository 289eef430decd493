//! [`evaluate`]: every section of the report, one step per section.

use crate::adherence::{label_stats, per_label_dice_for, LabelStats, TissueClassifier};
use crate::error::{check_data_range, check_grid, check_len, MetricsError, Result};
use crate::mmd::{mmd2_unbiased, volume_features_with};
use crate::pixel::{mae, mse, psnr_from_mse};
use crate::ssim::{mean_pairwise_ms_ssim, ssim3d};

use super::input::{EvalInput, NamedImage, NamedLabels};
use super::sections::{
    AdherenceSection, ClassSummary, DiversityRow, DiversitySection, EvalReport, LabelAdherence,
    MmdSection, PairedMeans, PairedRow, PairedSection, SampleAdherence,
};

/// Computes every section of the report.
///
/// - paired: each synthetic image against every real image of the same `mask_index`, over the
///   voxels with label != 0 of that mask;
/// - diversity: masks with at least two synthetic images;
/// - MMD: all real against all synthetic, features inside each image's own mask (label != 0);
/// - adherence: a [`TissueClassifier`] fitted on all real images with their masks.
///
/// Inputs are checked up front (grid, lengths, mask indices, MS-SSIM size), so a bad file fails
/// before minutes of computation; errors name the offending item.
pub fn evaluate(input: &EvalInput) -> Result<EvalReport> {
    check_input(input)?;
    let by_mask = synthetic_by_mask(input);
    if by_mask.iter().any(|v| v.len() >= 2) {
        input
            .ms_ssim
            .check_dims(input.dims)
            .map_err(|e| e.context("diversity (MS-SSIM)"))?;
    }
    let regions: Vec<Vec<bool>> = input
        .masks
        .iter()
        .map(|m| m.labels.iter().map(|&l| l != 0).collect())
        .collect();

    let paired = paired_section(input, &regions)?;
    let diversity = diversity_section(input, &by_mask)?;
    let mmd = mmd_section(input, &regions)?;
    let adherence = adherence_section(input)?;
    let notes = notes(input, &by_mask, mmd.is_some(), adherence.is_some());
    Ok(EvalReport {
        dims: input.dims,
        data_range: input.data_range,
        n_masks: input.masks.len(),
        n_real: input.real.len(),
        n_synthetic: input.synthetic.len(),
        paired,
        diversity,
        mmd,
        adherence,
        memorisation: None,
        notes,
    })
}

fn mean_of(v: impl IntoIterator<Item = f64>) -> Option<f64> {
    let (s, n) = v
        .into_iter()
        .fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    (n > 0).then(|| s / n as f64)
}

/// The checks [`evaluate`] makes before any computation: grid, data range, every mask's and
/// image's length, and every image's mask index.
fn check_input(input: &EvalInput) -> Result<()> {
    let dims = input.dims;
    let n = check_grid(dims)?;
    check_data_range(input.data_range)?;
    for m in &input.masks {
        check_len("labels", n, m.labels.len())
            .map_err(|e| e.context(format!("mask '{}'", m.name)))?;
    }
    for img in &input.real {
        check_image("real", img, input, n)?;
    }
    for img in &input.synthetic {
        check_image("synthetic", img, input, n)?;
    }
    Ok(())
}

fn check_image(kind: &str, img: &NamedImage, input: &EvalInput, n: usize) -> Result<()> {
    let ctx = || format!("{kind} image '{}'", img.name);
    if img.mask_index >= input.masks.len() {
        return Err(MetricsError::InvalidParameter {
            name: "mask_index",
            value: img.mask_index.to_string(),
            reason: "no such mask",
        }
        .context(ctx()));
    }
    check_len("data", n, img.data.len()).map_err(|e| e.context(ctx()))
}

/// The synthetic images of each mask, indexed like [`EvalInput::masks`].
fn synthetic_by_mask(input: &EvalInput) -> Vec<Vec<&NamedImage>> {
    let mut by_mask: Vec<Vec<&NamedImage>> = vec![Vec::new(); input.masks.len()];
    for s in &input.synthetic {
        by_mask[s.mask_index].push(s);
    }
    by_mask
}

fn mask_name(input: &EvalInput, i: usize) -> String {
    input.masks[i].name.clone()
}

/// Each synthetic image against every real image of its mask, over the mask's region.
fn paired_section(input: &EvalInput, regions: &[Vec<bool>]) -> Result<PairedSection> {
    let mut rows = Vec::new();
    for s in &input.synthetic {
        for r in input.real.iter().filter(|r| r.mask_index == s.mask_index) {
            rows.push(paired_row(input, s, r, &regions[s.mask_index])?);
        }
    }
    let mean = (!rows.is_empty()).then(|| PairedMeans {
        psnr: rows
            .iter()
            .map(|r| r.psnr)
            .sum::<Option<f64>>()
            .map(|s| s / rows.len() as f64),
        ssim: mean_of(rows.iter().map(|r| r.ssim)).unwrap_or(f64::NAN),
        mae: mean_of(rows.iter().map(|r| r.mae)).unwrap_or(f64::NAN),
    });
    Ok(PairedSection {
        region: "voxels with label != 0 in the shared mask (inside the head or brain mask); \
                 SSIM averages the local SSIM of 7-voxel windows centred there, which excludes \
                 voxels within 3 of the volume edge"
            .into(),
        rows,
        mean,
    })
}

/// PSNR, SSIM and MAE of synthetic `s` against real `r` inside `region`.
fn paired_row(
    input: &EvalInput,
    s: &NamedImage,
    r: &NamedImage,
    region: &[bool],
) -> Result<PairedRow> {
    let ctx = || {
        format!(
            "synthetic '{}' vs real '{}' (mask '{}')",
            s.name,
            r.name,
            mask_name(input, s.mask_index)
        )
    };
    let m = Some(region);
    let e = mse(&s.data, &r.data, m).map_err(|e| e.context(ctx()))?;
    let p = psnr_from_mse(e, input.data_range);
    Ok(PairedRow {
        mask: mask_name(input, s.mask_index),
        sample: s.name.clone(),
        real: r.name.clone(),
        region_voxels: region.iter().filter(|&&b| b).count() as u64,
        psnr: p.is_finite().then_some(p),
        ssim: ssim3d(&s.data, &r.data, input.dims, m, input.data_range)
            .map_err(|e| e.context(ctx()))?,
        mae: mae(&s.data, &r.data, m).map_err(|e| e.context(ctx()))?,
    })
}

/// Mean pairwise MS-SSIM of the samples of every mask that has at least two.
fn diversity_section(input: &EvalInput, by_mask: &[Vec<&NamedImage>]) -> Result<DiversitySection> {
    let mut rows = Vec::new();
    for (i, samples) in by_mask.iter().enumerate().filter(|(_, v)| v.len() >= 2) {
        let vols: Vec<&[f32]> = samples.iter().map(|s| s.data.as_slice()).collect();
        let v = mean_pairwise_ms_ssim(&vols, input.dims, input.data_range, &input.ms_ssim)
            .map_err(|e| e.context(format!("diversity of mask '{}'", mask_name(input, i))))?;
        rows.push(DiversityRow {
            mask: mask_name(input, i),
            n_samples: samples.len(),
            mean_pairwise_ms_ssim: v,
        });
    }
    Ok(DiversitySection {
        ms_ssim: input.ms_ssim,
        rows,
    })
}

/// MMD of all real against all synthetic images; `None` unless both sets are non-empty.
fn mmd_section(input: &EvalInput, regions: &[Vec<bool>]) -> Result<Option<MmdSection>> {
    if input.real.is_empty() || input.synthetic.is_empty() {
        return Ok(None);
    }
    let features = |kind: &str, imgs: &[NamedImage]| -> Result<Vec<Vec<f64>>> {
        imgs.iter()
            .map(|img| {
                volume_features_with(&img.data, Some(&regions[img.mask_index]), &input.features)
                    .map_err(|e| e.context(format!("features of {kind} image '{}'", img.name)))
            })
            .collect()
    };
    let x = features("real", &input.real)?;
    let y = features("synthetic", &input.synthetic)?;
    let m = mmd2_unbiased(&x, &y, None)?;
    Ok(Some(MmdSection {
        value: m.value,
        sigma: m.sigma,
        estimator: m.estimator,
        n_real: m.n_x,
        n_synthetic: m.n_y,
        features: format!(
            "{}-bin intensity histogram over [{}, {}] (fractions, clamped) plus mean and std, \
             inside label != 0; Gaussian RBF kernel, median-heuristic bandwidth",
            input.features.bins, input.features.low, input.features.high
        ),
    }))
}

/// Mask adherence of every image under a classifier fitted on the real images; `None` without
/// real images.
fn adherence_section(input: &EvalInput) -> Result<Option<AdherenceSection>> {
    if input.real.is_empty() {
        return Ok(None);
    }
    let pairs: Vec<(&[f32], &[u32])> = input
        .real
        .iter()
        .map(|r| {
            (
                r.data.as_slice(),
                input.masks[r.mask_index].labels.as_slice(),
            )
        })
        .collect();
    let clf = TissueClassifier::fit(&pairs)?;
    // Each mask's real images, their labels' statistics together: what an image of that mask
    // is compared with.
    let paired: Vec<Option<Vec<LabelStats>>> = (0..input.masks.len())
        .map(|m| {
            let reals: Vec<&NamedImage> = input.real.iter().filter(|r| r.mask_index == m).collect();
            if reals.is_empty() {
                return Ok(None);
            }
            let image: Vec<f32> = reals.iter().flat_map(|r| r.data.iter().copied()).collect();
            let labels: Vec<u32> = reals
                .iter()
                .flat_map(|_| input.masks[m].labels.iter().copied())
                .collect();
            label_stats(&image, &labels).map(Some)
        })
        .collect::<Result<_>>()?;
    let judge = |img: &NamedImage| -> Result<SampleAdherence> {
        let real = paired[img.mask_index].as_deref();
        adherence_of(img, &input.masks[img.mask_index], &clf, real)
    };
    let synthetic = input
        .synthetic
        .iter()
        .map(judge)
        .collect::<Result<Vec<_>>>()?;
    let real = input.real.iter().map(judge).collect::<Result<Vec<_>>>()?;
    let mut classes: Vec<ClassSummary> = clf
        .classes()
        .iter()
        .map(|c| ClassSummary {
            label: c.label,
            real_voxels: c.real.voxels,
            real_mean: c.real.mean,
            real_std: c.real.std,
            centre: c.centre,
        })
        .collect();
    classes.sort_by_key(|c| c.label);
    Ok(Some(AdherenceSection {
        classes,
        thresholds: clf.thresholds(),
        mean_dice_synthetic: mean_of(synthetic.iter().filter_map(|s| s.mean_dice)),
        mean_dice_real: mean_of(real.iter().filter_map(|s| s.mean_dice)),
        synthetic,
        real,
    }))
}

fn adherence_of(
    img: &NamedImage,
    mask: &NamedLabels,
    clf: &TissueClassifier,
    paired_real: Option<&[LabelStats]>,
) -> Result<SampleAdherence> {
    let stats: Vec<LabelStats> = label_stats(&img.data, &mask.labels)?;
    let mut labels = clf.labels();
    labels.extend(stats.iter().map(|s| s.label));
    labels.sort_unstable();
    labels.dedup();
    let predicted = clf.classify(&img.data);
    let dice = per_label_dice_for(&mask.labels, &predicted, &labels)?;
    let rows: Vec<LabelAdherence> = labels
        .iter()
        .zip(dice)
        .map(|(&label, (_, d))| {
            let s = stats.iter().find(|s| s.label == label);
            LabelAdherence {
                label,
                voxels: s.map_or(0, |s| s.voxels),
                mean: s.map(|s| s.mean),
                std: s.map(|s| s.std),
                real_mean: paired_real
                    .and_then(|p| p.iter().find(|s| s.label == label))
                    .map(|s| s.mean),
                dice: d,
            }
        })
        .collect();
    Ok(SampleAdherence {
        name: img.name.clone(),
        mask: mask.name.clone(),
        mean_dice: mean_of(rows.iter().filter(|r| r.label != 0).filter_map(|r| r.dice)),
        labels: rows,
    })
}

/// Caveats for the reader: infinite PSNR, small MMD sets, masks without a diversity score, and
/// what the adherence Dice measures.
fn notes(
    input: &EvalInput,
    by_mask: &[Vec<&NamedImage>],
    has_mmd: bool,
    has_adherence: bool,
) -> Vec<String> {
    let mut notes = vec![
        "PSNR of identical volumes is infinite: stored as null in JSON, shown as inf".to_string(),
    ];
    if input.real.len().min(input.synthetic.len()) < 10 && has_mmd {
        notes.push(format!(
            "MMD from {} real and {} synthetic images is noisy; compare only runs of equal set sizes",
            input.real.len(),
            input.synthetic.len()
        ));
    }
    let single: Vec<String> = by_mask
        .iter()
        .enumerate()
        .filter(|(_, v)| v.len() == 1)
        .map(|(i, _)| mask_name(input, i))
        .collect();
    if !single.is_empty() {
        notes.push(format!(
            "no diversity score for masks with one sample: {}",
            single.join(", ")
        ));
    }
    if has_adherence {
        notes.push(
            "adherence Dice: intensity-only classifier (k-means on real intensities, thresholds \
             halfway between class centres) against the mask; mean Dice excludes label 0; the \
             real images' Dice is the ceiling"
                .into(),
        );
    }
    notes
}
