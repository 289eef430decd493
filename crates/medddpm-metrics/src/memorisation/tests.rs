//! The memorisation check on small heads with textures: a copy is found and flagged, noisy,
//! shifted and rescaled volumes are told apart, the prefilter keeps the true nearest, and bad
//! training volumes are named.

use super::{nearest_training, MemorisationOptions, MemorisationStage, NamedVolume, VolumeSource};
use crate::MetricsError;

const N: usize = 24;
const DIMS: [usize; 3] = [N; 3];

/// A ball of radius 10 (background -1) filled with a texture of three waves whose directions
/// and phases follow `seed`; values inside lie in about [-0.6, 0.8].
fn head(seed: u64) -> Vec<f32> {
    let texture = medddpm_testdata::wave_texture(
        seed.wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407),
    );
    let mut v = Vec::with_capacity(N * N * N);
    for k in 0..N {
        for j in 0..N {
            for i in 0..N {
                let p = [i, j, k].map(|x| x as f64 - 11.5);
                if p.iter().map(|x| x * x).sum::<f64>() > 100.0 {
                    v.push(-1.0);
                    continue;
                }
                v.push(texture(p));
            }
        }
    }
    v
}

fn named(name: &str, data: Vec<f32>) -> NamedVolume {
    NamedVolume {
        name: name.into(),
        data,
    }
}

fn training() -> Vec<NamedVolume> {
    training_of(6)
}

fn training_of(n: u64) -> Vec<NamedVolume> {
    (0..n)
        .map(|t| named(&format!("train_{t}"), head(t)))
        .collect()
}

/// Deterministic noise in [-amp, amp] inside the head, none in the background.
fn noisy(v: &[f32], amp: f32) -> Vec<f32> {
    v.iter()
        .enumerate()
        .map(|(n, &x)| {
            if x <= -0.9 {
                return x;
            }
            let r = ((n as u64).wrapping_mul(2654435761) % 1000) as f32 / 500.0 - 1.0;
            x + amp * r
        })
        .collect()
}

/// `v` moved by `d` voxels along i (the vacated side is background).
fn shifted(v: &[f32], d: usize) -> Vec<f32> {
    let mut out = vec![-1.0; v.len()];
    for (n, o) in out.iter_mut().enumerate() {
        if n % N >= d {
            *o = v[n - d];
        }
    }
    out
}

fn options(candidates: usize) -> MemorisationOptions {
    MemorisationOptions {
        candidates,
        threads: 2,
        ..Default::default()
    }
}

#[test]
fn copies_are_found_and_new_volumes_are_not_flagged() {
    let train = training();
    let rescaled: Vec<f32> = train[1]
        .data
        .iter()
        .map(|&x| if x > -0.9 { 0.5 * x + 0.2 } else { x })
        .collect();
    let synthetic = vec![
        named("copy_of_3", train[3].data.clone()),
        named("noisy_2", noisy(&train[2].data, 0.5)),
        named("shifted_4", shifted(&train[4].data, 3)),
        named("rescaled_1", rescaled),
    ];
    let mut stages = Vec::new();
    let m = nearest_training(&synthetic, &train[..], DIMS, &options(3), &mut |p| {
        stages.push(p)
    })
    .unwrap();
    let row = |name: &str| m.rows.iter().find(|r| r.synthetic == name).unwrap();

    let copy = row("copy_of_3");
    assert_eq!(copy.nearest.training, "train_3");
    assert!(
        (copy.nearest.ssim - 1.0).abs() < 1e-9,
        "{}",
        copy.nearest.ssim
    );
    assert!((copy.nearest.correlation - 1.0).abs() < 1e-9);
    assert!(copy.near_copy);
    assert_eq!(copy.near_copy_of.as_ref(), Some(&copy.nearest));
    let second = copy.second.as_ref().unwrap();
    assert_ne!(second.training, "train_3");
    assert!(second.ssim < 0.5, "distinct heads: {}", second.ssim);

    let noisy = row("noisy_2");
    assert_eq!(noisy.nearest.training, "train_2");
    assert!(noisy.nearest.ssim < 0.95 && noisy.nearest.correlation < 0.98);
    assert!(!noisy.near_copy, "{noisy:?}");

    let moved = row("shifted_4");
    assert!(moved.nearest.ssim < 0.95, "{moved:?}");
    assert!(!moved.near_copy, "{moved:?}");

    // Another intensity mapping of a training volume: SSIM drops, the correlation does not.
    // It may not even be the SSIM-nearest: the near-copy names it with its scores.
    let scaled = row("rescaled_1");
    let of = scaled.near_copy_of.as_ref().unwrap();
    assert_eq!(of.training, "train_1");
    assert!(of.ssim < 0.3, "{scaled:?}");
    assert!(of.correlation > 0.999);
    assert!(scaled.near_copy);

    assert_eq!(m.near_copies, 2);
    assert_eq!(m.near_copy_fraction, 0.5);
    assert_eq!(m.compared_pairs, 4 * 3);
    assert_eq!(m.nearest_ssim.max, copy.nearest.ssim);
    assert!(m.nearest_ssim.min < m.nearest_ssim.median);
    // Progress: every training volume through the prefilter, then all pairs, in order.
    let last = |stage| stages.iter().rfind(|p| p.stage == stage).copied();
    let pre = last(MemorisationStage::Prefilter).unwrap();
    assert_eq!((pre.done, pre.total), (6, 6));
    let cmp = last(MemorisationStage::Compare).unwrap();
    assert_eq!((cmp.done, cmp.total), (12, 12));
    assert_eq!(stages.last().unwrap().stage, MemorisationStage::Compare);
}

