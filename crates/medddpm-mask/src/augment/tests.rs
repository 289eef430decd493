//! End-to-end tests of [`augment`] on small volumes and on the real sample masks.

use std::collections::BTreeSet;

use medddpm_nifti::{Affine, Volume};
use medddpm_testdata::dataset;

use super::geometry::{centre, rotation};
use super::*;

/// The BraTS samples' affine: i runs right-to-left, j anterior-to-posterior.
const LAS: Affine = [
    [-1.0, 0.0, 0.0, -24.0],
    [0.0, -1.0, 0.0, 215.0],
    [0.0, 0.0, 1.0, 6.0],
    [0.0, 0.0, 0.0, 1.0],
];

/// Voxel axis j runs along world x (right to left), i along y, k along z; not cubes.
const PERMUTED: Affine = [
    [0.0, -2.0, 0.0, 30.0],
    [1.5, 0.0, 0.0, -10.0],
    [0.0, 0.0, 1.0, 5.0],
    [0.0, 0.0, 0.0, 1.0],
];

/// No transform but the ones `set` switches on.
fn only(set: impl FnOnce(&mut AugmentConfig)) -> AugmentConfig {
    let mut c = AugmentConfig::none();
    set(&mut c);
    c
}

fn read(rel: &str) -> Volume {
    Volume::read(dataset(rel)).unwrap()
}

fn whole_head(n: usize) -> Volume {
    read(&format!(
        "medddpm-samples/whole_head/mask/sample_{n}.nii.gz"
    ))
}

fn brats() -> Volume {
    read("medddpm-samples/brats2021/seg/BraTS2021_01306_seg.nii.gz")
}

fn labels_of(v: &Volume) -> BTreeSet<i64> {
    v.data().iter().map(|&x| x as i64).collect()
}

fn ijk(v: &Volume, at: usize) -> [usize; 3] {
    let [ni, nj, _] = v.dims();
    [at % ni, (at / ni) % nj, at / (ni * nj)]
}

fn world(v: &Volume, at: usize) -> [f64; 3] {
    v.world(ijk(v, at).map(|x| x as f64))
}

/// Flat indices and labels of the voxels whose label `keep` selects.
fn voxels(v: &Volume, keep: impl Fn(i64) -> bool) -> Vec<(usize, f32)> {
    let data = v.data();
    (0..data.len())
        .filter(|&at| keep(data[at] as i64))
        .map(|at| (at, data[at]))
        .collect()
}

#[test]
fn a_flip_mirrors_the_labels_in_world_space_and_keeps_the_affine() {
    for (affine, axis) in [(LAS, 0), (PERMUTED, 1)] {
        let dims = [6, 5, 4];
        let data = (0..120).map(|x| (x * 7 % 5) as f32).collect();
        let mask = Volume::new(dims, data, affine).unwrap();
        let cfg = only(|c| c.flip_probability = 1.0);
        let (flipped, rec) = augment(&mask, None, &cfg, 1).unwrap();
        assert!(rec.flip);
        assert_eq!(rec.flip_axis, axis);
        assert_eq!(flipped.affine(), mask.affine());
        assert_ne!(flipped.data(), mask.data());
        // The label at world (x, y, z) is now at (2 x_c - x, y, z).
        let x_c = mask.world(centre(dims))[0];
        for at in 0..120 {
            let p = world(&mask, at);
            let mirrored = [2.0 * x_c - p[0], p[1], p[2]];
            let to = (0..120)
                .find(|&b| (0..3).all(|r| (world(&flipped, b)[r] - mirrored[r]).abs() < 1e-9))
                .expect("the mirrored point is a voxel centre");
            assert_eq!(flipped.data()[to], mask.data()[at], "voxel {at}");
        }
        let (back, _) = augment(&flipped, None, &cfg, 2).unwrap();
        assert_eq!(back.data(), mask.data(), "flipping twice is the identity");
    }
}

#[test]
fn nothing_drawn_or_zero_ranges_give_the_mask_back() {
    let mask = whole_head(0);
    let labels = TumourLabels::whole_head();
    let (same, rec) = augment(&mask, Some(&labels), &AugmentConfig::none(), 3).unwrap();
    assert_eq!(same, mask);
    let identity = AugmentRecord {
        seed: 3,
        flip: false,
        flip_axis: 0,
        rotation_deg: [0.0; 3],
        scale: 1.0,
        tumour_shift: [0; 3],
        tumour_scale: 1.0,
        geometry_tries: 1,
        tumour_tries: 0,
    };
    assert_eq!(rec, identity);
    // Every transform on, with rotation 0, scale 1 and a tumour shift of 0 at scale 1.
    let zero = AugmentConfig {
        flip_probability: 0.0,
        max_rotation_deg: 0.0,
        scale_range: [1.0, 1.0],
        max_tumour_shift: 0,
        tumour_scale_range: [1.0, 1.0],
        ..AugmentConfig::default()
    };
    let (same, rec) = augment(&mask, Some(&labels), &zero, 4).unwrap();
    assert_eq!(same.data(), mask.data());
    assert_eq!((rec.geometry_tries, rec.tumour_tries), (1, 1));
}

