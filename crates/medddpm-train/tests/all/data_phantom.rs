//! The built-in phantoms: determinism, content, reuse/regeneration, and reading them back
//! through the data set.

use std::path::Path;
use std::time::{Instant, SystemTime};

use medddpm_nifti::Volume;
use medddpm_train::data::{DataConfig, DataError, NiftiDataset};
use medddpm_train::phantom::{generate_phantoms, PhantomSet};

fn bytes_of(set: &PhantomSet) -> Vec<Vec<u8>> {
    set.masks
        .iter()
        .chain(&set.images)
        .map(|p| std::fs::read(p).unwrap())
        .collect()
}

fn mtime(p: &Path) -> SystemTime {
    std::fs::metadata(p).unwrap().modified().unwrap()
}

#[test]
fn same_seed_same_bytes_other_seed_other_data() {
    let _serial = crate::common::one_at_a_time();
    let (a, b, c) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let t = Instant::now();
    let sa = generate_phantoms(a.path(), 8, [32; 3], 7).unwrap();
    let took = t.elapsed();
    eprintln!("8 phantoms of 32^3: {took:?}");
    assert!(took.as_secs_f64() < 3.0, "too slow: {took:?}");
    assert!(sa.generated);
    assert_eq!(sa.masks.len(), 8);
    assert_eq!(sa.masks[3], a.path().join("mask/phantom_003.nii.gz"));
    assert_eq!(sa.images[3], a.path().join("image/phantom_003.nii.gz"));
    let sb = generate_phantoms(b.path(), 8, [32; 3], 7).unwrap();
    assert_eq!(bytes_of(&sa), bytes_of(&sb));
    let sc = generate_phantoms(c.path(), 8, [32; 3], 8).unwrap();
    for (x, y) in sa.images.iter().zip(&sc.images) {
        let (x, y) = (Volume::read(x).unwrap(), Volume::read(y).unwrap());
        assert_ne!(x.data(), y.data());
    }
    // Phantom n depends on (seed, n) only: a longer set starts with the same phantoms.
    let d = tempfile::tempdir().unwrap();
    let sd = generate_phantoms(d.path(), 10, [32; 3], 7).unwrap();
    assert_eq!(
        std::fs::read(&sd.images[5]).unwrap(),
        std::fs::read(&sa.images[5]).unwrap()
    );
}

#[test]
fn labels_and_intensities_make_a_learnable_task() {
    let (_serial, tmp) = crate::common::serial_tempdir();
    let set = generate_phantoms(tmp.path(), 8, [32, 32, 32], 0).unwrap();
    for (m, i) in set.masks.iter().zip(&set.images) {
        let (mask, image) = (Volume::read(m).unwrap(), Volume::read(i).unwrap());
        assert_eq!(mask.dtype(), medddpm_nifti::DataType::U8);
        assert_eq!(image.dtype(), medddpm_nifti::DataType::F32);
        assert!(mask.same_grid(&image));
        assert!(
            (mask.spacing()[0] - 6.0).abs() < 1e-6,
            "192 mm field of view"
        );
        let (mut sum, mut cnt) = ([0f64; 3], [0usize; 3]);
        for (&l, &v) in mask.data().iter().zip(image.data()) {
            assert!(l == 0.0 || l == 1.0 || l == 2.0, "label {l}");
            assert!((-1.0..=1.0).contains(&v));
            if l == 0.0 {
                assert_eq!(v, -1.0, "background is exactly -1");
            } else {
                assert!(v > -1.0, "head voxels differ from background");
            }
            sum[l as usize] += v as f64;
            cnt[l as usize] += 1;
        }
        assert!(cnt.iter().all(|&c| c > 0), "{m:?}: counts {cnt:?}");
        let mean: Vec<f64> = (0..3).map(|l| sum[l] / cnt[l] as f64).collect();
        eprintln!("{}: counts {cnt:?}, means {mean:.3?}", m.display());
        assert!(
            mean[1] - mean[0] > 0.5 && mean[2] - mean[1] > 0.3,
            "{mean:?}"
        );
        // The tumour sits inside the head: small compared with it.
        assert!(cnt[2] * 4 < cnt[1], "{cnt:?}");
    }
}

