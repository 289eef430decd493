//! `evaluate`, Markdown rendering and JSON round trip.

use crate::common::*;
use medddpm_metrics::*;

const DIMS: [usize; 3] = [16, 16, 16];

fn sphere(center: [f64; 3], r_head: f64, r_core: f64) -> Vec<u32> {
    ball_labels(DIMS, center, r_head, r_core)
}

fn image(labels: &[u32], seed: u64, noise: f64) -> Vec<f32> {
    labelled_image(labels, [-1.0, 0.0, 0.6], noise, seed)
}

fn input() -> EvalInput {
    let m0 = sphere([8.0, 8.0, 8.0], 7.0, 3.0);
    let m1 = sphere([7.0, 8.0, 9.0], 6.0, 2.5);
    let r0 = image(&m0, 1, 0.05);
    let r1 = image(&m1, 2, 0.05);
    let named = |name: &str, mask_index, data| NamedImage {
        name: name.into(),
        mask_index,
        data,
    };
    EvalInput {
        dims: DIMS,
        data_range: 2.0,
        synthetic: vec![
            named("s0_copy", 0, r0.clone()),
            named("s0_noisy", 0, add_noise(&r0, 0.1, 9)),
            named("s1_a", 1, image(&m1, 3, 0.1)),
            named("s1_b", 1, image(&m1, 4, 0.1)),
        ],
        real: vec![named("r0", 0, r0), named("r1", 1, r1)],
        masks: vec![
            NamedLabels {
                name: "m0".into(),
                labels: m0,
            },
            NamedLabels {
                name: "m1".into(),
                labels: m1,
            },
        ],
        ms_ssim: MsSsimOptions {
            scales: 2,
            sigma: 1.5,
        },
        ..EvalInput::default()
    }
}

#[test]
fn evaluate_fills_every_section() {
    let input = input();
    let rep = evaluate(&input).unwrap();
    assert_eq!((rep.n_masks, rep.n_real, rep.n_synthetic), (2, 2, 4));

    let rows = &rep.paired.rows;
    assert_eq!(rows.len(), 4);
    assert_eq!(
        (
            rows[0].sample.as_str(),
            rows[0].real.as_str(),
            rows[0].mask.as_str()
        ),
        ("s0_copy", "r0", "m0")
    );
    assert_eq!(rows[0].psnr, None);
    assert_eq!(rows[0].mae, 0.0);
    assert!((rows[0].ssim - 1.0).abs() < 1e-12);
    let region = input.masks[0].labels.iter().filter(|&&l| l != 0).count() as u64;
    assert_eq!(rows[0].region_voxels, region);
    // The other rows agree with the plain functions on the same region.
    let m1: Vec<bool> = input.masks[1].labels.iter().map(|&l| l != 0).collect();
    let (s, r) = (&input.synthetic[2].data, &input.real[1].data);
    assert_eq!(rows[2].psnr, Some(psnr(s, r, Some(&m1), 2.0).unwrap()));
    assert_eq!(rows[2].ssim, ssim3d(s, r, DIMS, Some(&m1), 2.0).unwrap());
    assert_eq!(rows[2].mae, mae(s, r, Some(&m1)).unwrap());
    let mean = rep.paired.mean.as_ref().unwrap();
    assert_eq!(
        mean.psnr, None,
        "one identical pair makes the mean infinite"
    );
    assert!((mean.mae - rows.iter().map(|r| r.mae).sum::<f64>() / 4.0).abs() < 1e-15);

    assert_eq!(rep.diversity.rows.len(), 2);
    let d1 = &rep.diversity.rows[1];
    assert_eq!((d1.mask.as_str(), d1.n_samples), ("m1", 2));
    let want = ms_ssim3d_with(
        &input.synthetic[2].data,
        &input.synthetic[3].data,
        DIMS,
        2.0,
        &input.ms_ssim,
    )
    .unwrap();
    assert!((d1.mean_pairwise_ms_ssim - want).abs() < 1e-12);

    let mmd = rep.mmd.as_ref().unwrap();
    assert_eq!(
        (mmd.n_real, mmd.n_synthetic, mmd.estimator),
        (2, 4, MmdEstimator::Unbiased)
    );
    assert!(mmd.sigma > 0.0 && mmd.value.is_finite());

    let a = rep.adherence.as_ref().unwrap();
    assert_eq!(
        a.classes.iter().map(|c| c.label).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    assert_eq!(a.real.len(), 2);
    assert_eq!(a.synthetic.len(), 4);
    assert!(a.mean_dice_real.unwrap() > 0.99);
    assert!(a.mean_dice_synthetic.unwrap() > 0.9);
    let copy = &a.synthetic[0];
    assert_eq!(copy.labels.len(), 3);
    assert!((copy.labels[2].real_mean.unwrap() - 0.6).abs() < 0.01);
    assert_eq!(copy.labels[1].dice, a.real[0].labels[1].dice);
}

#[test]
fn markdown_has_tables_and_numbers() {
    let rep = evaluate(&input()).unwrap();
    let md = rep.to_markdown();
    for header in [
        "| mask | sample | real | voxels | PSNR (dB) | SSIM | MAE |",
        "| mask | samples | MS-SSIM |",
        "| MMD^2 | sigma | estimator | real | synthetic |",
        "| label | real voxels | real mean | real std | centre |",
        "| image | kind | mask | label | voxels | mean | std | real mean | Dice |",
    ] {
        assert!(md.contains(header), "missing {header} in\n{md}");
    }
    assert!(md.contains("| m0 | s0_copy | r0 |"));
    assert!(md.contains("| inf | 1.0000 | 0.0000 |"), "{md}");
    let r = &rep.paired.rows[1];
    assert!(md.contains(&format!(
        "| {:.2} | {:.4} | {:.4} |",
        r.psnr.unwrap(),
        r.ssim,
        r.mae
    )));
    assert!(md.contains(&format!("{:.6}", rep.mmd.as_ref().unwrap().value)));
    assert!(md.contains(&format!(
        "| m1 | 2 | {:.4} |",
        rep.diversity.rows[1].mean_pairwise_ms_ssim
    )));
}

/// Structural equality with a relative tolerance on numbers (serde_json's default float parser
/// may differ in the last bit).
fn close(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value::*;
    match (a, b) {
        (Number(x), Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            (x - y).abs() <= 1e-14 * x.abs().max(y.abs()).max(1e-300)
        }
        (Array(x), Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| close(p, q)),
        (Object(x), Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| close(v, w)))
        }
        _ => a == b,
    }
}

