//! Every real file under `shared/datasets`: geometry, dtype and content facts checked with
//! nibabel 5.4 (see `docs/med-ddpm-spec.md` section 6 and `datasets/README.md`).

use crate::common::{affine_diff, dataset, diag_affine, label_counts, shared_dir};
use medddpm_nifti::{DataType, Normalization, Volume};

struct Expect {
    rel: &'static str,
    dims: [usize; 3],
    dtype: DataType,
    spacing: f64,
    affine: [[f64; 4]; 4],
    /// Sum of all voxel values (nibabel `dataobj` as float64).
    sum: f64,
}

const WH_DIAG: [f64; 3] = [1.5, 1.5, 1.5];
const WH_ORIGIN: [f64; 3] = [-94.75, -112.75, -73.75];
const BRATS_DIAG: [f64; 3] = [-1.0, -1.0, 1.0];
const BRATS_ORIGIN: [f64; 3] = [-24.0, 215.0, 6.0];
// Read from the headers (sform_code 2 for MNI, 4 for Colin27; both qform_code 0).
const MNI_ORIGIN: [f64; 3] = [-98.0, -134.0, -72.0];
const COLIN_ORIGIN: [f64; 3] = [-90.0, -125.0, -71.0];

/// The files of one source share dims, spacing and affine.
fn family(
    dims: [usize; 3],
    spacing: f64,
    affine: [[f64; 4]; 4],
) -> impl Fn(&'static str, DataType, f64) -> Expect {
    move |rel, dtype, sum| Expect {
        rel,
        dims,
        dtype,
        spacing,
        affine,
        sum,
    }
}

fn expectations() -> Vec<Expect> {
    let wh = family([128; 3], 1.5, diag_affine(WH_DIAG, WH_ORIGIN));
    let brats = family([192, 192, 144], 1.0, diag_affine(BRATS_DIAG, BRATS_ORIGIN));
    let mni = family([197, 233, 189], 1.0, diag_affine([1.0; 3], MNI_ORIGIN));
    let colin = family([181, 217, 181], 1.0, diag_affine([1.0; 3], COLIN_ORIGIN));
    vec![
        wh(
            "medddpm-samples/whole_head/image/sample_3.nii.gz",
            DataType::F32,
            -1663242.5988675952,
        ),
        wh(
            "medddpm-samples/whole_head/mask/sample_0.nii.gz",
            DataType::U8,
            1129406.0,
        ),
        wh(
            "medddpm-samples/whole_head/mask/sample_1.nii.gz",
            DataType::U8,
            1154853.0,
        ),
        wh(
            "medddpm-samples/whole_head/mask/sample_2.nii.gz",
            DataType::U8,
            1114380.0,
        ),
        wh(
            "medddpm-samples/whole_head/mask/sample_3.nii.gz",
            DataType::U8,
            1154922.0,
        ),
        brats(
            "medddpm-samples/brats2021/t1/BraTS2021_01306_t1.nii.gz",
            DataType::F64,
            -3884084.3895044825,
        ),
        brats(
            "medddpm-samples/brats2021/t1ce/BraTS2021_01306_t1ce.nii.gz",
            DataType::F64,
            -4727336.588845259,
        ),
        brats(
            "medddpm-samples/brats2021/t2/BraTS2021_01306_t2.nii.gz",
            DataType::F64,
            -4504028.405635847,
        ),
        brats(
            "medddpm-samples/brats2021/flair/BraTS2021_01306_flair.nii.gz",
            DataType::F64,
            -4371451.015632826,
        ),
        brats(
            "medddpm-samples/brats2021/seg/BraTS2021_01306_seg.nii.gz",
            DataType::F64,
            4764191.0,
        ),
        brats(
            "medddpm-samples/brats2021/seg/BraTS2021_00529_seg.nii.gz",
            DataType::F64,
            6329405.0,
        ),
        mni(
            "mni152-2009/mni_icbm152_t1_tal_nlin_sym_09a_converted.nii.gz",
            DataType::U8,
            333468829.0,
        ),
        mni(
            "mni152-2009/mni_icbm152_gm_tal_nlin_sym_09a_converted.nii.gz",
            DataType::U8,
            257090788.0,
        ),
        mni(
            "mni152-2009/mni_icbm152_wm_tal_nlin_sym_09a_converted.nii.gz",
            DataType::U8,
            170935158.0,
        ),
        colin("colin27/ch2.nii.gz", DataType::U8, 317151210.0),
        colin("colin27/ch2bet.nii.gz", DataType::U8, 158526435.0),
        colin("colin27/aal.nii.gz", DataType::U8, 76656511.0),
    ]
}

