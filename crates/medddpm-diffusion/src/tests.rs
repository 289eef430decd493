use burn::backend::Flex;
use burn::tensor::{backend::Backend, Tensor, TensorData};
use medddpm_testdata::max_abs_diff;

use crate::*;

type B = Flex;

fn values(t: Tensor<B, 5>) -> Vec<f32> {
    t.into_data().to_vec::<f32>().unwrap()
}

/// A denoiser that knows the clean image is the constant `c` everywhere, so its noise estimate
/// is exact: eps = (x_t - sqrt(abar_t) c) / sqrt(1 - abar_t).
struct Oracle {
    schedule: CosineSchedule,
    c: f32,
}

impl Oracle {
    fn new(schedule: &CosineSchedule, c: f32) -> Self {
        Self {
            schedule: schedule.clone(),
            c,
        }
    }
}

impl Denoiser<B> for Oracle {
    fn predict_noise(&self, input: Tensor<B, 5>, timesteps: &[usize]) -> Tensor<B, 5> {
        let t = timesteps[0];
        let x_t = input.narrow(1, 0, 1);
        (x_t.sub_scalar(self.schedule.sqrt_alphas_cumprod[t] * self.c as f64))
            .div_scalar(self.schedule.sqrt_one_minus_alphas_cumprod[t])
    }
}

#[test]
fn q_sample_mixes_signal_and_noise_per_batch_element() {
    let s = CosineSchedule::new(250);
    let device = Default::default();
    let x0 = Tensor::<B, 5>::ones([2, 1, 1, 1, 2], &device);
    let noise = Tensor::<B, 5>::full([2, 1, 1, 1, 2], 2.0, &device);
    let out = values(s.q_sample(x0, &[0, 200], noise));
    for (i, t) in [0usize, 200].iter().enumerate() {
        let want = s.sqrt_alphas_cumprod[*t] + 2.0 * s.sqrt_one_minus_alphas_cumprod[*t];
        for v in &out[2 * i..2 * i + 2] {
            assert!((*v as f64 - want).abs() < 1e-6, "t={t}: {v} vs {want}");
        }
    }
}

#[test]
fn loss_is_l1_or_l2_of_the_noise_error() {
    let device = Default::default();
    let noise = Tensor::<B, 5>::from_data(
        TensorData::new(vec![1.0f32, -1.0, 0.5, 0.0], [1, 1, 1, 2, 2]),
        &device,
    );
    let pred = Tensor::<B, 5>::from_data(
        TensorData::new(vec![0.0f32, 1.0, 0.5, -2.0], [1, 1, 1, 2, 2]),
        &device,
    );
    let l1: f32 = noise_loss(noise.clone(), pred.clone(), LossType::L1).into_scalar();
    let l2: f32 = noise_loss(noise, pred, LossType::L2).into_scalar();
    assert!((l1 - 5.0 / 4.0).abs() < 1e-6);
    assert!((l2 - 9.0 / 4.0).abs() < 1e-6);
}

#[test]
fn the_loss_over_a_volume_is_within_1e_5_of_float64() {
    // Four channels of about 400k voxels (the BraTS model's output at 64x80x80), values
    // around 0.8 as an L1 loss early in training has them; an odd length too. One running f32
    // sum was 1.8e-4 off here; the blocked sums stay within 1e-5 (f32 rounding of about a
    // thousand partial sums: a few 1e-7 typically).
    let device = Default::default();
    let _rng = backend_rng();
    B::seed(&device, 11);
    for shape in [[1, 4, 64, 80, 80], [1, 1, 7, 11, 13]] {
        let noise =
            Tensor::<B, 5>::random(shape, burn::tensor::Distribution::Normal(0.0, 1.0), &device);
        let pred =
            Tensor::<B, 5>::random(shape, burn::tensor::Distribution::Normal(0.0, 1.0), &device);
        let a = noise.clone().into_data().to_vec::<f32>().unwrap();
        let b = pred.clone().into_data().to_vec::<f32>().unwrap();
        let n = a.len() as f64;
        let want_l1: f64 = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (*y as f64 - *x as f64).abs())
            .sum::<f64>()
            / n;
        let want_l2: f64 = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (*y as f64 - *x as f64).powi(2))
            .sum::<f64>()
            / n;
        let l1: f32 = noise_loss(noise.clone(), pred.clone(), LossType::L1).into_scalar();
        let l2: f32 = noise_loss(noise, pred, LossType::L2).into_scalar();
        assert!(
            ((l1 as f64 - want_l1) / want_l1).abs() < 1e-5,
            "{shape:?} L1 {l1} vs {want_l1}"
        );
        assert!(
            ((l2 as f64 - want_l2) / want_l2).abs() < 1e-5,
            "{shape:?} L2 {l2} vs {want_l2}"
        );
    }
}