#[test]
fn json_round_trip_with_infinite_psnr() {
    let rep = evaluate(&input()).unwrap();
    let json = serde_json::to_string_pretty(&rep).unwrap();
    assert!(json.contains("\"psnr\": null"));
    assert!(json.contains("\"estimator\": \"unbiased\""));
    let back: EvalReport = serde_json::from_str(&json).unwrap();
    assert_eq!(back.paired.rows[0].psnr, None);
    assert!(back.paired.rows[1].psnr.is_some());
    assert_eq!(back.paired.rows.len(), rep.paired.rows.len());
    assert!(close(
        &serde_json::to_value(&rep).unwrap(),
        &serde_json::to_value(&back).unwrap()
    ));
}

#[test]
fn evaluate_rejects_bad_input_naming_the_item() {
    let mut bad = input();
    bad.synthetic[1].data.pop();
    let e = evaluate(&bad).unwrap_err();
    assert!(
        matches!(&e, MetricsError::Context { source, .. } if matches!(**source, MetricsError::LengthMismatch { .. }))
    );
    assert!(e.to_string().contains("s0_noisy"), "{e}");

    let mut bad = input();
    bad.real[0].mask_index = 5;
    let e = evaluate(&bad).unwrap_err();
    assert!(
        e.to_string().contains("'r0'") && e.to_string().contains("mask_index"),
        "{e}"
    );

    let mut bad = input();
    bad.masks[1].labels.iter_mut().for_each(|l| *l = 0);
    let e = evaluate(&bad).unwrap_err();
    assert!(
        e.to_string().contains("m1") && e.to_string().contains("selects no voxels"),
        "{e}"
    );

    // Default 5 scales do not fit 16^3: refused before any work, naming the section.
    let mut bad = input();
    bad.ms_ssim = MsSsimOptions::default();
    let e = evaluate(&bad).unwrap_err();
    assert!(
        matches!(&e, MetricsError::Context { source, .. } if matches!(**source, MetricsError::TooSmall { .. }))
    );
    assert!(e.to_string().contains("diversity"), "{e}");

    let mut bad = input();
    bad.dims = [16, 16, 15];
    assert!(evaluate(&bad).is_err());
    bad.dims = [usize::MAX, 2, 1];
    assert!(matches!(
        evaluate(&bad),
        Err(MetricsError::InvalidParameter { name: "dims", .. })
    ));
    bad.dims = [0, 16, 16];
    assert!(matches!(evaluate(&bad), Err(MetricsError::Empty { .. })));
}