#[test]
fn whole_head_variants_are_seeded_and_keep_their_labels() {
    let mask = whole_head(1);
    let labels = TumourLabels::whole_head();
    let cfg = AugmentConfig::default();
    let runs: Vec<(Volume, AugmentRecord)> = (0..3)
        .map(|seed| augment(&mask, Some(&labels), &cfg, seed).unwrap())
        .collect();
    let again = augment(&mask, Some(&labels), &cfg, 0).unwrap();
    assert_eq!(again.0, runs[0].0);
    assert_eq!(again.1, runs[0].1);
    for (a, b) in [(0, 1), (0, 2), (1, 2)] {
        assert_ne!(runs[a].0.data(), runs[b].0.data(), "seeds {a} and {b}");
        assert_ne!(runs[a].1, runs[b].1);
    }
    for (variant, rec) in &runs {
        assert!(variant.same_grid(&mask) && variant.header() == mask.header());
        assert_eq!(labels_of(variant), BTreeSet::from([0, 1, 2]));
        assert!(rec.rotation_deg.iter().all(|r| r.abs() <= 10.0));
        assert!((0.9..=1.1).contains(&rec.scale));
        assert!(rec.tumour_shift.iter().all(|s| s.abs() <= 10));
        assert!((0.8..=1.2).contains(&rec.tumour_scale));
        assert!(rec.tumour_tries >= 1);
    }
}

#[test]
fn rotation_and_scaling_carry_the_tumour_about_the_grid_centre() {
    let mask = whole_head(1);
    let labels = TumourLabels::whole_head();
    let cfg = only(|c| {
        c.rotation_probability = 1.0;
        c.scale_probability = 1.0;
    });
    let centroid = |v: &Volume| {
        let t = voxels(v, |l| l == 2);
        let sum = t.iter().fold([0.0; 3], |s, &(at, _)| {
            let p = world(v, at);
            [s[0] + p[0], s[1] + p[1], s[2] + p[2]]
        });
        (sum.map(|x| x / t.len() as f64), t.len())
    };
    let (before, n) = centroid(&mask);
    let c = mask.world(centre(mask.dims()));
    for seed in [5, 6] {
        let (variant, rec) = augment(&mask, Some(&labels), &cfg, seed).unwrap();
        assert!(rec.rotation_deg.iter().any(|r| r.abs() > 1.0), "{rec:?}");
        let (after, m) = centroid(&variant);
        // Volume changes by scale^3 (nearest neighbour: within a few percent).
        let ratio = m as f64 / (n as f64 * rec.scale.powi(3));
        assert!((0.93..1.07).contains(&ratio), "{ratio}");
        // The centroid moves to c + s R (before - c), within a voxel (1.5 mm).
        let r = rotation(rec.rotation_deg);
        let d: [f64; 3] = std::array::from_fn(|i| before[i] - c[i]);
        let expected: [f64; 3] =
            std::array::from_fn(|i| c[i] + rec.scale * (0..3).map(|k| r[i][k] * d[k]).sum::<f64>());
        let off = (0..3)
            .map(|i| (after[i] - expected[i]).powi(2))
            .sum::<f64>()
            .sqrt();
        assert!(off < 1.5, "centroid off by {off} mm");
        assert!(labels_of(&variant).is_subset(&labels_of(&mask)));
    }
}

