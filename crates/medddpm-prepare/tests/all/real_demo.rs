//! `prepare real-demo` on the shared MNI152 and Colin27 files: a small grid, two copies,
//! repeated for the same seed; labels {0, 1, 2}, images in [-1, 1], affines covering the head.

use std::path::Path;

use medddpm_nifti::{DataType, Volume};
use medddpm_prepare::real_demo::{prepare_real_demo, RealDemoConfig, SUBJECTS};
use medddpm_prepare::{PrepareError, Silent};

fn config() -> RealDemoConfig {
    RealDemoConfig {
        copies: 2,
        grid: [16; 3],
        seed: 5,
        ..RealDemoConfig::default()
    }
}

fn read_all(out: &Path) -> Vec<(Volume, Volume)> {
    SUBJECTS
        .iter()
        .flat_map(|s| (0..2).map(move |c| format!("{s}_{c}.nii.gz")))
        .map(|f| {
            (
                Volume::read(out.join("image").join(&f)).unwrap(),
                Volume::read(out.join("mask").join(&f)).unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_seed_gives_the_same_labelled_copies() {
    let data = medddpm_testdata::shared_dir().join("datasets");
    let tmp = tempfile::tempdir().unwrap();
    let (out1, out2) = (tmp.path().join("a"), tmp.path().join("b"));
    let report = prepare_real_demo(&data, &out1, &config(), &mut Silent).unwrap();
    assert_eq!(report.cases_done, 4, "{:?}", report.skipped);
    prepare_real_demo(&data, &out2, &config(), &mut Silent).unwrap();
    let (first, second) = (read_all(&out1), read_all(&out2));
    for ((a_img, a_mask), (b_img, b_mask)) in first.iter().zip(&second) {
        assert_eq!(a_img.data(), b_img.data());
        assert_eq!(a_mask.data(), b_mask.data());
        assert_eq!(a_img.affine(), b_img.affine());
    }
    assert_ne!(first[0].0.data(), first[1].0.data(), "copies differ");
    for (d, (image, mask)) in report.done.iter().zip(&first) {
        assert_eq!(image.dims(), [16; 3]);
        assert!(image.same_grid(mask));
        assert_eq!(mask.dtype(), DataType::U8);
        let lo = image.data().iter().copied().fold(f32::MAX, f32::min);
        let hi = image.data().iter().copied().fold(f32::MIN, f32::max);
        assert_eq!((lo, hi), (-1.0, 1.0), "{}", d.case);
        let labels: Vec<i64> = d.labels.keys().copied().collect();
        assert_eq!(labels, [0, 1, 2], "{}", d.case);
        // Cubic voxels of about a 16th of a head with its margin (12-15 mm).
        let s = image.spacing();
        assert!(
            s[0] > 10.0 && s[0] < 16.0 && (s[0] - s[1]).abs() < 1e-6 && (s[0] - s[2]).abs() < 1e-6,
            "{s:?}"
        );
        eprintln!(
            "{}: spacing {:.2} mm, labels {:?}, flip {}, gamma {:.3}",
            d.case, s[0], d.labels, d.draw.flip, d.draw.gamma
        );
    }
    // The MNI head lies in the grid: hardly a head voxel on its border faces (the margin
    // leaves room for most of the jitter). Colin27's head touches its own field of view (the
    // neck at the bottom, the back, the sides), so its cut faces reach the border.
    for (d, (_, mask)) in report
        .done
        .iter()
        .zip(&first)
        .filter(|(d, _)| d.subject == "mni152")
    {
        let n = mask.dims()[0];
        let head: Vec<[usize; 3]> = (0..mask.voxel_count())
            .filter(|&at| mask.data()[at] > 0.0)
            .map(|at| [at % n, (at / n) % n, at / (n * n)])
            .collect();
        let faces = head
            .iter()
            .filter(|ijk| ijk.iter().any(|&x| x == 0 || x == n - 1))
            .count();
        assert!(
            faces * 100 <= head.len(),
            "{}: {faces} head voxels on the grid's border",
            d.case
        );
    }
}

#[test]
fn missing_data_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |data: &str| {
        prepare_real_demo(
            &tmp.path().join(data),
            &tmp.path().join("out"),
            &config(),
            &mut Silent,
        )
    };
    let e = run("none").unwrap_err();
    assert!(matches!(e, PrepareError::MissingFolder { .. }), "{e}");
    std::fs::create_dir_all(tmp.path().join("empty")).unwrap();
    let report = run("empty").unwrap();
    assert_eq!(report.cases_done, 0);
    assert!(
        report.skipped[0]
            .reason
            .contains("mni_icbm152_t1_tal_nlin_sym_09a_converted.nii.gz"),
        "{}",
        report.skipped[0].reason
    );
}
