//! The evaluation entry point and its serialisable report.
//!
//! JSON has no infinity, so a PSNR of identical volumes is stored as `None` (`null`), and shown
//! as "inf" in Markdown; every other `None` in the report means "undefined", as documented on
//! its field.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::adherence::{label_stats, per_label_dice_for, LabelStats, TissueClassifier};
use crate::error::{check_data_range, check_dims, check_len, MetricsError, Result};
use crate::mmd::{mmd2_unbiased, volume_features_with, FeatureOptions, MmdEstimator};
use crate::pixel::{mae, mse, psnr_from_mse};
use crate::ssim::{mean_pairwise_ms_ssim, ssim3d, MsSsimOptions};

/// An integer label map (NIfTI float labels rounded by the caller).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NamedLabels {
    /// Name shown in the report (e.g. the file stem).
    pub name: String,
    /// Labels in file order, `i + ni * (j + nj * k)`.
    pub labels: Vec<u32>,
}

/// An image and the mask it belongs to (real) or was generated from (synthetic).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NamedImage {
    /// Name shown in the report.
    pub name: String,
    /// Index into [`EvalInput::masks`].
    pub mask_index: usize,
    /// Intensities in file order, normalised like the generated ones.
    pub data: Vec<f32>,
}

/// Everything [`evaluate`] needs, all on one grid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalInput {
    /// Grid shared by every mask and image.
    pub dims: [usize; 3],
    /// Span of the intensities for PSNR/SSIM: 2.0 for [-1, 1].
    pub data_range: f64,
    /// Label maps.
    pub masks: Vec<NamedLabels>,
    /// Real images.
    pub real: Vec<NamedImage>,
    /// Generated images.
    pub synthetic: Vec<NamedImage>,
    /// Scales and window for the diversity score.
    pub ms_ssim: MsSsimOptions,
    /// Histogram features for MMD.
    pub features: FeatureOptions,
}

impl Default for EvalInput {
    /// Empty sets on a `[0, 0, 0]` grid with data range 2.0 and default options.
    fn default() -> Self {
        Self {
            dims: [0; 3],
            data_range: 2.0,
            masks: Vec::new(),
            real: Vec::new(),
            synthetic: Vec::new(),
            ms_ssim: MsSsimOptions::default(),
            features: FeatureOptions::default(),
        }
    }
}

/// One synthetic image against the real image of the same mask.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairedRow {
    /// Mask name.
    pub mask: String,
    /// Synthetic image name.
    pub sample: String,
    /// Real image name.
    pub real: String,
    /// Voxels in the region (label != 0).
    pub region_voxels: u64,
    /// PSNR in dB over the region; `None` means infinite (identical in the region).
    pub psnr: Option<f64>,
    /// Mean SSIM of the windows centred in the region.
    pub ssim: f64,
    /// Mean absolute error over the region.
    pub mae: f64,
}

/// Means over all paired rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairedMeans {
    /// Mean PSNR; `None` when some pair is identical (the mean is then infinite).
    pub psnr: Option<f64>,
    /// Mean SSIM.
    pub ssim: f64,
    /// Mean MAE.
    pub mae: f64,
}

/// Paired fidelity metrics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairedSection {
    /// Which voxels the metrics cover.
    pub region: String,
    /// One row per (synthetic, real) pair sharing a mask.
    pub rows: Vec<PairedRow>,
    /// Means over `rows`; `None` when there are no pairs.
    pub mean: Option<PairedMeans>,
}

/// Diversity of the samples of one mask.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiversityRow {
    /// Mask name.
    pub mask: String,
    /// Synthetic samples of this mask.
    pub n_samples: usize,
    /// Mean MS-SSIM over all pairs of those samples (lower = more diverse).
    pub mean_pairwise_ms_ssim: f64,
}

/// Per-mask diversity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiversitySection {
    /// MS-SSIM settings used.
    pub ms_ssim: MsSsimOptions,
    /// Masks with at least two samples.
    pub rows: Vec<DiversityRow>,
}

/// Distribution distance between all real and all synthetic images.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MmdSection {
    /// Squared MMD of the feature vectors.
    pub value: f64,
    /// RBF bandwidth (median heuristic).
    pub sigma: f64,
    /// Estimator used (biased when a set has one element).
    pub estimator: MmdEstimator,
    /// Real images.
    pub n_real: usize,
    /// Synthetic images.
    pub n_synthetic: usize,
    /// What the feature vectors are.
    pub features: String,
}