/// Tumour moves alone: the brain's outline stays, the tumour lands on brain, the old place
/// takes the brain label, and with scale 1 the tumour is the original shifted exactly.
fn tumour_moves(mask: &Volume, labels: &TumourLabels, seeds: std::ops::Range<u64>) {
    let exact = only(|c| {
        c.tumour_probability = 1.0;
        c.tumour_scale_range = [1.0, 1.0];
    });
    let scaled = only(|c| c.tumour_probability = 1.0);
    let is_tumour = |l: i64| labels.is_tumour(l);
    let before = voxels(mask, is_tumour);
    for seed in seeds {
        let (variant, rec) = augment(mask, Some(labels), &exact, seed).unwrap();
        let nonzero = |v: &Volume| v.data().iter().map(|&x| x != 0.0).collect::<Vec<_>>();
        assert_eq!(
            nonzero(&variant),
            nonzero(mask),
            "the brain's outline is kept"
        );
        let [ni, nj, _] = mask.dims();
        let s = rec.tumour_shift;
        let moved: Vec<(usize, f32)> = before
            .iter()
            .map(|&(at, l)| {
                let p = ijk(mask, at).map(|x| x as i64);
                let q: [i64; 3] = std::array::from_fn(|r| p[r] + s[r]);
                ((q[0] + ni as i64 * (q[1] + nj as i64 * q[2])) as usize, l)
            })
            .collect();
        assert_eq!(voxels(&variant, is_tumour), moved, "{rec:?}");
        for &(at, _) in &before {
            let now = variant.data()[at] as i64;
            assert!(
                is_tumour(now) || now == labels.fill(),
                "voxel {at} holds {now}"
            );
        }
        let (variant, rec) = augment(mask, Some(labels), &scaled, seed).unwrap();
        assert_eq!(nonzero(&variant), nonzero(mask));
        let ratio = voxels(&variant, is_tumour).len() as f64
            / (before.len() as f64 * rec.tumour_scale.powi(3));
        assert!((0.85..1.15).contains(&ratio), "{ratio} {rec:?}");
    }
}

#[test]
fn whole_head_tumours_move_inside_the_head() {
    tumour_moves(&whole_head(3), &TumourLabels::whole_head(), 0..3);
}

#[test]
fn brats_tumours_move_inside_the_brain() {
    let mask = brats();
    tumour_moves(&mask, &TumourLabels::brats(), 0..2);
    let (variant, rec) = augment(
        &mask,
        Some(&TumourLabels::brats()),
        &AugmentConfig::default(),
        9,
    )
    .unwrap();
    assert!(labels_of(&variant).is_subset(&BTreeSet::from([0, 1, 2, 3, 4])));
    assert_eq!(rec.flip_axis, 0);
}

#[test]
fn without_tumour_labels_the_tumour_stays() {
    let mask = whole_head(2);
    let cfg = only(|c| c.tumour_probability = 1.0);
    let (same, rec) = augment(&mask, None, &cfg, 1).unwrap();
    assert_eq!(same.data(), mask.data());
    assert_eq!((rec.tumour_shift, rec.tumour_tries), ([0; 3], 0));
}

/// An 8^3 mask whose brain (label 1) is the 2^3 tumour (label 2, voxels 5 and 6 on each
/// axis) plus one voxel.
fn tumour_fills_the_brain() -> Volume {
    let mut data = vec![0.0; 512];
    for k in 5..7 {
        for j in 5..7 {
            for i in 5..7 {
                data[i + 8 * (j + 8 * k)] = 2.0;
            }
        }
    }
    data[7] = 1.0;
    Volume::new([8, 8, 8], data, LAS).unwrap()
}

#[test]
fn no_fitting_draw_is_an_error_naming_the_stage() {
    let mask = tumour_fills_the_brain();
    let labels = TumourLabels::whole_head();
    let grow = only(|c| {
        c.tumour_probability = 1.0;
        c.max_tumour_shift = 0;
        c.tumour_scale_range = [1.8, 2.2];
        c.max_tries = 5;
    });
    let err = augment(&mask, Some(&labels), &grow, 0).unwrap_err();
    let AugmentError::NoFit {
        stage: Stage::Tumour,
        tries: 5,
        off_grid,
        outside_brain,
        vanished,
    } = err
    else {
        panic!("expected a tumour NoFit, got {err:?}");
    };
    assert_eq!((off_grid, outside_brain, vanished), (0, 5, 0));
    assert!(
        err.to_string()
            .starts_with("no tumour move fitted in 5 draws"),
        "{err}"
    );

    // Scaled by 3 or more about the grid's centre (3.5), the tumour leaves the grid.
    let big = only(|c| {
        c.scale_probability = 1.0;
        c.scale_range = [3.0, 3.5];
        c.max_tries = 3;
    });
    let err = augment(&mask, Some(&labels), &big, 0).unwrap_err();
    assert!(
        matches!(
            err,
            AugmentError::NoFit {
                stage: Stage::Geometry,
                off_grid: 3,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn bad_input_is_refused_before_any_work() {
    let mut mask = tumour_fills_the_brain();
    mask.data_mut()[0] = 0.5;
    mask.data_mut()[1] = 0.5;
    let err = augment(&mask, None, &AugmentConfig::default(), 0).unwrap_err();
    assert!(
        matches!(err, AugmentError::NotALabelMap { value, count: 2 } if value == 0.5),
        "{err:?}"
    );
    let bad = AugmentConfig {
        scale_range: [0.0, 1.0],
        ..AugmentConfig::default()
    };
    let err = augment(&tumour_fills_the_brain(), None, &bad, 0).unwrap_err();
    assert!(err.to_string().contains("`scale_range`"), "{err}");
}
