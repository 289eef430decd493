//! MMD, features, label statistics, the tissue classifier and Dice.

use crate::common::*;
use medddpm_metrics::*;

fn gaussian_set(n: usize, dim: usize, mean: f64, seed: u64) -> Vec<Vec<f64>> {
    let mut r = Rng(seed);
    (0..n)
        .map(|_| (0..dim).map(|_| mean + r.normal()).collect())
        .collect()
}

fn rbf(a: &[f64], b: &[f64], sigma: f64) -> f64 {
    let d2: f64 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
    (-d2 / (2.0 * sigma * sigma)).exp()
}

#[test]
fn mmd_of_identical_sets() {
    let x = gaussian_set(20, 4, 0.0, 1);
    let b = mmd2_biased(&x, &x, None).unwrap();
    assert_eq!(b.estimator, MmdEstimator::Biased);
    assert!(b.value.abs() < 1e-12, "{}", b.value);
    // For identical sets the unbiased estimate is exactly -2 (1 - mean off-diagonal k) / m.
    let u = mmd2_unbiased(&x, &x, None).unwrap();
    assert_eq!(u.estimator, MmdEstimator::Unbiased);
    assert_eq!((u.n_x, u.n_y), (20, 20));
    let m = x.len() as f64;
    let mut off = 0.0;
    for (i, a) in x.iter().enumerate() {
        for (j, c) in x.iter().enumerate() {
            if i != j {
                off += rbf(a, c, u.sigma);
            }
        }
    }
    let expected = -2.0 * (1.0 - off / (m * (m - 1.0))) / m;
    assert!(
        (u.value - expected).abs() < 1e-12,
        "{} vs {expected}",
        u.value
    );
    assert!(u.value <= 0.0 && u.value > -2.0 / m);
}

#[test]
fn mmd_separates_different_distributions() {
    let x1 = gaussian_set(40, 4, 0.0, 1);
    let x2 = gaussian_set(40, 4, 0.0, 2);
    let y = gaussian_set(40, 4, 1.5, 3);
    let same = mmd2_unbiased(&x1, &x2, None).unwrap().value;
    let diff = mmd2_unbiased(&x1, &y, None).unwrap().value;
    assert!(diff > 0.1, "different: {diff}");
    assert!(diff > 5.0 * same.abs(), "different {diff} vs same {same}");
    // Same with a fixed bandwidth.
    let same = mmd2_unbiased(&x1, &x2, Some(2.0)).unwrap();
    let diff = mmd2_unbiased(&x1, &y, Some(2.0)).unwrap();
    assert_eq!(diff.sigma, 2.0);
    assert!(diff.value > 5.0 * same.value.abs());
}

#[test]
fn mmd_single_element_falls_back_to_biased() {
    let x = vec![vec![0.0, 0.0]];
    let y = vec![vec![3.0, 4.0], vec![0.0, 0.0]];
    let m = mmd2_unbiased(&x, &y, Some(5.0)).unwrap();
    assert_eq!(m.estimator, MmdEstimator::Biased);
    // k(x, x) = 1; k(y, y) mean = (1 + 1 + 2 e^{-1/2}) / 4; cross mean = (e^{-1/2} + 1) / 2.
    let e = (-0.5f64).exp();
    let want = 1.0 + (2.0 + 2.0 * e) / 4.0 - (e + 1.0);
    assert!((m.value - want).abs() < 1e-14, "{} vs {want}", m.value);
}

#[test]
fn median_heuristic_known_answer() {
    // Distances 1, 3, 2 -> median 2.
    let x = vec![vec![0.0], vec![1.0]];
    let y = vec![vec![3.0]];
    assert_eq!(median_heuristic(&x, &y), 2.0);
    assert_eq!(mmd2_unbiased(&x, &y, None).unwrap().sigma, 2.0);
    // All points equal: bandwidth 1 so the kernel stays defined.
    let z = vec![vec![1.0], vec![1.0]];
    assert_eq!(median_heuristic(&z, &z), 1.0);
}