/// The classifier's view of one label, learnt from the real images.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassSummary {
    /// Label.
    pub label: u32,
    /// Real voxels with this label.
    pub real_voxels: u64,
    /// Mean real intensity.
    pub real_mean: f64,
    /// Standard deviation of real intensities.
    pub real_std: f64,
    /// k-means centre.
    pub centre: f64,
}

/// One label of one image.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabelAdherence {
    /// Label.
    pub label: u32,
    /// Voxels of the image's mask with this label.
    pub voxels: u64,
    /// Mean intensity of the image there; `None` when the mask lacks the label.
    pub mean: Option<f64>,
    /// Standard deviation there; `None` when the mask lacks the label.
    pub std: Option<f64>,
    /// Mean over all real images for this label; `None` when no real image has it.
    pub real_mean: Option<f64>,
    /// Dice of the intensity classification with the mask; `None` when both are empty.
    pub dice: Option<f64>,
}

/// Adherence of one image to its mask.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampleAdherence {
    /// Image name.
    pub name: String,
    /// Mask name.
    pub mask: String,
    /// Per label, ascending.
    pub labels: Vec<LabelAdherence>,
    /// Mean Dice over the labels other than 0 that have one; `None` if none has.
    pub mean_dice: Option<f64>,
}

/// Mask adherence of the synthetic images, with the real images as the ceiling.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdherenceSection {
    /// Classes of the intensity classifier fitted on the real images.
    pub classes: Vec<ClassSummary>,
    /// Its intensity thresholds, ascending.
    pub thresholds: Vec<f64>,
    /// Synthetic images.
    pub synthetic: Vec<SampleAdherence>,
    /// Real images: the Dice an intensity classifier reaches on real data.
    pub real: Vec<SampleAdherence>,
    /// Mean of the synthetic images' `mean_dice`.
    pub mean_dice_synthetic: Option<f64>,
    /// Mean of the real images' `mean_dice` (the ceiling).
    pub mean_dice_real: Option<f64>,
}

/// Everything `medddpm eval` reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalReport {
    /// Grid of all volumes.
    pub dims: [usize; 3],
    /// Intensity span used for PSNR and SSIM.
    pub data_range: f64,
    /// Masks given.
    pub n_masks: usize,
    /// Real images given.
    pub n_real: usize,
    /// Synthetic images given.
    pub n_synthetic: usize,
    /// Fidelity against the real image of the same mask.
    pub paired: PairedSection,
    /// Per-mask diversity.
    pub diversity: DiversitySection,
    /// Distribution distance; `None` without both real and synthetic images.
    pub mmd: Option<MmdSection>,
    /// Mask adherence; `None` without real images (nothing to fit the classifier on).
    pub adherence: Option<AdherenceSection>,
    /// Caveats for the reader.
    pub notes: Vec<String>,
}

