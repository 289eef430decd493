//! MAE / MSE / PSNR / SSIM / MS-SSIM against known answers and a brute-force twin.

use crate::common::*;
use medddpm_metrics::*;

#[test]
fn identical_volumes() {
    let dims = [16, 16, 16];
    let a = add_noise(&smooth(dims, 0.0), 0.1, 1);
    assert_eq!(mae(&a, &a, None).unwrap(), 0.0);
    assert_eq!(mse(&a, &a, None).unwrap(), 0.0);
    assert_eq!(psnr(&a, &a, None, 2.0).unwrap(), f64::INFINITY);
    assert!((ssim3d(&a, &a, dims, None, 2.0).unwrap() - 1.0).abs() < 1e-12);
    let opts = MsSsimOptions {
        scales: 2,
        sigma: 1.5,
    };
    assert!((ms_ssim3d_with(&a, &a, dims, 2.0, &opts).unwrap() - 1.0).abs() < 1e-12);
}

#[test]
fn constant_offset_gives_exact_mae_and_psnr() {
    // Multiples of 1/64 plus 0.25 are exact in f32, so the difference is exactly c.
    let dims = [10, 9, 8];
    let a = volume(dims, |i, j, k| {
        ((i + 3 * j + 7 * k) % 64) as f64 / 64.0 - 0.5
    });
    for c in [0.25f32, -0.125] {
        let b: Vec<f32> = a.iter().map(|&x| x + c).collect();
        let c = c as f64;
        assert_eq!(mae(&a, &b, None).unwrap(), c.abs());
        assert_eq!(mse(&a, &b, None).unwrap(), c * c);
        let expected = 10.0 * (4.0 / (c * c)).log10();
        assert!((psnr(&a, &b, None, 2.0).unwrap() - expected).abs() < 1e-12);
        // The data range enters as range^2.
        let e1 = 10.0 * (1.0 / (c * c)).log10();
        assert!((psnr(&a, &b, None, 1.0).unwrap() - e1).abs() < 1e-12);
    }
}

#[test]
fn masked_mae_uses_only_masked_voxels() {
    let a = vec![0.0f32, 0.0, 0.0, 0.0];
    let b = vec![1.0f32, 0.5, -0.25, 8.0];
    let mask = [true, true, true, false];
    assert!((mae(&a, &b, Some(&mask)).unwrap() - 1.75 / 3.0).abs() < 1e-15);
    assert!((mse(&a, &b, Some(&mask)).unwrap() - (1.0 + 0.25 + 0.0625) / 3.0).abs() < 1e-15);
}

#[test]
fn uniform_noise_mse_matches_variance() {
    let dims = [32, 32, 32];
    let a = smooth(dims, 0.0);
    let h = 0.2;
    let b = add_noise(&a, h, 42);
    let var = h * h / 3.0;
    let m = mse(&a, &b, None).unwrap();
    assert!((m - var).abs() / var < 0.03, "mse {m} vs variance {var}");
    let e = mae(&a, &b, None).unwrap();
    assert!((e - h / 2.0).abs() / (h / 2.0) < 0.03, "mae {e}");
    let p = psnr(&a, &b, None, 2.0).unwrap();
    assert!((p - 10.0 * (4.0 / var).log10()).abs() < 0.15, "psnr {p}");
}

#[test]
fn ssim_of_offset_constant_is_the_luminance_term() {
    let dims = [12, 11, 10];
    let n = voxels(dims);
    for (x, c, range) in [(0.2f32, 0.3f32, 2.0), (-0.5, 0.05, 2.0), (0.1, -0.6, 1.0)] {
        let a = vec![x; n];
        let b = vec![x + c; n];
        let (mx, my) = (x as f64, (x + c) as f64);
        let c1 = (0.01 * range) * (0.01 * range);
        let expected = (2.0 * mx * my + c1) / (mx * mx + my * my + c1);
        let got = ssim3d(&a, &b, dims, None, range).unwrap();
        assert!((got - expected).abs() < 1e-9, "{got} vs {expected}");
        assert!(got < 1.0);
    }
}