#[test]
fn last_step_returns_the_clamped_x0_without_noise() {
    let sampler = DdpmSampler::new(CosineSchedule::new(250));
    let device = Default::default();
    let x_t = Tensor::<B, 5>::full([1, 1, 1, 1, 3], 3.0, &device);
    let eps = Tensor::<B, 5>::zeros([1, 1, 1, 1, 3], &device);
    let noise = Tensor::<B, 5>::full([1, 1, 1, 1, 3], 100.0, &device);
    let out = sampler.step(eps, 0, x_t, noise);
    // x0 = 3 * sqrt(1/abar_0) > 1, clamped to 1; at t = 0 coef1 = 1 and coef2 = 0.
    for v in values(out.prev_sample) {
        assert!((v - 1.0).abs() < 1e-6, "{v}");
    }
}

#[test]
fn step_adds_scaled_noise_before_the_last_step() {
    let s = CosineSchedule::new(250);
    let sampler = DdpmSampler::new(s.clone());
    let device = Default::default();
    let t = 100;
    let x_t = Tensor::<B, 5>::full([1, 1, 1, 1, 1], 0.3, &device);
    let eps = Tensor::<B, 5>::full([1, 1, 1, 1, 1], 0.2, &device);
    let z = Tensor::<B, 5>::full([1, 1, 1, 1, 1], 1.5, &device);
    let out = sampler.step(eps, t, x_t, z);
    let x0 = (0.3 * s.sqrt_recip_alphas_cumprod[t] - 0.2 * s.sqrt_recipm1_alphas_cumprod[t])
        .clamp(-1.0, 1.0);
    let mean = s.posterior_mean_coef1[t] * x0 + s.posterior_mean_coef2[t] * 0.3;
    let want = mean + (0.5 * s.posterior_log_variance_clipped[t]).exp() * 1.5;
    let got = values(out.prev_sample)[0] as f64;
    assert!((got - want).abs() < 1e-6, "{got} vs {want}");
}

/// Samples (seed 7) a batch of two from the oracle of the constant 0.25, checks that `sampler`
/// made `calls` network calls and gave the constant back, and returns the sample's shape.
fn recovers_the_oracle_image(sampler: &impl Scheduler, calls: usize) -> [usize; 5] {
    let schedule = sampler.schedule().clone();
    let device = Default::default();
    let _rng = backend_rng();
    B::seed(&device, 7);
    let cond = Tensor::<B, 5>::zeros([2, 2, 2, 3, 4], &device);
    let mut done_calls = 0;
    let x = sampler.sample(&Oracle { schedule, c: 0.25 }, cond, 1, |done| {
        done_calls = done
    });
    assert_eq!(done_calls, calls);
    let dims = x.dims();
    for v in values(x) {
        assert!((v - 0.25).abs() < 1e-4, "{v}");
    }
    dims
}

#[test]
fn sampling_with_an_exact_denoiser_recovers_the_image() {
    let sampler = DdpmSampler::new(CosineSchedule::new(50));
    assert_eq!(recovers_the_oracle_image(&sampler, 50), [2, 1, 2, 3, 4]);
}

mod ddim {
    use super::*;
    use crate::ddim::DdimSampler;
    use crate::steps::SamplerError;

