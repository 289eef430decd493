//! Synthetic raw BraTS cases for the tests.
#![allow(dead_code)]

use std::path::Path;

use medddpm_nifti::{Affine, DataType, Volume, WriteOptions};
use medddpm_prepare::{CaseDetails, CaseProblem, Report};

/// The standard raw BraTS affine: LPS, 1 mm, origin (0, 239, 0).
pub const RAW_AFFINE: Affine = [
    [-1.0, 0.0, 0.0, 0.0],
    [0.0, -1.0, 0.0, 239.0],
    [0.0, 0.0, 1.0, 0.0],
    [0.0, 0.0, 0.0, 1.0],
];

/// A small raw case in `raw/<case>/`: a ball of "brain" (T1 100..) with a tumour cube of
/// labels 1, 2, 4 inside, background 0; modalities differ by a factor. `skip` leaves out one
/// file by modality name.
pub fn small_case(raw: &Path, case: &str, dims: [usize; 3], skip: Option<&str>) {
    let dir = raw.join(case);
    std::fs::create_dir_all(&dir).unwrap();
    let n: usize = dims.iter().product();
    let (mut t1, mut seg) = (vec![0.0f32; n], vec![0.0f32; n]);
    let c = dims.map(|d| d as f64 / 2.0);
    for k in 0..dims[2] {
        for j in 0..dims[1] {
            for i in 0..dims[0] {
                let at = i + dims[0] * (j + dims[1] * k);
                let r2: f64 = [i, j, k]
                    .iter()
                    .zip(c)
                    .map(|(&x, c)| (x as f64 + 0.5 - c).powi(2))
                    .sum();
                if r2 < (dims[2] as f64 / 2.5).powi(2) {
                    t1[at] = 100.0 + (i + j) as f32;
                }
                let d = [i, j, k]
                    .iter()
                    .zip(c)
                    .map(|(&x, c)| (x as f64 + 0.5 - c).abs())
                    .fold(0.0, f64::max);
                if d < 1.0 {
                    seg[at] = 4.0;
                } else if d < 2.0 {
                    seg[at] = 1.0;
                } else if d < 3.0 {
                    seg[at] = 2.0;
                }
            }
        }
    }
    for (m, factor) in [("t1", 1.0), ("t1ce", 2.0), ("t2", 0.5), ("flair", 3.0)] {
        if skip == Some(m) {
            continue;
        }
        let data = t1.iter().map(|v| v * factor).collect();
        let v = Volume::new(dims, data, RAW_AFFINE).unwrap();
        write_raw(&v, &dir, &format!("{case}_{m}"), DataType::I16);
    }
    if skip != Some("seg") {
        let v = Volume::new(dims, seg, RAW_AFFINE).unwrap();
        write_raw(&v, &dir, &format!("{case}_seg"), DataType::U8);
    }
}

/// `dir/<name>.nii.gz` stored as `dtype`, as raw BraTS files are (images I16, seg U8).
pub fn write_raw(v: &Volume, dir: &Path, name: &str, dtype: DataType) {
    v.write_with(
        dir.join(format!("{name}.nii.gz")),
        WriteOptions::dtype(dtype),
    )
    .unwrap();
}

/// The ids of the cases a run prepared, in order.
pub fn done<S, D: CaseDetails>(report: &Report<S, D>) -> Vec<&str> {
    report.done.iter().map(|d| d.case()).collect()
}

/// The cases a run skipped with their problems, in order.
pub fn skipped<S, D>(report: &Report<S, D>) -> Vec<(&str, &CaseProblem)> {
    report
        .skipped
        .iter()
        .map(|s| (s.case.as_str(), &s.problem))
        .collect()
}
