//! Mask adherence: do the generated intensities follow the label map they were conditioned on?
//!
//! Per-label intensity statistics compare a sample's tissue intensities with the real data's;
//! a [`TissueClassifier`] fitted on real images segments a sample by intensity alone, and the
//! Dice overlap of that segmentation with the conditioning mask measures adherence. The same
//! Dice computed on the real images is the ceiling an intensity-only classifier can reach.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{check_len, MetricsError, Result};

/// Intensity statistics of the voxels carrying one label.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LabelStats {
    /// The label.
    pub label: u32,
    /// Voxels with this label.
    pub voxels: u64,
    /// Mean intensity.
    pub mean: f64,
    /// Population standard deviation.
    pub std: f64,
    /// Smallest intensity.
    pub min: f64,
    /// Largest intensity.
    pub max: f64,
}

#[derive(Clone, Copy)]
struct Acc {
    n: u64,
    sum: f64,
    sum_sq: f64,
    min: f64,
    max: f64,
}

impl Default for Acc {
    fn default() -> Self {
        Self {
            n: 0,
            sum: 0.0,
            sum_sq: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }
}

impl Acc {
    fn add(&mut self, x: f64) {
        self.n += 1;
        self.sum += x;
        self.sum_sq += x * x;
        self.min = self.min.min(x);
        self.max = self.max.max(x);
    }

    fn merge(&mut self, o: &Acc) {
        self.n += o.n;
        self.sum += o.sum;
        self.sum_sq += o.sum_sq;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
    }

    fn stats(&self, label: u32) -> LabelStats {
        let n = self.n as f64;
        let mean = self.sum / n;
        LabelStats {
            label,
            voxels: self.n,
            mean,
            std: (self.sum_sq / n - mean * mean).max(0.0).sqrt(),
            min: self.min,
            max: self.max,
        }
    }
}

/// Accumulates per label; runs of equal labels (the common case in a label map) touch the map
/// once per run rather than once per voxel.
fn accumulate(image: &[f32], labels: &[u32], into: &mut BTreeMap<u32, Acc>) {
    let mut current: Option<(u32, Acc)> = None;
    for (&x, &l) in image.iter().zip(labels) {
        match &mut current {
            Some((cl, acc)) if *cl == l => acc.add(x as f64),
            _ => {
                if let Some((cl, acc)) = current.take() {
                    into.entry(cl).or_default().merge(&acc);
                }
                let mut acc = Acc::default();
                acc.add(x as f64);
                current = Some((l, acc));
            }
        }
    }
    if let Some((cl, acc)) = current {
        into.entry(cl).or_default().merge(&acc);
    }
}

/// Intensity statistics per label present in `labels`, sorted by label.
pub fn label_stats(image: &[f32], labels: &[u32]) -> Result<Vec<LabelStats>> {
    check_len("label map", image.len(), labels.len())?;
    let mut map = BTreeMap::new();
    accumulate(image, labels, &mut map);
    Ok(map.iter().map(|(&l, a)| a.stats(l)).collect())
}

/// One tissue class of a [`TissueClassifier`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TissueClass {
    /// The label it predicts.
    pub label: u32,
    /// Statistics of the real voxels carrying this label.
    pub real: LabelStats,
    /// Class centre after k-means refinement.
    pub centre: f64,
}

/// Intensity-only segmentation learnt from real images and their label maps.
///
/// Each label present in the real data is one class. Centres start at the labels' real mean
/// intensities and are refined by 1-D k-means (Lloyd) on the pooled real intensities; a voxel
/// is assigned to the class with the nearest centre, i.e. the thresholds lie halfway between
/// adjacent centres (a value exactly on a threshold goes to the lower class). Every label,
/// background 0 included, is a class.
///
/// Serialisable for the record; not deserialisable, so a classifier always comes from `fit`
/// and has at least one class.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TissueClassifier {
    /// Classes sorted by centre, ascending.
    classes: Vec<TissueClass>,
    /// Lloyd iterations run.
    iterations: usize,
}

const MAX_ITERATIONS: usize = 100;