#[test]
fn ssim_falls_with_noise_and_is_symmetric() {
    let dims = [20, 20, 20];
    let a = smooth(dims, 0.0);
    let mut r = Rng(7);
    let noise: Vec<f64> = (0..a.len()).map(|_| r.sym()).collect();
    let mut last = 1.0 + 1e-12;
    for s in [0.0, 0.02, 0.05, 0.1, 0.2, 0.4] {
        let b: Vec<f32> = a
            .iter()
            .zip(&noise)
            .map(|(&x, &u)| (x as f64 + s * u) as f32)
            .collect();
        let v = ssim3d(&a, &b, dims, None, 2.0).unwrap();
        let w = ssim3d(&b, &a, dims, None, 2.0).unwrap();
        assert!((v - w).abs() < 1e-12, "symmetry {v} vs {w}");
        assert!(v < last, "noise {s}: ssim {v} not below {last}");
        last = v;
    }
    assert!(last < 0.8, "ssim at noise 0.4: {last}");
}

#[test]
fn shifted_volume_scores_below_unshifted() {
    let dims = [24, 24, 24];
    let a = smooth(dims, 0.0);
    let b1 = smooth(dims, 1.0);
    let b2 = smooth(dims, 2.0);
    let s0 = ssim3d(&a, &a, dims, None, 2.0).unwrap();
    let s1 = ssim3d(&a, &b1, dims, None, 2.0).unwrap();
    let s2 = ssim3d(&a, &b2, dims, None, 2.0).unwrap();
    assert!(s1 < s0 && s1 < 1.0 && s1 > 0.5, "ssim shift 1: {s1}");
    assert!(s2 < s1, "ssim shift 2 {s2} vs shift 1 {s1}");
    let p0 = psnr(&a, &a, None, 2.0).unwrap();
    let p1 = psnr(&a, &b1, None, 2.0).unwrap();
    let p2 = psnr(&a, &b2, None, 2.0).unwrap();
    assert!(p1.is_finite() && p1 < p0);
    assert!(p2 < p1);
}

#[test]
fn ssim_mask_selects_window_centres() {
    let dims = [16, 16, 16];
    let a = smooth(dims, 0.0);
    let b = add_noise(&a, 0.2, 3);
    let w = GaussianWindow::default();
    assert_eq!((w.radius(), w.size()), (3, 7));
    let map = ssim3d_map(&a, &b, dims, 2.0, &w).unwrap();
    assert_eq!(map.dims(), [10, 10, 10]);
    assert_eq!((map.offset(), map.volume_dims()), (3, dims));
    // A mask of the single voxel (5, 6, 7) picks map voxel (2, 3, 4).
    let mut mask = vec![false; a.len()];
    mask[5 + 16 * (6 + 16 * 7)] = true;
    let v = ssim3d(&a, &b, dims, Some(&mask), 2.0).unwrap();
    assert_eq!(v, map.values()[2 + 10 * (3 + 10 * 4)]);
    // All-true mask equals the unmasked mean.
    let all = vec![true; a.len()];
    let m1 = ssim3d(&a, &b, dims, Some(&all), 2.0).unwrap();
    let m2 = ssim3d(&a, &b, dims, None, 2.0).unwrap();
    assert!((m1 - m2).abs() < 1e-12);
}

/// Brute-force twin: direct 3-D window, central moments, direct pooling.
mod brute {
    pub fn window(sigma: f64) -> (usize, Vec<f64>) {
        let r = (2.0 * sigma).ceil() as usize;
        let n = 2 * r + 1;
        let mut w = Vec::with_capacity(n * n * n);
        for dk in 0..n {
            for dj in 0..n {
                for di in 0..n {
                    let d2 = [di, dj, dk]
                        .iter()
                        .map(|&t| (t as f64 - r as f64).powi(2))
                        .sum::<f64>();
                    w.push((-d2 / (2.0 * sigma * sigma)).exp());
                }
            }
        }
        let s: f64 = w.iter().sum();
        (r, w.into_iter().map(|x| x / s).collect())
    }

