//! [`EvalReport::to_markdown`]: the report as Markdown tables, one function per section.

use std::fmt::Write as _;

use crate::memorisation::{MemorisationSection, Neighbour};
use crate::mmd::MmdEstimator;

use super::sections::{AdherenceSection, DiversitySection, EvalReport, MmdSection, PairedSection};

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.prec$}"))
}

/// PSNR with 2 decimals; `None` (identical volumes) is infinite.
fn psnr(p: Option<f64>) -> String {
    p.map_or_else(|| "inf".into(), |x| format!("{x:.2}"))
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
        if self.n_masks > 0 {
            paired_markdown(&mut s, &self.paired);
            diversity_markdown(&mut s, &self.diversity);
            mmd_markdown(&mut s, self.mmd.as_ref());
            adherence_markdown(&mut s, self.adherence.as_ref());
        }
        if let Some(m) = &self.memorisation {
            memorisation_markdown(&mut s, m);
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

/// A Markdown table: the `header` and `align` rows, then `rows`, then a blank line.
fn table(s: &mut String, header: &str, align: &str, rows: impl IntoIterator<Item = String>) {
    let _ = writeln!(s, "{header}\n{align}");
    for r in rows {
        let _ = writeln!(s, "{r}");
    }
    s.push('\n');
}

fn paired_markdown(s: &mut String, paired: &PairedSection) {
    let _ = writeln!(s, "## Paired fidelity (synthetic vs real, same mask)\n");
    let _ = writeln!(s, "Region: {}.\n", paired.region);
    if paired.rows.is_empty() {
        let _ = writeln!(s, "No synthetic image shares a mask with a real image.\n");
        return;
    }
    let rows = paired.rows.iter().map(|r| {
        format!(
            "| {} | {} | {} | {} | {} | {:.4} | {:.4} |",
            r.mask,
            r.sample,
            r.real,
            r.region_voxels,
            psnr(r.psnr),
            r.ssim,
            r.mae
        )
    });
    let mean = paired.mean.as_ref().map(|m| {
        format!(
            "| **mean** | | | | {} | {:.4} | {:.4} |",
            psnr(m.psnr),
            m.ssim,
            m.mae
        )
    });
    table(
        s,
        "| mask | sample | real | voxels | PSNR (dB) | SSIM | MAE |",
        "|---|---|---|---:|---:|---:|---:|",
        rows.chain(mean),
    );
}

fn diversity_markdown(s: &mut String, diversity: &DiversitySection) {
    let o = &diversity.ms_ssim;
    let _ = writeln!(
        s,
        "## Diversity (mean pairwise MS-SSIM, lower = more diverse)\n"
    );
    let _ = writeln!(s, "{} scales, window sigma {}.\n", o.scales, o.sigma);
    if diversity.rows.is_empty() {
        let _ = writeln!(s, "No mask has two or more synthetic samples.\n");
        return;
    }
    let rows = diversity.rows.iter().map(|r| {
        format!(
            "| {} | {} | {:.4} |",
            r.mask, r.n_samples, r.mean_pairwise_ms_ssim
        )
    });
    table(s, "| mask | samples | MS-SSIM |", "|---|---:|---:|", rows);
}

fn mmd_markdown(s: &mut String, mmd: Option<&MmdSection>) {
    let _ = writeln!(s, "## Distribution distance (MMD)\n");
    let Some(m) = mmd else {
        let _ = writeln!(s, "Needs both real and synthetic images.\n");
        return;
    };
    let _ = writeln!(s, "Features: {}.\n", m.features);
    let est = match m.estimator {
        MmdEstimator::Unbiased => "unbiased",
        MmdEstimator::Biased => "biased",
    };
    let row = format!(
        "| {:.6} | {:.4} | {} | {} | {} |",
        m.value, m.sigma, est, m.n_real, m.n_synthetic
    );
    table(
        s,
        "| MMD^2 | sigma | estimator | real | synthetic |",
        "|---:|---:|---|---:|---:|",
        [row],
    );
}

fn adherence_markdown(s: &mut String, adherence: Option<&AdherenceSection>) {
    let _ = writeln!(s, "## Mask adherence\n");
    let Some(a) = adherence else {
        let _ = writeln!(s, "Needs real images to fit the intensity classifier.\n");
        return;
    };
    let classes = a.classes.iter().map(|c| {
        format!(
            "| {} | {} | {:.4} | {:.4} | {:.4} |",
            c.label, c.real_voxels, c.real_mean, c.real_std, c.centre
        )
    });
    table(
        s,
        "| label | real voxels | real mean | real std | centre |",
        "|---:|---:|---:|---:|---:|",
        classes,
    );
    let thresholds: Vec<String> = a.thresholds.iter().map(|t| format!("{t:.4}")).collect();
    let _ = writeln!(s, "Thresholds: {}.\n", thresholds.join(", "));
    let _ = writeln!(
        s,
        "Mean Dice (labels != 0): synthetic {}, real ceiling {}.\n",
        opt(a.mean_dice_synthetic, 4),
        opt(a.mean_dice_real, 4)
    );
    let kinds = a
        .synthetic
        .iter()
        .map(|x| ("synthetic", x))
        .chain(a.real.iter().map(|x| ("real", x)));
    let rows = kinds.flat_map(|(kind, x)| {
        x.labels.iter().map(move |l| {
            format!(
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
            )
        })
    });
    table(
        s,
        "| image | kind | mask | label | voxels | mean | std | real mean | Dice |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
        rows,
    );
}

/// Name, SSIM and correlation of a neighbour, as three table cells.
fn neighbour_cells(n: Option<&Neighbour>) -> String {
    n.map_or_else(
        || "- | - | -".into(),
        |n| format!("{} | {:.4} | {:.4}", n.training, n.ssim, n.correlation),
    )
}

fn memorisation_markdown(s: &mut String, m: &MemorisationSection) {
    let o = &m.options;
    let _ = writeln!(s, "## Memorisation (nearest training volume)\n");
    let _ = writeln!(
        s,
        "{} synthetic against {} training volumes; head: {}. Search: {} ({} pairs).\n",
        m.n_synthetic, m.n_training, m.head, m.search, m.compared_pairs
    );
    let rows = m.rows.iter().map(|r| {
        format!(
            "| {} | {} | {} | {} |",
            r.synthetic,
            neighbour_cells(Some(&r.nearest)),
            neighbour_cells(r.second.as_ref()),
            r.near_copy_of
                .as_ref()
                .map_or("no", |n| n.training.as_str())
        )
    });
    table(
        s,
        "| synthetic | nearest | SSIM | corr. | second | SSIM | corr. | near-copy of |",
        "|---|---|---:|---:|---|---:|---:|---|",
        rows,
    );
    let (ss, sc) = (&m.nearest_ssim, &m.nearest_correlation);
    let _ = writeln!(
        s,
        "Near-copies (a training volume at SSIM >= {} or correlation >= {}): **{} of {} \
         ({:.1}%)**. \
         Nearest SSIM min {:.4}, median {:.4}, max {:.4}; its correlation min {:.4}, median \
         {:.4}, max {:.4}.\n",
        o.ssim_threshold,
        o.correlation_threshold,
        m.near_copies,
        m.n_synthetic,
        100.0 * m.near_copy_fraction,
        ss.min,
        ss.median,
        ss.max,
        sc.min,
        sc.median,
        sc.max
    );
}