fn nii_gz_files(dir: &std::path::Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            nii_gz_files(&p, out);
        } else if p.to_string_lossy().ends_with(".nii.gz") {
            let root = shared_dir().join("datasets");
            out.push(
                p.strip_prefix(&root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
}

#[test]
fn every_dataset_file_is_covered() {
    let mut found = Vec::new();
    nii_gz_files(&shared_dir().join("datasets"), &mut found);
    found.sort();
    let mut listed: Vec<String> = expectations().iter().map(|e| e.rel.to_string()).collect();
    listed.sort();
    assert_eq!(found, listed, "add new dataset files to the expectations");
}

#[test]
fn every_dataset_file_has_the_known_geometry_and_content() {
    for e in expectations() {
        let v = Volume::read(dataset(e.rel)).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(v.dims(), e.dims, "{}", e.rel);
        assert_eq!(v.dtype(), e.dtype, "{}", e.rel);
        assert_eq!(v.spacing(), [e.spacing; 3], "{}", e.rel);
        assert!(
            affine_diff(v.affine(), &e.affine) < 1e-6,
            "{}: {:?}",
            e.rel,
            v.affine()
        );
        let sum: f64 = v.data().iter().map(|&x| x as f64).sum();
        // Integer files sum exactly; float64 files lose a little going through f32.
        let tol = if e.dtype == DataType::F64 {
            1e-6 * sum.abs()
        } else {
            1e-6
        };
        assert!(
            (sum - e.sum).abs() <= tol,
            "{}: sum {sum} vs {}",
            e.rel,
            e.sum
        );
        assert_eq!(v.network_shape(), [e.dims[2], e.dims[1], e.dims[0]]);
    }
}

#[test]
fn whole_head_image_is_already_in_minus_one_one() {
    let v = Volume::read(dataset("medddpm-samples/whole_head/image/sample_3.nii.gz")).unwrap();
    let (lo, hi) = v
        .data()
        .iter()
        .fold((f32::MAX, f32::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    assert_eq!(lo, -1.0);
    assert!(hi <= 1.0 && hi > 0.9999);
    let mean = v.data().iter().map(|&x| x as f64).sum::<f64>() / v.voxel_count() as f64;
    assert!((mean + 0.793).abs() < 5e-4, "mean {mean}");
    assert_eq!((v.header().qform_code, v.header().sform_code), (1, 1));
}

#[test]
fn whole_head_mask_label_counts() {
    let counts = [
        [968189, 1128520, 443],
        [944500, 1150451, 2201],
        [983003, 1113918, 231],
        [943375, 1152632, 1145],
    ];
    for (n, want) in counts.iter().enumerate() {
        let rel = format!("medddpm-samples/whole_head/mask/sample_{n}.nii.gz");
        let v = Volume::read(dataset(&rel)).unwrap();
        assert_eq!(label_counts(v.data(), 3), want, "{rel}");
        assert_eq!((v.header().qform_code, v.header().sform_code), (0, 2));
    }
}

#[test]
fn brats_seg_label_counts() {
    let cases = [
        ("01306", [4091281, 40, 48100, 8029, 1160966]),
        ("00529", [3699519, 9005, 33031, 13106, 1553755]),
    ];
    for (id, want) in cases {
        let rel = format!("medddpm-samples/brats2021/seg/BraTS2021_{id}_seg.nii.gz");
        let v = Volume::read(dataset(&rel)).unwrap();
        assert_eq!(label_counts(v.data(), 5), want, "{rel}");
    }
}

/// Means of the three normalisations of `sample_3`, computed with numpy (sklearn's per-slice
/// `MinMaxScaler` reshape, whole-volume min-max, and `np.percentile` clipping).
#[test]
fn normalizations_match_numpy_on_sample_3() {
    let v = Volume::read(dataset("medddpm-samples/whole_head/image/sample_3.nii.gz")).unwrap();
    let cases = [
        (Normalization::ReferencePerSlice, -0.749467355097402),
        (Normalization::VolumeMinMax, -0.7930958619139566),
        (
            Normalization::Percentile {
                low: 0.5,
                high: 99.5,
            },
            -0.6922234096010988,
        ),
    ];
    for (mode, want) in cases {
        let n = v.normalized(mode).unwrap();
        let mean = n.data().iter().map(|&x| x as f64).sum::<f64>() / n.voxel_count() as f64;
        assert!((mean - want).abs() < 1e-5, "{mode:?}: {mean} vs {want}");
        assert!(n.data().iter().all(|x| (-1.0..=1.0).contains(x)));
    }
}

/// The BraTS sample affines are the native BraTS grid after torchio's 240x240x155 ->
/// 192x192x144 centre crop; padding back must land on the native origin (0, 239, 0).
#[test]
fn brats_crop_offsets_invert_to_the_native_grid() {
    let seg = Volume::read(dataset(
        "medddpm-samples/brats2021/seg/BraTS2021_01306_seg.nii.gz",
    ))
    .unwrap();
    let native = seg.crop_or_pad([240, 240, 155], 0.0).unwrap();
    assert!(affine_diff(native.affine(), &diag_affine(BRATS_DIAG, [0.0, 239.0, 0.0])) < 1e-9);
    let back = native.crop_or_pad([192, 192, 144], 0.0).unwrap();
    assert!(back.same_grid(&seg));
    assert_eq!(back.data(), seg.data());
}