    /// (mean SSIM, mean CS) over the valid region.
    pub fn terms(a: &[f64], b: &[f64], d: [usize; 3], sigma: f64, range: f64) -> (f64, f64) {
        let (r, w) = window(sigma);
        let n = 2 * r + 1;
        let c1 = (0.01 * range) * (0.01 * range);
        let c2 = (0.03 * range) * (0.03 * range);
        let at = |v: &[f64], i: usize, j: usize, k: usize| v[i + d[0] * (j + d[1] * k)];
        let (mut ss, mut cs, mut cnt) = (0.0, 0.0, 0.0);
        for k in r..d[2] - r {
            for j in r..d[1] - r {
                for i in r..d[0] - r {
                    let mut taps = Vec::new();
                    for dk in 0..n {
                        for dj in 0..n {
                            for di in 0..n {
                                let (x, y, z) = (i + di - r, j + dj - r, k + dk - r);
                                taps.push((
                                    w[di + n * (dj + n * dk)],
                                    at(a, x, y, z),
                                    at(b, x, y, z),
                                ));
                            }
                        }
                    }
                    let mx: f64 = taps.iter().map(|t| t.0 * t.1).sum();
                    let my: f64 = taps.iter().map(|t| t.0 * t.2).sum();
                    let vx: f64 = taps.iter().map(|t| t.0 * (t.1 - mx).powi(2)).sum();
                    let vy: f64 = taps.iter().map(|t| t.0 * (t.2 - my).powi(2)).sum();
                    let cxy: f64 = taps.iter().map(|t| t.0 * (t.1 - mx) * (t.2 - my)).sum();
                    let l = (2.0 * mx * my + c1) / (mx * mx + my * my + c1);
                    let c = (2.0 * cxy + c2) / (vx + vy + c2);
                    ss += l * c;
                    cs += c;
                    cnt += 1.0;
                }
            }
        }
        (ss / cnt, cs / cnt)
    }

    pub fn pool(a: &[f64], d: [usize; 3]) -> (Vec<f64>, [usize; 3]) {
        let o = [d[0] / 2, d[1] / 2, d[2] / 2];
        let mut out = vec![0.0; o[0] * o[1] * o[2]];
        for k in 0..o[2] {
            for j in 0..o[1] {
                for i in 0..o[0] {
                    let mut s = 0.0;
                    for c in 0..8 {
                        let (x, y, z) = (2 * i + (c & 1), 2 * j + ((c >> 1) & 1), 2 * k + (c >> 2));
                        s += a[x + d[0] * (y + d[1] * z)];
                    }
                    out[i + o[0] * (j + o[1] * k)] = s / 8.0;
                }
            }
        }
        (out, o)
    }

    pub fn ms_ssim(
        a: &[f32],
        b: &[f32],
        d: [usize; 3],
        range: f64,
        scales: usize,
        sigma: f64,
    ) -> f64 {
        let w_all = [0.0448, 0.2856, 0.3001, 0.2363, 0.1333];
        let total: f64 = w_all[..scales].iter().sum();
        let mut x: Vec<f64> = a.iter().map(|&v| v as f64).collect();
        let mut y: Vec<f64> = b.iter().map(|&v| v as f64).collect();
        let mut d = d;
        let mut out = 1.0;
        for (s, w) in w_all[..scales].iter().enumerate() {
            let (ss, cs) = terms(&x, &y, d, sigma, range);
            let t: f64 = if s + 1 == scales { ss } else { cs };
            out *= t.max(0.0).powf(w / total);
            let (px, pd) = pool(&x, d);
            let (py, _) = pool(&y, d);
            x = px;
            y = py;
            d = pd;
        }
        out
    }
}