impl TissueClassifier {
    /// Fits on `(image, labels)` pairs; pairs may differ in size but each pair's two slices
    /// must have the same length.
    pub fn fit(pairs: &[(&[f32], &[u32])]) -> Result<Self> {
        if pairs.is_empty() {
            return Err(MetricsError::Empty {
                what: "classifier training set".into(),
            });
        }
        let mut map = BTreeMap::new();
        for (n, (image, labels)) in pairs.iter().enumerate() {
            check_len(
                &format!("label map of training pair {n}"),
                image.len(),
                labels.len(),
            )?;
            accumulate(image, labels, &mut map);
        }
        if map.is_empty() {
            return Err(MetricsError::Empty {
                what: "classifier training voxels".into(),
            });
        }
        let mut classes: Vec<TissueClass> = map
            .iter()
            .map(|(&label, a)| {
                let real = a.stats(label);
                TissueClass {
                    label,
                    real,
                    centre: real.mean,
                }
            })
            .collect();
        if classes.iter().any(|c| !c.centre.is_finite()) {
            return Err(MetricsError::InvalidParameter {
                name: "training images",
                value: "non-finite".into(),
                reason: "real intensities must be finite",
            });
        }
        sort_classes(&mut classes);
        let spread = classes.last().map_or(0.0, |c| c.real.max) - classes[0].real.min;
        let tolerance = 1e-12 * spread.max(1.0);
        let mut iterations = 0;
        while iterations < MAX_ITERATIONS && classes.len() > 1 {
            iterations += 1;
            let thresholds = thresholds_of(&classes);
            let mut sums = vec![(0.0f64, 0u64); classes.len()];
            for (image, _) in pairs {
                for &x in image.iter() {
                    let s = &mut sums[class_index(&thresholds, x as f64)];
                    s.0 += x as f64;
                    s.1 += 1;
                }
            }
            let mut moved = 0.0f64;
            for (c, &(sum, n)) in classes.iter_mut().zip(&sums) {
                // An emptied class keeps its centre rather than vanishing.
                if n > 0 {
                    let centre = sum / n as f64;
                    moved = moved.max((centre - c.centre).abs());
                    c.centre = centre;
                }
            }
            sort_classes(&mut classes);
            if moved <= tolerance {
                break;
            }
        }
        Ok(Self {
            classes,
            iterations,
        })
    }

    /// The classes, sorted by centre.
    pub fn classes(&self) -> &[TissueClass] {
        &self.classes
    }

    /// Labels the classifier can predict, ascending.
    pub fn labels(&self) -> Vec<u32> {
        let mut l: Vec<u32> = self.classes.iter().map(|c| c.label).collect();
        l.sort_unstable();
        l
    }

    /// The class of `label`, if it was present in the real data.
    pub fn class(&self, label: u32) -> Option<&TissueClass> {
        self.classes.iter().find(|c| c.label == label)
    }

    /// Intensity thresholds between consecutive classes (halfway between centres), ascending.
    pub fn thresholds(&self) -> Vec<f64> {
        thresholds_of(&self.classes)
    }

    /// Lloyd iterations run during fitting.
    pub fn iterations(&self) -> usize {
        self.iterations
    }

    /// Label of the nearest centre for every voxel. NaN goes to the lowest class.
    pub fn classify(&self, image: &[f32]) -> Vec<u32> {
        let t = self.thresholds();
        image
            .iter()
            .map(|&x| self.classes[class_index(&t, x as f64)].label)
            .collect()
    }
}

fn sort_classes(classes: &mut [TissueClass]) {
    classes.sort_by(|a, b| a.centre.total_cmp(&b.centre).then(a.label.cmp(&b.label)));
}

fn thresholds_of(classes: &[TissueClass]) -> Vec<f64> {
    classes
        .windows(2)
        .map(|w| 0.5 * (w[0].centre + w[1].centre))
        .collect()
}

/// Number of thresholds strictly below `x` (few classes: a linear scan beats a search).
fn class_index(thresholds: &[f64], x: f64) -> usize {
    thresholds.iter().take_while(|&&t| t < x).count()
}

/// Dice overlap `2 |A ∩ B| / (|A| + |B|)`; `None` when both sets are empty (undefined).
pub fn dice(a: &[bool], b: &[bool]) -> Result<Option<f64>> {
    check_len("second mask", a.len(), b.len())?;
    let (mut both, mut total) = (0u64, 0u64);
    for (&x, &y) in a.iter().zip(b) {
        both += (x && y) as u64;
        total += x as u64 + y as u64;
    }
    Ok((total > 0).then(|| 2.0 * both as f64 / total as f64))
}

/// Counts per label: (in `labels`, in `predicted`, in both).
fn label_counts(labels: &[u32], predicted: &[u32]) -> Result<BTreeMap<u32, [u64; 3]>> {
    check_len("predicted label map", labels.len(), predicted.len())?;
    let mut counts: BTreeMap<u32, [u64; 3]> = BTreeMap::new();
    for (&l, &p) in labels.iter().zip(predicted) {
        counts.entry(l).or_default()[0] += 1;
        let e = counts.entry(p).or_default();
        e[1] += 1;
        if l == p {
            e[2] += 1;
        }
    }
    Ok(counts)
}

fn dice_of(c: Option<&[u64; 3]>) -> Option<f64> {
    let &[a, b, both] = c?;
    (a + b > 0).then(|| 2.0 * both as f64 / (a + b) as f64)
}

/// Dice per label over every label present in either map, ascending.
pub fn per_label_dice(labels: &[u32], predicted: &[u32]) -> Result<Vec<(u32, Option<f64>)>> {
    let counts = label_counts(labels, predicted)?;
    Ok(counts.iter().map(|(&l, c)| (l, dice_of(Some(c)))).collect())
}

/// Dice for the given labels in the given order; `None` for a label absent from both maps.
pub fn per_label_dice_for(
    labels: &[u32],
    predicted: &[u32],
    which: &[u32],
) -> Result<Vec<(u32, Option<f64>)>> {
    let counts = label_counts(labels, predicted)?;
    Ok(which
        .iter()
        .map(|&l| (l, dice_of(counts.get(&l))))
        .collect())
}