fn mean_of(v: impl IntoIterator<Item = f64>) -> Option<f64> {
    let (s, n) = v
        .into_iter()
        .fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    (n > 0).then(|| s / n as f64)
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
    let dims = input.dims;
    let n = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| MetricsError::InvalidParameter {
            name: "dims",
            value: format!("{dims:?}"),
            reason: "grid has more voxels than fit in memory",
        })?;
    check_dims("grid", dims, n)?;
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
    let mut by_mask: Vec<Vec<&NamedImage>> = vec![Vec::new(); input.masks.len()];
    for s in &input.synthetic {
        by_mask[s.mask_index].push(s);
    }
    if by_mask.iter().any(|v| v.len() >= 2) {
        input
            .ms_ssim
            .check_dims(dims)
            .map_err(|e| e.context("diversity (MS-SSIM)"))?;
    }
    let regions: Vec<Vec<bool>> = input
        .masks
        .iter()
        .map(|m| m.labels.iter().map(|&l| l != 0).collect())
        .collect();
    let mask_name = |i: usize| input.masks[i].name.clone();

    let mut rows = Vec::new();
    for s in &input.synthetic {
        for r in input.real.iter().filter(|r| r.mask_index == s.mask_index) {
            let ctx = || {
                format!(
                    "synthetic '{}' vs real '{}' (mask '{}')",
                    s.name,
                    r.name,
                    mask_name(s.mask_index)
                )
            };
            let region = &regions[s.mask_index];
            let m = Some(region.as_slice());
            let e = mse(&s.data, &r.data, m).map_err(|e| e.context(ctx()))?;
            let p = psnr_from_mse(e, input.data_range);
            rows.push(PairedRow {
                mask: mask_name(s.mask_index),
                sample: s.name.clone(),
                real: r.name.clone(),
                region_voxels: region.iter().filter(|&&b| b).count() as u64,
                psnr: p.is_finite().then_some(p),
                ssim: ssim3d(&s.data, &r.data, dims, m, input.data_range)
                    .map_err(|e| e.context(ctx()))?,
                mae: mae(&s.data, &r.data, m).map_err(|e| e.context(ctx()))?,
            });
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
    let paired = PairedSection {
        region: "voxels with label != 0 in the shared mask (inside the head or brain mask); \
                 SSIM averages the local SSIM of 7-voxel windows centred there, which excludes \
                 voxels within 3 of the volume edge"
            .into(),
        rows,
        mean,
    };

    let mut diversity_rows = Vec::new();
    for (i, samples) in by_mask.iter().enumerate().filter(|(_, v)| v.len() >= 2) {
        let vols: Vec<&[f32]> = samples.iter().map(|s| s.data.as_slice()).collect();
        let v = mean_pairwise_ms_ssim(&vols, dims, input.data_range, &input.ms_ssim)
            .map_err(|e| e.context(format!("diversity of mask '{}'", mask_name(i))))?;
        diversity_rows.push(DiversityRow {
            mask: mask_name(i),
            n_samples: samples.len(),
            mean_pairwise_ms_ssim: v,
        });
    }

    let features = |kind: &str, imgs: &[NamedImage]| -> Result<Vec<Vec<f64>>> {
        imgs.iter()
            .map(|img| {
                volume_features_with(&img.data, Some(&regions[img.mask_index]), &input.features)
                    .map_err(|e| e.context(format!("features of {kind} image '{}'", img.name)))
            })
            .collect()
    };
    let mmd = if !input.real.is_empty() && !input.synthetic.is_empty() {
        let x = features("real", &input.real)?;
        let y = features("synthetic", &input.synthetic)?;
        let m = mmd2_unbiased(&x, &y, None)?;
        Some(MmdSection {
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
        })
    } else {
        None
    };

    let adherence = if input.real.is_empty() {
        None
    } else {
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
        let judge = |img: &NamedImage| -> Result<SampleAdherence> {
            adherence_of(img, &input.masks[img.mask_index], &clf)
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
        Some(AdherenceSection {
            classes,
            thresholds: clf.thresholds(),
            mean_dice_synthetic: mean_of(synthetic.iter().filter_map(|s| s.mean_dice)),
            mean_dice_real: mean_of(real.iter().filter_map(|s| s.mean_dice)),
            synthetic,
            real,
        })
    };

    let mut notes = vec![
        "PSNR of identical volumes is infinite: stored as null in JSON, shown as inf".to_string(),
    ];
    if input.real.len().min(input.synthetic.len()) < 10 && mmd.is_some() {
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
        .map(|(i, _)| mask_name(i))
        .collect();
    if !single.is_empty() {
        notes.push(format!(
            "no diversity score for masks with one sample: {}",
            single.join(", ")
        ));
    }
    if adherence.is_some() {
        notes.push(
            "adherence Dice: intensity-only classifier (k-means on real intensities, thresholds \
             halfway between class centres) against the mask; mean Dice excludes label 0; the \
             real images' Dice is the ceiling"
                .into(),
        );
    }

    Ok(EvalReport {
        dims,
        data_range: input.data_range,
        n_masks: input.masks.len(),
        n_real: input.real.len(),
        n_synthetic: input.synthetic.len(),
        paired,
        diversity: DiversitySection {
            ms_ssim: input.ms_ssim,
            rows: diversity_rows,
        },
        mmd,
        adherence,
        notes,
    })
}

fn adherence_of(
    img: &NamedImage,
    mask: &NamedLabels,
    clf: &TissueClassifier,
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
                real_mean: clf.class(label).map(|c| c.real.mean),
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

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.prec$}"))
}

impl EvalReport {
    /// Renders the report as Markdown tables (PSNR 2 decimals, SSIM/MS-SSIM/Dice 4, MMD 6).
    pub fn to_markdown(&self) -> String {
        let mut s = String::new();
        let [ni, nj, nk] = self.dims;
        let _ = writeln!(s, "# Evaluation\n");
        let _ = writeln!(
            s,
            "Grid {ni}x{nj}x{nk}, data range {}; {} masks, {} real, {} synthetic images.\n",
            self.data_range, self.n_masks, self.n_real, self.n_synthetic
        );

        let _ = writeln!(s, "## Paired fidelity (synthetic vs real, same mask)\n");
        let _ = writeln!(s, "Region: {}.\n", self.paired.region);
        if self.paired.rows.is_empty() {
            let _ = writeln!(s, "No synthetic image shares a mask with a real image.\n");
        } else {
            let _ = writeln!(
                s,
                "| mask | sample | real | voxels | PSNR (dB) | SSIM | MAE |"
            );
            let _ = writeln!(s, "|---|---|---|---:|---:|---:|---:|");
            let psnr = |p: Option<f64>| p.map_or_else(|| "inf".into(), |x| format!("{x:.2}"));
            for r in &self.paired.rows {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {:.4} | {:.4} |",
                    r.mask,
                    r.sample,
                    r.real,
                    r.region_voxels,
                    psnr(r.psnr),
                    r.ssim,
                    r.mae
                );
            }
            if let Some(m) = &self.paired.mean {
                let _ = writeln!(
                    s,
                    "| **mean** | | | | {} | {:.4} | {:.4} |",
                    psnr(m.psnr),
                    m.ssim,
                    m.mae
                );
            }
            s.push('\n');
        }

        let o = &self.diversity.ms_ssim;
        let _ = writeln!(
            s,
            "## Diversity (mean pairwise MS-SSIM, lower = more diverse)\n"
        );
        let _ = writeln!(s, "{} scales, window sigma {}.\n", o.scales, o.sigma);
        if self.diversity.rows.is_empty() {
            let _ = writeln!(s, "No mask has two or more synthetic samples.\n");
        } else {
            let _ = writeln!(s, "| mask | samples | MS-SSIM |");
            let _ = writeln!(s, "|---|---:|---:|");
            for r in &self.diversity.rows {
                let _ = writeln!(
                    s,
                    "| {} | {} | {:.4} |",
                    r.mask, r.n_samples, r.mean_pairwise_ms_ssim
                );
            }
            s.push('\n');
        }

        let _ = writeln!(s, "## Distribution distance (MMD)\n");
        match &self.mmd {
            None => {
                let _ = writeln!(s, "Needs both real and synthetic images.\n");
            }
            Some(m) => {
                let _ = writeln!(s, "Features: {}.\n", m.features);
                let _ = writeln!(s, "| MMD^2 | sigma | estimator | real | synthetic |");
                let _ = writeln!(s, "|---:|---:|---|---:|---:|");
                let est = match m.estimator {
                    MmdEstimator::Unbiased => "unbiased",
                    MmdEstimator::Biased => "biased",
                };
                let _ = writeln!(
                    s,
                    "| {:.6} | {:.4} | {} | {} | {} |\n",
                    m.value, m.sigma, est, m.n_real, m.n_synthetic
                );
            }
        }

        let _ = writeln!(s, "## Mask adherence\n");
        match &self.adherence {
            None => {
                let _ = writeln!(s, "Needs real images to fit the intensity classifier.\n");
            }
            Some(a) => {
                let _ = writeln!(s, "| label | real voxels | real mean | real std | centre |");
                let _ = writeln!(s, "|---:|---:|---:|---:|---:|");
                for c in &a.classes {
                    let _ = writeln!(
                        s,
                        "| {} | {} | {:.4} | {:.4} | {:.4} |",
                        c.label, c.real_voxels, c.real_mean, c.real_std, c.centre
                    );
                }
                s.push('\n');
                let thresholds: Vec<String> =
                    a.thresholds.iter().map(|t| format!("{t:.4}")).collect();
                let _ = writeln!(s, "Thresholds: {}.\n", thresholds.join(", "));
                let _ = writeln!(
                    s,
                    "Mean Dice (labels != 0): synthetic {}, real ceiling {}.\n",
                    opt(a.mean_dice_synthetic, 4),
                    opt(a.mean_dice_real, 4)
                );
                let _ = writeln!(
                    s,
                    "| image | kind | mask | label | voxels | mean | std | real mean | Dice |"
                );
                let _ = writeln!(s, "|---|---|---|---:|---:|---:|---:|---:|---:|");
                let kinds = a
                    .synthetic
                    .iter()
                    .map(|x| ("synthetic", x))
                    .chain(a.real.iter().map(|x| ("real", x)));
                for (kind, x) in kinds {
                    for l in &x.labels {
                        let _ = writeln!(
                            s,
                            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                            x.name,
                            kind,
                            x.mask,
                            l.label,
                            l.voxels,
                            opt(l.mean, 4),
                            opt(l.std, 4),
                            opt(l.real_mean, 4),
                            opt(l.dice, 4)
                        );
                    }
                }
                s.push('\n');
            }
        }

        if !self.notes.is_empty() {
            let _ = writeln!(s, "## Notes\n");
            for n in &self.notes {
                let _ = writeln!(s, "- {n}");
            }
        }
        s
    }
}