fn ms_case(dims: [usize; 3]) -> (Vec<f32>, Vec<f32>) {
    let a = add_noise(&smooth(dims, 0.0), 0.15, 11);
    let mut r = Rng(5);
    let b = a
        .iter()
        .map(|&x| (0.8 * x as f64 + 0.1 + 0.25 * r.sym()) as f32)
        .collect();
    (a, b)
}

// Odd and unequal dims check the axis order and the floor in the pooling: 17x16x18 -> 8x8x9.
const ODD_DIMS: [usize; 3] = [17, 16, 18];

/// MS-SSIM of the odd-sized case with `scales` and `sigma`, checked against the brute force.
fn ms_ssim_matches_brute_force(scales: usize, sigma: f64) -> f64 {
    let (a, b) = ms_case(ODD_DIMS);
    let opts = MsSsimOptions { scales, sigma };
    let got = ms_ssim3d_with(&a, &b, ODD_DIMS, 2.0, &opts).unwrap();
    let want = brute::ms_ssim(&a, &b, ODD_DIMS, 2.0, scales, sigma);
    assert!((got - want).abs() < 1e-10, "{got} vs {want}");
    got
}

#[test]
fn ms_ssim_matches_brute_force_two_scales() {
    let got = ms_ssim_matches_brute_force(2, 1.5);
    assert!(got > 0.05 && got < 0.99, "{got}");
}

#[test]
fn ms_ssim_matches_brute_force_three_scales_small_window() {
    ms_ssim_matches_brute_force(3, 0.5);
    // Plain SSIM agrees with the brute force too.
    let dims = ODD_DIMS;
    let (a, b) = ms_case(dims);
    let ssim = ssim3d_with(&a, &b, dims, None, 2.0, &GaussianWindow::new(0.5).unwrap()).unwrap();
    let af: Vec<f64> = a.iter().map(|&v| v as f64).collect();
    let bf: Vec<f64> = b.iter().map(|&v| v as f64).collect();
    let (ss, _) = brute::terms(&af, &bf, dims, 0.5, 2.0);
    assert!((ssim - ss).abs() < 1e-10);
}

#[test]
fn one_scale_ms_ssim_is_ssim() {
    let dims = [16, 16, 16];
    let (a, b) = ms_case(dims);
    let ms = ms_ssim3d_with(
        &a,
        &b,
        dims,
        2.0,
        &MsSsimOptions {
            scales: 1,
            sigma: 1.5,
        },
    )
    .unwrap();
    let s = ssim3d(&a, &b, dims, None, 2.0).unwrap();
    assert!((ms - s).abs() < 1e-12);
}

#[test]
fn ms_ssim_weights_renormalise() {
    let w = MsSsimOptions {
        scales: 2,
        sigma: 1.5,
    }
    .weights()
    .unwrap();
    assert!((w[0] - 0.0448 / 0.3304).abs() < 1e-15 && (w[1] - 0.2856 / 0.3304).abs() < 1e-15);
    let w5 = MsSsimOptions::default().weights().unwrap();
    assert_eq!(w5.len(), 5);
    assert!((w5.iter().sum::<f64>() - 1.0).abs() < 1e-12);
}

#[test]
fn pairwise_ms_ssim_is_the_mean_of_pairs() {
    let dims = [16, 16, 16];
    let base = smooth(dims, 0.0);
    let v: Vec<Vec<f32>> = (0..3)
        .map(|s| add_noise(&base, 0.1 * (s + 1) as f64, s as u64))
        .collect();
    let opts = MsSsimOptions {
        scales: 2,
        sigma: 1.5,
    };
    let refs: Vec<&[f32]> = v.iter().map(|x| x.as_slice()).collect();
    let got = mean_pairwise_ms_ssim(&refs, dims, 2.0, &opts).unwrap();
    let pairs = [(0, 1), (0, 2), (1, 2)];
    let want = pairs
        .iter()
        .map(|&(i, j)| ms_ssim3d_with(&v[i], &v[j], dims, 2.0, &opts).unwrap())
        .sum::<f64>()
        / 3.0;
    assert!((got - want).abs() < 1e-12);
    let sym = ms_ssim3d_with(&v[1], &v[0], dims, 2.0, &opts).unwrap();
    assert!((sym - ms_ssim3d_with(&v[0], &v[1], dims, 2.0, &opts).unwrap()).abs() < 1e-12);
    // More diverse samples score lower.
    let identical: Vec<&[f32]> = vec![&v[0], &v[0], &v[0]];
    assert!((mean_pairwise_ms_ssim(&identical, dims, 2.0, &opts).unwrap() - 1.0).abs() < 1e-12);
    assert!(got < 0.99);
}