    #[test]
    fn timesteps_are_trailing_and_evenly_spaced() {
        let s = CosineSchedule::new(250);
        let ten = DdimSampler::new(s.clone(), 10, 0.0).unwrap();
        assert_eq!(
            ten.timesteps(),
            &[249, 224, 199, 174, 149, 124, 99, 74, 49, 24]
        );
        assert_eq!(ten.prev_timestep(224), Some(199));
        assert_eq!(ten.prev_timestep(24), None);
        let all = DdimSampler::new(s.clone(), 250, 0.0).unwrap();
        assert!(all.timesteps().iter().copied().eq((0..250).rev()));
        assert_eq!(
            DdimSampler::new(s.clone(), 1, 0.0).unwrap().timesteps(),
            &[249]
        );
        // 250 / 3 is not whole: rounded, still from 249 down, strictly decreasing.
        assert_eq!(
            DdimSampler::new(s.clone(), 3, 0.0).unwrap().timesteps(),
            &[249, 166, 82]
        );
        assert_eq!(
            DdimSampler::new(s.clone(), 0, 0.0).unwrap_err(),
            SamplerError::Steps { got: 0, max: 250 }
        );
        assert!(DdimSampler::new(s.clone(), 251, 0.0).is_err());
        assert_eq!(
            DdimSampler::new(s, 10, 1.5).unwrap_err(),
            SamplerError::Eta(1.5)
        );
    }

    #[test]
    fn deterministic_step_matches_hand_derived_values() {
        // eta = 0, t = 120 -> 80, scalar values: x0 = (x_t - sqrt(1 - a_t) eps) / sqrt(a_t),
        // x_prev = sqrt(a_p) x0 + sqrt(1 - a_p) eps_hat with eps_hat re-derived from x0.
        let s = CosineSchedule::new(250);
        let sampler = DdimSampler::new(s.clone(), 250, 0.0).unwrap();
        let device = Default::default();
        let (t, p) = (120, 80);
        for (x_t, eps) in [(0.3f64, 0.2f64), (2.5, -0.4)] {
            let a_t = s.alphas_cumprod[t];
            let a_p = s.alphas_cumprod[p];
            let x0 = ((x_t - (1.0 - a_t).sqrt() * eps) / a_t.sqrt()).clamp(-1.0, 1.0);
            let eps_hat = (x_t - a_t.sqrt() * x0) / (1.0 - a_t).sqrt();
            let want = a_p.sqrt() * x0 + (1.0 - a_p).sqrt() * eps_hat;
            let one = |v: f64| Tensor::<B, 5>::full([1, 1, 1, 1, 1], v, &device);
            let out = sampler.step_to(one(eps), t, Some(p), one(x_t), one(100.0));
            let got = values(out.prev_sample)[0] as f64;
            assert!((got - want).abs() < 1e-5, "x_t {x_t}: {got} vs {want}");
            assert!((values(out.pred_original_sample)[0] as f64 - x0).abs() < 1e-6);
        }
        // The end of the chain returns the clamped x0 and ignores the noise.
        let x_t = Tensor::<B, 5>::full([1, 1, 1, 1, 2], 3.0, &device);
        let out = sampler.step_to(x_t.zeros_like(), 0, None, x_t.clone(), x_t.ones_like());
        assert_eq!(values(out.prev_sample), vec![1.0, 1.0]);
    }

    #[test]
    fn eta_one_at_every_timestep_is_the_ddpm_step() {
        let s = CosineSchedule::new(250);
        let ddim = DdimSampler::new(s.clone(), 250, 1.0).unwrap();
        let ddpm = DdpmSampler::new(s);
        let device = Default::default();
        let _rng = backend_rng();
        B::seed(&device, 3);
        let shape = [2, 1, 3, 4, 5];
        let normal =
            || Tensor::<B, 5>::random(shape, burn::tensor::Distribution::Normal(0.0, 1.0), &device);
        for t in [249, 200, 120, 31, 1] {
            // x_t with a scale that makes the clamp of x0 matter at some voxels.
            let (x_t, eps, z) = (normal().mul_scalar(1.5), normal(), normal());
            let a = ddpm.step(eps.clone(), t, x_t.clone(), z.clone());
            let b = ddim.step_to(eps, t, ddim.prev_timestep(t), x_t, z);
            let (a, b) = (values(a.prev_sample), values(b.prev_sample));
            let err = max_abs_diff(&a, &b);
            assert!(err < 2e-5, "t {t}: {err}");
        }
    }

    #[test]
    fn deterministic_sampling_with_an_exact_denoiser_recovers_the_image() {
        let sampler = DdimSampler::new(CosineSchedule::new(250), 10, 0.0).unwrap();
        recovers_the_oracle_image(&sampler, 10);
    }
}

