//! The documentation picture of augmented masks: a real BraTS segmentation and three of its
//! variants under the default settings, each row through its own tumour's centre.

use std::path::PathBuf;

use medddpm_nifti::Volume;
use medddpm_render::{montage, write_png, MontageOptions, RgbImage, Row, SlicePosition, Window};
use medddpm_testdata::dataset;

use super::*;

/// Seeds of the three variants shown (the first flips).
const SEEDS: [u64; 3] = [1, 2, 3];

fn title(rec: &AugmentRecord) -> String {
    let [x, y, z] = rec.rotation_deg;
    let [si, sj, sk] = rec.tumour_shift;
    format!(
        "seed {}: {}rotation ({x:.1}, {y:.1}, {z:.1}) deg, scale {:.2}; tumour shift ({si}, {sj}, {sk}), scale {:.2}",
        rec.seed,
        if rec.flip { "flip, " } else { "" },
        rec.scale,
        rec.tumour_scale
    )
}

/// The voxel nearest the tumour's centroid.
fn tumour_centre(v: &Volume, labels: &TumourLabels) -> [usize; 3] {
    let [ni, nj, _] = v.dims();
    let (mut sum, mut n) = ([0.0; 3], 0.0);
    for (at, &x) in v.data().iter().enumerate() {
        if labels.is_tumour(x as i64) {
            let p = [at % ni, (at / ni) % nj, at / (ni * nj)];
            (0..3).for_each(|r| sum[r] += p[r] as f64);
            n += 1.0;
        }
    }
    sum.map(|s| (s / n).round() as usize)
}

#[test]
#[ignore = "writes docs/pictures/mask-augmentations.png: cargo test -p medddpm-mask picture -- --ignored"]
fn write_docs_picture() {
    let mask = Volume::read(dataset(
        "medddpm-samples/brats2021/seg/BraTS2021_01306_seg.nii.gz",
    ))
    .unwrap();
    let labels = TumourLabels::brats();
    let mut rows = vec![(
        mask.clone(),
        "original: BraTS2021_01306 segmentation".to_string(),
    )];
    for seed in SEEDS {
        let (variant, rec) =
            augment(&mask, Some(&labels), &AugmentConfig::default(), seed).unwrap();
        rows.push((variant, title(&rec)));
    }
    assert!(rows[1].1.contains("flip"), "{}", rows[1].1);
    let pictures: Vec<RgbImage> = rows
        .iter()
        .enumerate()
        .map(|(n, (v, text))| {
            let opts = MontageOptions {
                position: SlicePosition::Voxel(tumour_centre(v, &labels)),
                plane_titles: n == 0,
                ..MontageOptions::default()
            };
            // The labels as greys (brain 4 light), their outlines in colour.
            let window = Window::Fixed { lo: 0.0, hi: 5.0 };
            let row = Row::new(text.clone(), v).with_mask(v).with_window(window);
            montage(&[row], &opts).unwrap()
        })
        .collect();
    let width = pictures.iter().map(RgbImage::width).max().unwrap();
    let mut canvas = RgbImage::new(width, pictures.iter().map(RgbImage::height).sum());
    let mut y = 0;
    for p in &pictures {
        canvas.blit(p, 0, y);
        y += p.height() as i64;
    }
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/pictures/mask-augmentations.png");
    write_png(&path, &canvas).unwrap();
    let bytes = std::fs::metadata(&path).unwrap().len();
    assert!(bytes < 300_000, "{bytes} bytes");
}