#[test]
fn mmd_bad_inputs() {
    let x = vec![vec![0.0, 1.0]];
    assert!(matches!(
        mmd2_unbiased(&[], &x, None),
        Err(MetricsError::Empty { .. })
    ));
    assert!(matches!(
        mmd2_unbiased(&x, &[], None),
        Err(MetricsError::Empty { .. })
    ));
    let y = vec![vec![0.0]];
    assert!(is_length_mismatch(&mmd2_unbiased(&x, &y, None), 2, 1));
    assert!(matches!(
        mmd2_unbiased(&x, &x, Some(0.0)),
        Err(MetricsError::InvalidParameter { .. })
    ));
    let nan = vec![vec![f64::NAN, 0.0]];
    assert!(mmd2_unbiased(&x, &nan, None).is_err());
}

#[test]
fn features_known_answer() {
    let data = [-1.0f32, -0.5, 0.0, 0.5, 1.0];
    let opts = FeatureOptions {
        bins: 4,
        low: -1.0,
        high: 1.0,
    };
    let f = volume_features_with(&data, None, &opts).unwrap();
    assert_eq!(f.len(), 6);
    assert_eq!(&f[..4], &[0.2, 0.2, 0.2, 0.4]);
    assert!(f[4].abs() < 1e-15);
    assert!((f[5] - 0.5f64.sqrt()).abs() < 1e-15);
    let mask = [true, true, true, true, false];
    let f = volume_features_with(&data, Some(&mask), &opts).unwrap();
    assert_eq!(&f[..4], &[0.25; 4]);
    assert!((f[4] + 0.25).abs() < 1e-15);
    // Out-of-range values are clamped into the end bins.
    let f = volume_features_with(&[-3.0, 7.0], None, &opts).unwrap();
    assert_eq!(&f[..4], &[0.5, 0.0, 0.0, 0.5]);
    // Default: 32 bins + mean + std, histogram sums to 1.
    let v = smooth([10, 10, 10], 0.0);
    let f = volume_features(&v, None).unwrap();
    assert_eq!(f.len(), 34);
    assert!((f[..32].iter().sum::<f64>() - 1.0).abs() < 1e-12);
    assert!(matches!(
        volume_features(&v, Some(&[false; 1000])),
        Err(MetricsError::EmptyMask { .. })
    ));
    assert!(matches!(
        volume_features(&v, Some(&[true; 3])),
        Err(MetricsError::LengthMismatch { .. })
    ));
}

#[test]
fn label_stats_known_answer() {
    let image = [1.0f32, 2.0, 3.0, 10.0, -1.0, 5.0];
    let labels = [1u32, 1, 1, 2, 0, 2];
    let s = label_stats(&image, &labels).unwrap();
    assert_eq!(s.iter().map(|s| s.label).collect::<Vec<_>>(), [0, 1, 2]);
    assert_eq!((s[0].voxels, s[0].mean, s[0].std), (1, -1.0, 0.0));
    assert_eq!(
        (s[1].voxels, s[1].mean, s[1].min, s[1].max),
        (3, 2.0, 1.0, 3.0)
    );
    assert!((s[1].std - (2.0f64 / 3.0).sqrt()).abs() < 1e-15);
    assert_eq!(
        (s[2].voxels, s[2].mean, s[2].std, s[2].min, s[2].max),
        (2, 7.5, 2.5, 5.0, 10.0)
    );
    assert!(matches!(
        label_stats(&image, &labels[..5]),
        Err(MetricsError::LengthMismatch { .. })
    ));
}

#[test]
fn dice_known_answers() {
    let a = [true, true, true, true, false, false, false, false];
    let b = [true, true, false, false, true, true, false, false];
    assert_eq!(dice(&a, &a).unwrap(), Some(1.0));
    assert_eq!(dice(&a, &b).unwrap(), Some(0.5));
    let not_a: Vec<bool> = a.iter().map(|x| !x).collect();
    assert_eq!(dice(&a, &not_a).unwrap(), Some(0.0));
    assert_eq!(dice(&[false; 4], &[false; 4]).unwrap(), None);
    assert!(matches!(
        dice(&a, &b[..3]),
        Err(MetricsError::LengthMismatch { .. })
    ));

    let l = [0u32, 0, 1, 1, 2, 2];
    let p = [0u32, 1, 1, 1, 2, 3];
    let d = per_label_dice(&l, &p).unwrap();
    assert_eq!(
        d,
        vec![
            (0, Some(2.0 / 3.0)),
            (1, Some(0.8)),
            (2, Some(2.0 / 3.0)),
            (3, Some(0.0))
        ]
    );
    assert_eq!(
        per_label_dice(&l, &l)
            .unwrap()
            .iter()
            .map(|x| x.1)
            .collect::<Vec<_>>(),
        [Some(1.0); 3]
    );
    let d = per_label_dice_for(&l, &p, &[2, 9]).unwrap();
    assert_eq!(d, vec![(2, Some(2.0 / 3.0)), (9, None)]);
}