#[test]
fn sampler_config_builds_the_sampler_it_names() {
    use crate::select::{Sampler, SamplerConfig, SamplerKind};
    use crate::steps::SamplerError;
    let s = CosineSchedule::new(250);
    let ddpm = Sampler::new(s.clone(), &SamplerConfig::default()).unwrap();
    assert!(matches!(ddpm, Sampler::Ddpm(_)) && ddpm.num_steps() == 250);
    let ddim = SamplerConfig {
        kind: SamplerKind::Ddim,
        steps: Some(25),
        eta: 0.0,
    };
    assert_eq!(Sampler::new(s.clone(), &ddim).unwrap().num_steps(), 25);
    let short_ddpm = SamplerConfig {
        steps: Some(25),
        ..SamplerConfig::default()
    };
    let err = Sampler::new(s, &short_ddpm).unwrap_err();
    assert_eq!(
        err,
        SamplerError::DdpmSteps {
            got: 25,
            timesteps: 250
        }
    );
    // Both samplers that take fewer steps are named.
    assert!(
        err.to_string().contains("DDIM") && err.to_string().contains("DPM-Solver++"),
        "{err}"
    );
    let parsed: SamplerConfig =
        serde_json::from_str(r#"{"kind": "ddim", "steps": 10, "eta": 0.5}"#).unwrap();
    assert_eq!(parsed.kind, SamplerKind::Ddim);
    assert_eq!((parsed.steps, parsed.eta), (Some(10), 0.5));
    let defaults: SamplerConfig = serde_json::from_str("{}").unwrap();
    assert_eq!(defaults, SamplerConfig::default());
    assert!(serde_json::from_str::<SamplerConfig>(r#"{"kind": "euler"}"#).is_err());
    // The command line's spelling is the file's.
    assert_eq!("ddim".parse::<SamplerKind>(), Ok(SamplerKind::Ddim));
    assert_eq!(SamplerKind::Ddim.to_string().parse(), Ok(SamplerKind::Ddim));
    assert!("euler"
        .parse::<SamplerKind>()
        .unwrap_err()
        .contains("ddpm, ddim or dpm-solver++"));
    assert_eq!("dpm-solver++".parse(), Ok(SamplerKind::DpmSolver));
    let parsed: SamplerConfig =
        serde_json::from_str(r#"{"kind": "dpm-solver++", "steps": 20}"#).unwrap();
    assert_eq!(
        Sampler::new(CosineSchedule::new(250), &parsed)
            .unwrap()
            .num_steps(),
        20
    );
}

/// The oracle of a v-trained network: v = sqrt(abar) eps - sqrt(1 - abar) c, from its exact
/// noise estimate.
struct VOracle(Oracle);

impl Denoiser<B> for VOracle {
    fn predict_noise(&self, input: Tensor<B, 5>, timesteps: &[usize]) -> Tensor<B, 5> {
        let s = &self.0.schedule;
        let t = timesteps[0];
        let eps = self.0.predict_noise(input, timesteps);
        eps.mul_scalar(s.sqrt_alphas_cumprod[t])
            .sub_scalar(s.sqrt_one_minus_alphas_cumprod[t] * self.0.c as f64)
    }
}

#[test]
fn v_target_is_hand_computed_and_converts_back_to_the_noise() {
    let s = CosineSchedule::new(250);
    let device = Default::default();
    let x0 = Tensor::<B, 5>::from_data(
        TensorData::new(vec![0.5f32, -1.0], [2, 1, 1, 1, 1]),
        &device,
    );
    let noise = Tensor::<B, 5>::from_data(
        TensorData::new(vec![1.0f32, -0.25], [2, 1, 1, 1, 1]),
        &device,
    );
    let ts = [10usize, 240];
    let eps = values(Prediction::Epsilon.target(&s, x0.clone(), &ts, noise.clone()));
    assert_eq!(eps, vec![1.0, -0.25]);
    let v = values(Prediction::V.target(&s, x0.clone(), &ts, noise.clone()));
    for (i, (&t, (x, n))) in ts.iter().zip([(0.5, 1.0), (-1.0, -0.25)]).enumerate() {
        let (a, b) = (
            s.alphas_cumprod[t].sqrt(),
            (1.0 - s.alphas_cumprod[t]).sqrt(),
        );
        let want = a * n - b * x;
        assert!(
            (v[i] as f64 - want).abs() < 1e-6,
            "t={t}: {} vs {want}",
            v[i]
        );
        // Back to the noise from v and x_t = a x0 + b noise, at that element's step.
        let x_t = Tensor::<B, 1>::from_floats([(a * x + b * n) as f32], &device);
        let back: f32 = Prediction::V
            .to_noise(&s, Tensor::<B, 1>::from_floats([v[i]], &device), t, x_t)
            .into_scalar();
        assert!((back as f64 - n).abs() < 1e-6, "t={t}: {back} vs {n}");
    }
    let same = Prediction::Epsilon.to_noise(&s, noise.clone(), 3, x0);
    assert_eq!(values(same), values(noise));
}

/// `sampler`'s one-channel sample for `cond` from `denoiser`, the backend's generator seeded
/// with `seed` (the caller holds [`backend_rng`]).
fn seeded_sample(
    sampler: &Sampler,
    denoiser: &impl Denoiser<B>,
    cond: &Tensor<B, 5>,
    seed: u64,
) -> Vec<f32> {
    B::seed(&Default::default(), seed);
    values(sampler.sample(denoiser, cond.clone(), 1, |_| {}))
}

#[test]
fn every_sampler_reaches_the_oracle_image_from_a_v_prediction() {
    // The same exact denoiser expressed as v: each sampler, told the network predicts v,
    // walks the path it walks with the noise oracle (same seed), to float rounding.
    let s = CosineSchedule::new(250);
    let device = Default::default();
    let cond = Tensor::<B, 5>::zeros([1, 2, 2, 2, 2], &device);
    let eps_model = Oracle::new(&s, 0.3);
    let v_model = VOracle(Oracle::new(&s, 0.3));
    for config in [
        SamplerConfig::default(),
        SamplerConfig {
            kind: SamplerKind::Ddim,
            steps: Some(25),
            eta: 0.5,
        },
        SamplerConfig {
            kind: SamplerKind::DpmSolver,
            steps: Some(10),
            eta: 0.0,
        },
    ] {
        let sampler = Sampler::new(s.clone(), &config).unwrap();
        let _rng = backend_rng();
        let want = seeded_sample(&sampler, &eps_model, &cond, 5);
        let sampler = sampler.with_prediction(Prediction::V);
        let got = seeded_sample(&sampler, &v_model, &cond, 5);
        for (g, w) in got.iter().zip(&want) {
            assert!((g - 0.3).abs() < 1e-3, "{config:?}: {g}");
            assert!((g - w).abs() < 1e-4, "{config:?}: {g} vs {w}");
        }
    }
}

#[test]
fn sampling_from_given_noise_asks_for_z_only_where_a_step_adds_it() {
    // `sample` is `sample_from` with the generator's draws: the same result from the same
    // draws, and `noise(i)` asked for exactly the steps that add noise.
    let s = CosineSchedule::new(20);
    let device = Default::default();
    let cond = Tensor::<B, 5>::zeros([2, 2, 2, 2, 2], &device);
    let oracle = Oracle::new(&s, -0.4);
    let shape = [2, 1, 2, 2, 2];
    let normal = burn::tensor::Distribution::Normal(0.0, 1.0);
    for (config, asked) in [
        (SamplerConfig::default(), (0..19).collect::<Vec<_>>()),
        (
            SamplerConfig {
                kind: SamplerKind::DpmSolver,
                steps: Some(5),
                eta: 0.0,
            },
            vec![],
        ),
    ] {
        let sampler = Sampler::new(s.clone(), &config).unwrap();
        let _rng = backend_rng();
        let want = seeded_sample(&sampler, &oracle, &cond, 11);
        B::seed(&device, 11);
        let x = Tensor::<B, 5>::random(shape, normal, &device);
        let mut steps = Vec::new();
        let draw = |i| {
            steps.push(i);
            Tensor::random(shape, normal, &device)
        };
        let got = values(sampler.sample_from(&oracle, cond.clone(), x, draw, |_, _| {}));
        assert_eq!(got, want, "{config:?}");
        assert_eq!(steps, asked, "{config:?}");
    }
}