#[test]
fn bad_inputs_are_typed_errors() {
    let dims = [8, 8, 8];
    let a = vec![0.0f32; 512];
    let short = vec![0.0f32; 511];
    assert!(is_length_mismatch(&mae(&a, &short, None), 512, 511));
    assert!(matches!(
        psnr(&a, &a, None, 0.0),
        Err(MetricsError::InvalidParameter {
            name: "data_range",
            ..
        })
    ));
    assert!(matches!(
        mae(&[], &[], None),
        Err(MetricsError::Empty { .. })
    ));
    let none = vec![false; 512];
    assert!(matches!(
        mae(&a, &a, Some(&none)),
        Err(MetricsError::EmptyMask { .. })
    ));
    assert!(matches!(
        mse(&a, &a, Some(&none[..3])),
        Err(MetricsError::LengthMismatch { .. })
    ));
    assert!(matches!(
        ssim3d(&a, &a, [8, 8, 7], None, 2.0),
        Err(MetricsError::DimsMismatch {
            voxels: 448,
            len: 512,
            ..
        })
    ));
    // 6 voxels along k: smaller than the 7-voxel window.
    let b = vec![0.0f32; 8 * 8 * 6];
    assert!(matches!(
        ssim3d(&b, &b, [8, 8, 6], None, 2.0),
        Err(MetricsError::TooSmall { window: 7, .. })
    ));
    // A mask touching only the border has no window centre.
    let mut edge = vec![false; 512];
    edge[0] = true;
    assert!(matches!(
        ssim3d(&a, &a, dims, Some(&edge), 2.0),
        Err(MetricsError::EmptyMask { .. })
    ));
    // 32^3 with 5 scales: 32, 16, 8, then 4 < 7 at scale 4.
    let c = vec![0.0f32; 32 * 32 * 32];
    let e = ms_ssim3d(&c, &c, [32, 32, 32], 2.0).unwrap_err();
    assert!(
        matches!(
            e,
            MetricsError::TooSmall {
                scale: 4,
                scale_dims: [4, 4, 4],
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("fewer scales"));
    for scales in [0, 6] {
        let o = MsSsimOptions { scales, sigma: 1.5 };
        assert!(matches!(
            ms_ssim3d_with(&c, &c, [32, 32, 32], 2.0, &o),
            Err(MetricsError::InvalidParameter { name: "scales", .. })
        ));
    }
    assert!(matches!(
        GaussianWindow::new(0.0),
        Err(MetricsError::InvalidParameter { name: "sigma", .. })
    ));
    assert!(matches!(
        GaussianWindow::new(f64::NAN),
        Err(MetricsError::InvalidParameter { .. })
    ));
    let one: Vec<&[f32]> = vec![&c];
    assert!(matches!(
        mean_pairwise_ms_ssim(&one, [32, 32, 32], 2.0, &MsSsimOptions::default()),
        Err(MetricsError::TooFew {
            needed: 2,
            got: 1,
            ..
        })
    ));
    let uneven: Vec<&[f32]> = vec![&c, &a];
    assert!(matches!(
        mean_pairwise_ms_ssim(
            &uneven,
            [32, 32, 32],
            2.0,
            &MsSsimOptions {
                scales: 1,
                sigma: 1.5
            }
        ),
        Err(MetricsError::DimsMismatch { .. })
    ));
}