/// A head-like phantom: background 0, shell 1 (radius 6..10), core 2 (radius < 6).
fn phantom_labels(dims: [usize; 3]) -> Vec<u32> {
    let c = [
        dims[0] as f64 / 2.0,
        dims[1] as f64 / 2.0,
        dims[2] as f64 / 2.0,
    ];
    ball_labels(dims, c, 10.0, 6.0)
}

#[test]
fn classifier_recovers_well_separated_labels() {
    let dims = [24, 24, 24];
    let labels = phantom_labels(dims);
    let means = [-1.0, -0.2, 0.5];
    let r1 = labelled_image(&labels, means, 0.05, 1);
    let r2 = labelled_image(&labels, means, 0.05, 2);
    let clf = TissueClassifier::fit(&[(&r1, &labels), (&r2, &labels)]).unwrap();
    assert_eq!(clf.labels(), [0, 1, 2]);
    // Well separated: k-means keeps the label means as centres.
    for c in clf.classes() {
        assert!((c.centre - c.real.mean).abs() < 1e-12);
        assert!((c.centre - means[c.label as usize]).abs() < 0.01);
    }
    let t = clf.thresholds();
    assert!(
        (t[0] + 0.6).abs() < 0.01 && (t[1] - 0.15).abs() < 0.01,
        "{t:?}"
    );
    let sample = labelled_image(&labels, means, 0.05, 3);
    let pred = clf.classify(&sample);
    for (l, d) in per_label_dice(&labels, &pred).unwrap() {
        assert!(d.unwrap() > 0.99, "label {l}: {d:?}");
    }
    // Swapped tissue intensities: the shell and core are misclassified.
    let swapped = labelled_image(&labels, [-1.0, 0.5, -0.2], 0.05, 4);
    let d = per_label_dice(&labels, &clf.classify(&swapped)).unwrap();
    assert!(d[0].1.unwrap() > 0.99);
    assert!(d[1].1.unwrap() < 0.1 && d[2].1.unwrap() < 0.1, "{d:?}");
}

#[test]
fn classifier_kmeans_moves_centres_towards_clusters() {
    // Label 1 has a few voxels at the low cluster: label means are biased, k-means fixes it.
    let image: Vec<f32> = [vec![0.0f32; 50], vec![1.0; 50]].concat();
    let mut labels = vec![0u32; 50];
    labels.extend(vec![1u32; 50]);
    labels[..10].iter_mut().for_each(|l| *l = 1); // 10 low voxels labelled 1
    let clf = TissueClassifier::fit(&[(&image, &labels)]).unwrap();
    let c0 = clf.class(0).unwrap();
    let c1 = clf.class(1).unwrap();
    assert!((c1.real.mean - 50.0 / 60.0).abs() < 1e-12);
    assert_eq!((c0.centre, c1.centre), (0.0, 1.0));
    assert!(clf.iterations() >= 1);
    assert_eq!(clf.classify(&[0.4, 0.5, 0.6]), [0, 0, 1]);
}

#[test]
fn classifier_bad_inputs() {
    assert!(matches!(
        TissueClassifier::fit(&[]),
        Err(MetricsError::Empty { .. })
    ));
    let img = [0.0f32; 4];
    let lab = [0u32; 3];
    assert!(matches!(
        TissueClassifier::fit(&[(&img, &lab)]),
        Err(MetricsError::LengthMismatch { .. })
    ));
    assert!(matches!(
        TissueClassifier::fit(&[(&[], &[])]),
        Err(MetricsError::Empty { .. })
    ));
}