#[test]
fn evaluate_without_real_images_skips_real_sections() {
    let mut inp = input();
    inp.real.clear();
    let rep = evaluate(&inp).unwrap();
    assert!(rep.paired.rows.is_empty() && rep.paired.mean.is_none());
    assert!(rep.mmd.is_none() && rep.adherence.is_none());
    assert_eq!(rep.diversity.rows.len(), 2);
    let md = rep.to_markdown();
    assert!(md.contains("Needs real images"));
}

/// An image's "real mean" of a label is that label's mean in the real image of its own mask,
/// not over every real image.
#[test]
fn each_images_real_mean_is_its_pairs() {
    let mut input = input();
    // The second real image brighter in the core: the two real images now differ there.
    input.real[1].data = labelled_image(&input.masks[1].labels, [-1.0, 0.0, 0.9], 0.05, 2);
    let rep = evaluate(&input).unwrap();
    let adherence = rep.adherence.as_ref().expect("real images given");
    let core_mean = |real: usize| {
        let (data, labels) = (&input.real[real].data, &input.masks[real].labels);
        let core: Vec<f64> = data
            .iter()
            .zip(labels)
            .filter(|(_, &l)| l == 2)
            .map(|(&v, _)| v as f64)
            .collect();
        core.iter().sum::<f64>() / core.len() as f64
    };
    for s in &adherence.synthetic {
        let pair = if s.mask == "m0" { 0 } else { 1 };
        let core = s.labels.iter().find(|l| l.label == 2).unwrap();
        let got = core.real_mean.unwrap();
        assert!(
            (got - core_mean(pair)).abs() < 1e-9,
            "{}: {got} vs {}",
            s.name,
            core_mean(pair)
        );
    }
    assert!(
        (core_mean(0) - core_mean(1)).abs() > 0.2,
        "the pairs differ"
    );
}

/// The memorisation section: absent from an ordinary report's JSON; with it, the Markdown table
/// and the near-copy line, the JSON fields, and the round trip.
#[test]
fn memorisation_section_in_json_and_markdown() {
    let rep = evaluate(&input()).unwrap();
    assert!(!serde_json::to_string(&rep)
        .unwrap()
        .contains("memorisation"));
    let inp = input();
    let volumes = |images: &[NamedImage]| -> Vec<NamedVolume> {
        images
            .iter()
            .map(|i| NamedVolume {
                name: i.name.clone(),
                data: i.data.clone(),
            })
            .collect()
    };
    let (training, synthetic) = (volumes(&inp.real), volumes(&inp.synthetic));
    let m = nearest_training(
        &synthetic,
        &training[..],
        DIMS,
        &MemorisationOptions {
            ssim_threshold: 0.99,
            correlation_threshold: 0.99,
            ..Default::default()
        },
        &mut |_| {},
    )
    .unwrap();
    // These images are their masks' labels plus noise, so the other samples of a real image's
    // mask score 0.98: below the thresholds set here, above the defaults.
    let mut with = rep.clone();
    with.memorisation = Some(m.clone());
    let md = with.to_markdown();
    assert!(
        md.contains("## Memorisation (nearest training volume)"),
        "{md}"
    );
    assert!(
        md.contains("| s0_copy | r0 | 1.0000 | 1.0000 | r1 |"),
        "{md}"
    );
    assert!(md.contains("**1 of 4 (25.0%)**"), "{md}");
    let json = serde_json::to_value(&with).unwrap();
    let mem = &json["memorisation"];
    assert_eq!(mem["near_copies"], 1);
    assert_eq!(mem["near_copy_fraction"], 0.25);
    assert_eq!(mem["options"]["ssim_threshold"], 0.99);
    assert!(mem["options"].get("threads").is_none());
    assert_eq!(mem["rows"][0]["near_copy_of"]["training"], "r0");
    assert!(mem["rows"][1]["near_copy_of"].is_null());
    let back: EvalReport = serde_json::from_value(json.clone()).unwrap();
    assert!(close(&serde_json::to_value(&back).unwrap(), &json));

    // Memorisation alone: the sections that need masks are left out of the Markdown.
    let alone = EvalReport::memorisation_only(DIMS, m).to_markdown();
    assert!(alone.contains("## Memorisation"), "{alone}");
    assert!(!alone.contains("## Paired fidelity"), "{alone}");
    assert!(alone.contains("no masks given"), "{alone}");
}