#[test]
fn reuse_and_regeneration() {
    let (_serial, tmp) = crate::common::serial_tempdir();
    let dir = tmp.path().join("phantoms");
    let first = generate_phantoms(&dir, 4, [16, 20, 24], 1).unwrap();
    assert!(first.generated);
    assert!(dir.join("phantoms.json").is_file());
    let stamp = mtime(&first.images[0]);
    let again = generate_phantoms(&dir, 4, [16, 20, 24], 1).unwrap();
    assert!(!again.generated, "identical parameters reuse the files");
    assert_eq!(mtime(&again.images[0]), stamp);
    assert_eq!(again.masks, first.masks);

    // Fewer phantoms: regenerated, stale files removed.
    let fewer = generate_phantoms(&dir, 2, [16, 20, 24], 1).unwrap();
    assert!(fewer.generated);
    assert!(!dir.join("mask/phantom_003.nii.gz").exists());
    assert!(!dir.join("image/phantom_002.nii.gz").exists());
    // Another size or seed: regenerated.
    let resized = generate_phantoms(&dir, 2, [16, 16, 16], 1).unwrap();
    assert!(resized.generated);
    assert_eq!(
        Volume::read(&resized.masks[1]).unwrap().dims(),
        [16, 16, 16]
    );
    assert!(
        generate_phantoms(&dir, 2, [16, 16, 16], 2)
            .unwrap()
            .generated
    );
    // A deleted file is noticed.
    std::fs::remove_file(&resized.images[0]).unwrap();
    assert!(
        generate_phantoms(&dir, 2, [16, 16, 16], 2)
            .unwrap()
            .generated
    );
    assert!(resized.images[0].is_file());
    // A corrupt manifest just means "regenerate".
    std::fs::write(dir.join("phantoms.json"), "{").unwrap();
    assert!(
        generate_phantoms(&dir, 2, [16, 16, 16], 2)
            .unwrap()
            .generated
    );

    let err = generate_phantoms(&dir, 0, [16; 3], 0).unwrap_err();
    assert!(matches!(err, DataError::InvalidConfig(_)), "{err:?}");
    let err = generate_phantoms(&dir, 1, [16, 4, 16], 0).unwrap_err();
    assert!(matches!(err, DataError::InvalidConfig(_)), "{err:?}");
}

#[test]
fn full_size_phantom() {
    let (_serial, tmp) = crate::common::serial_tempdir();
    let t = Instant::now();
    let set = generate_phantoms(tmp.path(), 1, [128; 3], 3).unwrap();
    eprintln!("1 phantom of 128^3: {:?}", t.elapsed());
    let mask = Volume::read(&set.masks[0]).unwrap();
    assert_eq!(mask.dims(), [128; 3]);
    assert_eq!(mask.spacing(), [1.5; 3]);
    let mut seen = [false; 3];
    mask.data().iter().for_each(|&l| seen[l as usize] = true);
    assert_eq!(seen, [true; 3]);
}

#[test]
fn phantom_source_opens_as_a_data_set() {
    let (_serial, tmp) = crate::common::serial_tempdir();
    let dir = tmp.path().join("ph");
    let text = format!(
        "source = {{ layout = \"phantom\", dir = {:?}, count = 8, size = [32, 32, 32], seed = 0 }}",
        dir.display().to_string()
    );
    let cfg: DataConfig = toml::from_str(&text).unwrap();
    assert_eq!(cfg.grid, [32; 3]);
    let ds = NiftiDataset::open(&cfg).unwrap();
    assert_eq!(ds.len(), 8);
    assert_eq!(ds.ids()[0], "phantom_000");
    assert_eq!(
        (ds.image_channels(), ds.cond_channels(), ds.shape()),
        (1, 2, [32; 3])
    );
    let ex = ds.get(7).unwrap();
    assert_eq!(ex.id, "phantom_007");
    assert!(ex.cond.iter().all(|&v| v == -1.0 || v == 1.0));
    assert!(
        ex.cond[32 * 32 * 32..].contains(&1.0),
        "tumour channel is used"
    );
    // normalization "none" (the phantom default) keeps the file's values.
    let file = Volume::read(dir.join("image/phantom_007.nii.gz")).unwrap();
    assert_eq!(ex.image, file.data());
    // Opening again reuses the files.
    let stamp = mtime(&dir.join("image/phantom_000.nii.gz"));
    NiftiDataset::open(&cfg).unwrap();
    assert_eq!(mtime(&dir.join("image/phantom_000.nii.gz")), stamp);
}
