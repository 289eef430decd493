//! 128^3 timings, ignored by default (too slow for the dev profile). Run with
//! `cargo test --release -p medddpm-metrics --test timing -- --ignored --nocapture`.

use std::time::Instant;

use crate::common::*;
use medddpm_metrics::*;

#[test]
#[ignore]
fn full_size_timings() {
    let dims = [128, 128, 128];
    let a = add_noise(&smooth(dims, 0.0), 0.1, 1);
    let b = add_noise(&smooth(dims, 0.5), 0.1, 2);
    let t = Instant::now();
    let s = ssim3d(&a, &b, dims, None, 2.0).unwrap();
    println!("ssim3d 128^3: {s:.4} in {:.2?}", t.elapsed());
    let t = Instant::now();
    let m = ms_ssim3d(&a, &b, dims, 2.0).unwrap();
    println!("ms_ssim3d 128^3 (5 scales): {m:.4} in {:.2?}", t.elapsed());
    let vols: Vec<Vec<f32>> = (0..4).map(|s| add_noise(&a, 0.1, 10 + s)).collect();
    let refs: Vec<&[f32]> = vols.iter().map(|v| v.as_slice()).collect();
    let t = Instant::now();
    let p = mean_pairwise_ms_ssim(&refs, dims, 2.0, &MsSsimOptions::default()).unwrap();
    println!(
        "mean_pairwise_ms_ssim 4 x 128^3 (6 pairs): {p:.4} in {:.2?}",
        t.elapsed()
    );
    let labels: Vec<u32> = a
        .iter()
        .map(|&x| {
            if x < -0.3 {
                0
            } else if x < 0.3 {
                1
            } else {
                2
            }
        })
        .collect();
    let t = Instant::now();
    let clf = TissueClassifier::fit(&[(&a, &labels), (&b, &labels)]).unwrap();
    let pred = clf.classify(&b);
    println!(
        "classifier fit 2 x 128^3 + classify: {} iterations in {:.2?}, dice {:?}",
        clf.iterations(),
        t.elapsed(),
        per_label_dice(&labels, &pred).unwrap()
    );
    assert!(s > 0.0 && s < 1.0 && m > 0.0 && m < 1.0 && p > 0.0 && p < 1.0);
}

#[test]
#[ignore]
fn memorisation_timing() {
    let dims = [128, 128, 128];
    let training: Vec<NamedVolume> = (0..20)
        .map(|t| NamedVolume {
            name: format!("t{t}"),
            data: add_noise(&smooth(dims, t as f64 * 0.7), 0.1, 100 + t),
        })
        .collect();
    let synthetic: Vec<NamedVolume> = (0..4)
        .map(|s| NamedVolume {
            name: format!("s{s}"),
            data: add_noise(&training[s * 5].data, 0.1, 200 + s as u64),
        })
        .collect();
    let options = MemorisationOptions::default();
    let t = Instant::now();
    let m = nearest_training(&synthetic, &training[..], dims, &options, &mut |_| {}).unwrap();
    println!(
        "nearest_training 4 x 20 at 128^3 ({} pairs after the prefilter, {} threads): {:.2?}",
        m.compared_pairs,
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        t.elapsed()
    );
    for (s, r) in m.rows.iter().enumerate() {
        assert_eq!(r.nearest.training, format!("t{}", s * 5));
    }
}
