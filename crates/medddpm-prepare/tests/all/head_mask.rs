//! `prepare head-mask` on a synthetic head of known geometry: scalp (bright), skull (dark),
//! brain (bright) and a thin "brainstem" through the skull, with noise. The head and brain
//! labels must match the spheres they came from.

use medddpm_nifti::{Affine, DataType, Volume};
use medddpm_prepare::head_mask::{
    head_mask, prepare_head_masks, HeadMaskConfig, HeadMaskSettings, BRAIN, HEAD,
};
use medddpm_prepare::morphology::dice;
use medddpm_prepare::Silent;
use rand::{Rng, SeedableRng};

const N: usize = 72;
const MM: f64 = 2.0;
const HEAD_R: f64 = 62.0;
const SKULL_R: f64 = 56.0;
const BRAIN_R: f64 = 46.0;

fn affine() -> Affine {
    [
        [MM, 0.0, 0.0, -70.0],
        [0.0, MM, 0.0, -80.0],
        [0.0, 0.0, MM, -60.0],
        [0.0, 0.0, 0.0, 1.0],
    ]
}

/// The image and the true head and brain masks.
fn phantom() -> (Volume, Vec<bool>, Vec<bool>) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
    let c = (N as f64 - 1.0) / 2.0;
    let (mut data, mut head, mut brain) = (Vec::new(), Vec::new(), Vec::new());
    for k in 0..N {
        for j in 0..N {
            for i in 0..N {
                let d = [i, j, k].map(|x| (x as f64 - c) * MM);
                let r = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt();
                // A one-voxel strand down from the brain through the skull to the scalp.
                let stem = i == N / 2 && j == N / 2 && d[2] < 0.0;
                let value = if r < BRAIN_R || (stem && r < HEAD_R) {
                    100.0
                } else if r < SKULL_R {
                    40.0
                } else if r < HEAD_R {
                    120.0
                } else {
                    5.0
                };
                let noise = (0..4).map(|_| rng.random::<f64>() - 0.5).sum::<f64>() * 6.0;
                data.push((value + noise) as f32);
                head.push(r < HEAD_R);
                brain.push(r < BRAIN_R);
            }
        }
    }
    (Volume::new([N; 3], data, affine()).unwrap(), head, brain)
}

#[test]
fn head_and_brain_match_the_known_geometry() {
    let (image, head, brain) = phantom();
    let settings = HeadMaskSettings {
        brain: true,
        ..HeadMaskSettings::default()
    };
    let m = head_mask(&image, "phantom".as_ref(), &settings).unwrap();
    let got_head: Vec<bool> = m.labels.iter().map(|&l| l >= HEAD).collect();
    let got_brain: Vec<bool> = m.labels.iter().map(|&l| l == BRAIN).collect();
    let (dh, db) = (dice(&got_head, &head), dice(&got_brain, &brain));
    eprintln!(
        "phantom: head threshold {:.1}, brain threshold {:.1}, Dice head {dh:.4}, brain {db:.4}",
        m.head_threshold,
        m.brain_threshold.unwrap()
    );
    assert!(dh > 0.95 && db > 0.95, "Dice head {dh}, brain {db}");
    // Thresholds in the image's units: the head's between background and skull or tissue,
    // the brain's between skull and brain.
    assert!(
        m.head_threshold > 10.0 && m.head_threshold < 100.0,
        "{}",
        m.head_threshold
    );
    let tb = m.brain_threshold.unwrap();
    assert!(tb > 45.0 && tb < 95.0, "{tb}");
    // Without `brain`, only labels 0 and 1.
    let head_only = head_mask(&image, "phantom".as_ref(), &HeadMaskSettings::default()).unwrap();
    assert!(head_only.labels.iter().all(|&l| l <= HEAD));
    assert!(head_only.brain_threshold.is_none());
}

#[test]
fn the_command_writes_label_maps_on_the_image_grid_and_reports_thresholds() {
    let tmp = tempfile::tempdir().unwrap();
    let images = tmp.path().join("images");
    std::fs::create_dir_all(&images).unwrap();
    let (image, _, _) = phantom();
    image.write(images.join("p1.nii.gz")).unwrap();
    image
        .with_data(vec![3.0; image.voxel_count()])
        .unwrap()
        .write(images.join("flat.nii"))
        .unwrap();
    let out = tmp.path().join("out");
    let config = HeadMaskConfig {
        settings: HeadMaskSettings {
            brain: true,
            ..HeadMaskSettings::default()
        },
        ..HeadMaskConfig::default()
    };
    let report = prepare_head_masks(&images, &out, &config, &mut Silent).unwrap();
    assert_eq!(report.cases_done, 1);
    assert_eq!(report.skipped[0].case, "flat");
    assert!(
        report.skipped[0].reason.contains("flat.nii"),
        "{}",
        report.skipped[0].reason
    );
    let labels = Volume::read(out.join("p1.nii.gz")).unwrap();
    assert_eq!(labels.dtype(), DataType::U8);
    assert!(labels.same_grid(&image));
    let summary = report.summary();
    assert!(
        summary.contains("p1: head threshold") && summary.contains("brain threshold"),
        "{summary}"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("prepare-report.json")).unwrap()).unwrap();
    assert!(json["done"][0]["brain_threshold"].as_f64().is_some());
    assert_eq!(json["settings"]["config"]["brain_erosion_mm"], 8.0);
}
