//! The head-mask routine on real T1s: Colin27's brain label against its skull-stripped
//! `ch2bet`, and the MNI152 template's against its grey+white-matter maps.

use medddpm_nifti::Volume;
use medddpm_prepare::head_mask::{head_mask, HeadMaskSettings, BRAIN};
use medddpm_prepare::morphology::{dice, fill_holes};

fn brain_dice(t1: &str, reference: &[bool], classes: usize) -> f64 {
    let path = medddpm_testdata::dataset(t1);
    let image = Volume::read(&path).unwrap();
    let settings = HeadMaskSettings {
        brain: true,
        brain_classes: classes,
        ..Default::default()
    };
    let m = head_mask(&image, &path, &settings).unwrap();
    let brain: Vec<bool> = m.labels.iter().map(|&l| l == BRAIN).collect();
    let d = dice(&brain, reference);
    eprintln!(
        "{t1} ({classes} classes): head threshold {:.2}, brain threshold {:.2}, brain voxels {} (reference {}), Dice {d:.4}",
        m.head_threshold,
        m.brain_threshold.unwrap(),
        brain.iter().filter(|b| **b).count(),
        reference.iter().filter(|b| **b).count(),
    );
    d
}

/// About 6 s in a debug build.
#[test]
fn colin27_brain_against_ch2bet() {
    let bet = Volume::read(medddpm_testdata::dataset("colin27/ch2bet.nii.gz")).unwrap();
    let reference: Vec<bool> = bet.data().iter().map(|&v| v > 0.0).collect();
    let d = brain_dice("colin27/ch2.nii.gz", &reference, 2);
    assert!(d > 0.95, "Dice {d}");
}

#[test]
#[ignore = "two passes over the template, ~12 s in a debug build: cargo test --release -p medddpm-prepare --test real_head_mask -- --ignored --nocapture"]
fn mni152_brain_against_tissue_maps() {
    let read = |m: &str| {
        Volume::read(medddpm_testdata::dataset(&format!(
            "mni152-2009/mni_icbm152_{m}_tal_nlin_sym_09a_converted.nii.gz"
        )))
        .unwrap()
    };
    let (gm, wm) = (read("gm"), read("wm"));
    let tissue: Vec<bool> = gm
        .data()
        .iter()
        .zip(wm.data())
        .map(|(a, b)| (a + b) / 255.0 > 0.5)
        .collect();
    let reference = fill_holes(&tissue, gm.dims());
    // nilearn's template is skull-stripped: 2 classes inside the "head" split grey from
    // white matter, 3 find the brain.
    let t1 = "mni152-2009/mni_icbm152_t1_tal_nlin_sym_09a_converted.nii.gz";
    let d2 = brain_dice(t1, &reference, 2);
    let d3 = brain_dice(t1, &reference, 3);
    assert!(
        d3 > 0.95 && d2 > 0.8,
        "Dice {d2} (2 classes), {d3} (3 classes)"
    );
}