#[test]
fn the_prefilter_keeps_the_true_nearest() {
    // Heavy noise (correlation about 0.6 at full resolution) among 12 training volumes, of
    // which the prefilter passes 2.
    let train = training_of(12);
    let synthetic: Vec<NamedVolume> = (0..12)
        .map(|t| named(&format!("s{t}"), noisy(&train[t].data, 0.6)))
        .chain([named("shifted", shifted(&train[5].data, 2))])
        .collect();
    let exhaustive =
        nearest_training(&synthetic, &train[..], DIMS, &options(0), &mut |_| {}).unwrap();
    let filtered =
        nearest_training(&synthetic, &train[..], DIMS, &options(2), &mut |_| {}).unwrap();
    assert_eq!(exhaustive.compared_pairs, 13 * 12);
    assert_eq!(filtered.compared_pairs, 13 * 2);
    for (e, f) in exhaustive.rows.iter().zip(&filtered.rows) {
        assert_eq!(e.nearest, f.nearest, "{}", e.synthetic);
    }
    for (t, r) in exhaustive.rows.iter().take(12).enumerate() {
        assert_eq!(r.nearest.training, format!("train_{t}"));
    }
    assert!(exhaustive.search.contains("every"));
    assert!(filtered.search.contains("prefilter"));
}

/// A training set whose volume 2 does not load.
struct Failing(Vec<NamedVolume>);

impl VolumeSource for Failing {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn name(&self, index: usize) -> String {
        self.0[index].name.clone()
    }

    fn load(&self, index: usize) -> Result<Vec<f32>, String> {
        match index {
            2 => Err("not a NIfTI file".into()),
            _ => Ok(self.0[index].data.clone()),
        }
    }
}

/// The error of checking `synthetic` against `training` with every pair compared.
fn refusal(synthetic: &[NamedVolume], training: &[NamedVolume]) -> MetricsError {
    nearest_training(synthetic, training, DIMS, &options(0), &mut |_| {}).unwrap_err()
}

#[test]
fn bad_volumes_are_named() {
    let train = training();
    let synthetic = vec![named("s", train[0].data.clone())];
    for candidates in [0, 2] {
        let err = nearest_training(
            &synthetic,
            &Failing(train.clone()),
            DIMS,
            &options(candidates),
            &mut |_| {},
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "training volume 'train_2': not a NIfTI file"
        );
    }
    let mut short = train.clone();
    short[4].data.truncate(100);
    let err = refusal(&synthetic, &short).to_string();
    assert!(
        err.contains("train_4") && err.contains("length 100"),
        "{err}"
    );
    let mut nan = train.clone();
    nan[1].data[7] = f32::NAN;
    let err = refusal(&synthetic, &nan);
    assert!(
        matches!(err, MetricsError::NonFinite { count: 1, .. }),
        "{err}"
    );
    let blank = vec![named("blank", vec![-1.0; N * N * N])];
    let only_blank = [named("air", vec![-1.0; N * N * N])];
    let err = refusal(&blank, &only_blank).to_string();
    assert!(
        err.contains("'blank' vs training 'air'") && err.contains("head"),
        "{err}"
    );
    let bad = MemorisationOptions {
        prefilter_factor: 0,
        ..options(2)
    };
    assert!(nearest_training(&synthetic, &train[..], DIMS, &bad, &mut |_| {}).is_err());
}
