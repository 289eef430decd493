//! The run-time switches on the CPU backend, against a float64 evaluation of the same network:
//! channels-last gives channels-first's results, strict f32 is within f32 rounding of f64, bf16
//! really computes in bf16 (its error is that of a 7-bit mantissa, not of f32), and bf16
//! training yields f32 gradients for the f32 master weights.

use burn::backend::{Autodiff, Flex};
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Distribution, Tensor};
use medddpm_unet::{
    cast_compute_params, load_weight_values, randomize_weights, weight_values, Layout, OpClass,
    OpProfile, OpStats, UNet, UNetConfig,
};

type B = Flex;

/// A small network that still has every block kind.
fn tiny() -> UNetConfig {
    UNetConfig::tiny()
}

fn randomized<Bk: Backend>(model: UNet<Bk>) -> UNet<Bk> {
    randomize_weights(model)
}

fn model_and_input() -> (UNet<B>, Tensor<B, 5>) {
    let device = Default::default();
    B::seed(&device, 7);
    let model = randomized(tiny().init::<B>(&device).unwrap());
    let x = Tensor::<B, 5>::random([2, 3, 8, 8, 8], Distribution::Normal(0.0, 1.0), &device);
    (model, x)
}

fn rel_l2(a: Tensor<B, 5>, b: Tensor<B, 5>) -> f64 {
    let a: Vec<f64> = a
        .cast(burn::tensor::FloatDType::F64)
        .into_data()
        .to_vec()
        .unwrap();
    let b: Vec<f64> = b
        .cast(burn::tensor::FloatDType::F64)
        .into_data()
        .to_vec()
        .unwrap();
    let num: f64 = a.iter().zip(&b).map(|(x, y)| (x - y).powi(2)).sum();
    let den: f64 = b.iter().map(|y| y * y).sum();
    (num / den).sqrt()
}

const T: [usize; 2] = [3, 180];

fn reference_f64(model: &UNet<B>, x: &Tensor<B, 5>) -> Tensor<B, 5> {
    let model64 = cast_compute_params(model.clone(), DType::F64);
    assert_eq!(model64.compute_dtype(), DType::F64);
    let out = model64.forward(x.clone().cast(burn::tensor::FloatDType::F64), &T);
    assert_eq!(out.dtype(), DType::F64);
    out
}

#[test]
fn channels_last_gives_the_channels_first_result() {
    let (model, x) = model_and_input();
    let first = model.clone().forward(x.clone(), &T);
    let last_model = model.with_layout(Layout::Ndhwc);
    assert_eq!(last_model.layout(), Layout::Ndhwc);
    let last = last_model.forward(x, &T);
    assert_eq!(last.dims(), first.dims());
    let err = rel_l2(last, first);
    println!("ndhwc vs ncdhw: rel. L2 {err:.2e}");
    assert!(err < 1e-5, "layouts disagree: {err}");
}

#[test]
fn strict_f32_is_within_f32_rounding_of_f64_in_both_layouts() {
    let (model, x) = model_and_input();
    let reference = reference_f64(&model, &x);
    for layout in Layout::ALL {
        let out = model.clone().with_layout(layout).forward(x.clone(), &T);
        assert_eq!(out.dtype(), DType::F32);
        let err = rel_l2(out, reference.clone());
        println!("fp32 {layout} vs f64: rel. L2 {err:.2e}");
        assert!(err < 1e-5, "{layout}: {err}");
        assert!(err > 0.0, "{layout}: f32 and f64 cannot agree exactly");
    }
}

#[test]
fn bf16_computes_in_bf16_and_returns_f32() {
    let (model, x) = model_and_input();
    let reference = reference_f64(&model, &x);
    let bf16 = cast_compute_params(model.clone(), DType::BF16);
    assert_eq!(bf16.compute_dtype(), DType::BF16);
    // GroupNorm's affine parameters stay f32.
    let gamma = bf16.out.norm.gamma.as_ref().unwrap().val();
    assert_eq!(gamma.dtype(), DType::F32);
    for layout in Layout::ALL {
        let out = bf16.clone().with_layout(layout).forward(x.clone(), &T);
        assert_eq!(
            out.dtype(),
            DType::F32,
            "the output comes back in the input's dtype"
        );
        let err = rel_l2(out, reference.clone());
        println!("bf16 {layout} vs f64: rel. L2 {err:.2e}");
        // bf16 keeps 8 significant bits (relative rounding 2^-9 = 2e-3 per operation).
        assert!(err > 1e-4 && err < 1e-1, "{layout}: {err}");
    }
}

#[test]
fn bf16_training_gives_f32_gradients_close_to_f32_training() {
    type A = Autodiff<B>;
    let _turn = medddpm_diffusion::autodiff_turn();
    let device = Default::default();
    A::seed(&device, 11);
    let model = randomized(tiny().init::<A>(&device).unwrap());
    let x = Tensor::<A, 5>::random([1, 3, 8, 8, 8], Distribution::Normal(0.0, 1.0), &device);
    let target = Tensor::<A, 5>::random([1, 1, 8, 8, 8], Distribution::Normal(0.0, 1.0), &device);
    let grad_of = |m: &UNet<A>, master: &UNet<A>| -> Vec<f32> {
        let loss = (m.forward(x.clone(), &[42]) - target.clone()).abs().mean();
        let grads = loss.backward();
        let w = &master.input_blocks[1]
            .res
            .as_ref()
            .unwrap()
            .in_layers
            .conv
            .weight;
        let g = w
            .val()
            .grad(&grads)
            .expect("the f32 master weight has a gradient");
        assert_eq!(g.dtype(), DType::F32);
        g.into_data().to_vec().unwrap()
    };
    let g32 = grad_of(&model, &model);
    let work = cast_compute_params(model.clone(), DType::BF16).with_layout(Layout::Ndhwc);
    let g16 = grad_of(&work, &model);
    let dot: f64 = g32
        .iter()
        .zip(&g16)
        .map(|(a, b)| *a as f64 * *b as f64)
        .sum();
    let n32: f64 = g32.iter().map(|a| (*a as f64).powi(2)).sum::<f64>().sqrt();
    let n16: f64 = g16.iter().map(|a| (*a as f64).powi(2)).sum::<f64>().sqrt();
    let cosine = dot / (n32 * n16);
    println!("bf16 vs f32 gradient cosine {cosine:.5}");
    assert!(cosine > 0.99, "{cosine}");
    assert!(g32 != g16, "bf16 must not reproduce f32 bit for bit");
}

#[test]
fn profiled_forward_splits_time_by_operation_class() {
    let (model, x) = model_and_input();
    for layout in Layout::ALL {
        let m = model.clone().with_layout(layout);
        let profile = std::cell::RefCell::new(OpProfile::default());
        let profiled = m.forward_profiled(x.clone(), &T, &profile);
        let plain = m.forward(x.clone(), &T);
        assert!(rel_l2(profiled, plain) < 1e-6);
        let p = profile.into_inner();
        for class in OpClass::ALL.map(OpClass::name) {
            assert!(
                p.ms.get(class).copied().unwrap_or(0.0) > 0.0,
                "{layout}: no {class} time: {p:?}"
            );
        }
        // Every convolution is timed: the stem, two per ResBlock, the 1x1 skips, down, up, head.
        assert!(p.calls["convolution"] >= 15, "{p:?}");
        assert!(!p.sync_failed);
    }
}

#[test]
fn weights_move_between_modules_and_dtypes() {
    let (model, x) = model_and_input();
    let values = weight_values(&model);
    let fresh = tiny().init::<B>(&Default::default()).unwrap();
    let copy = load_weight_values(fresh, values.clone());
    assert_eq!(
        rel_l2(copy.forward(x.clone(), &T), model.forward(x, &T)),
        0.0
    );
    let bf16 = cast_compute_params(tiny().init::<B>(&Default::default()).unwrap(), DType::BF16);
    let loaded = load_weight_values(bf16, values);
    assert_eq!(loaded.compute_dtype(), DType::BF16);
}

#[test]
fn profiling_can_name_the_first_operation_with_non_finite_output() {
    let (model, x) = model_and_input();
    let check = |m: &UNet<B>| {
        let profile = std::cell::RefCell::new(OpProfile {
            check_finite: true,
            ..Default::default()
        });
        drop(m.forward_profiled(x.clone(), &T, &profile));
        profile.into_inner().first_non_finite
    };
    assert_eq!(check(&model), None);
    // A NaN in the middle block's first convolution: everything before it stays finite.
    let mut broken = model;
    let conv = &mut broken.middle_block.res_1.in_layers.conv;
    conv.weight = conv.weight.clone().map(|w| w.mul_scalar(f32::NAN));
    let place = check(&broken).expect("a non-finite output is found");
    assert!(place.starts_with("convolution #"), "{place}");
}

fn op_stats(m: &UNet<B>, x: &Tensor<B, 5>) -> Vec<OpStats> {
    let profile = std::cell::RefCell::new(OpProfile {
        record_stats: true,
        ..Default::default()
    });
    drop(m.forward_profiled(x.clone(), &T, &profile));
    profile.into_inner().stats
}

#[test]
fn operation_statistics_compare_across_layouts_and_name_a_wrong_operation() {
    let (model, x) = model_and_input();
    let reference = op_stats(&cast_compute_params(model.clone(), DType::F64), &x);
    let worst = |stats: &[OpStats]| {
        assert_eq!(stats.len(), reference.len());
        stats
            .iter()
            .zip(&reference)
            .map(|(s, r)| s.deviation(r))
            .fold(0.0, f64::max)
    };
    // Both layouts, f32 against f64: every operation within f32 rounding.
    for layout in Layout::ALL {
        let stats = op_stats(&model.clone().with_layout(layout), &x);
        assert!(worst(&stats) < 1e-5, "{layout}: {}", worst(&stats));
    }
    // A wrong convolution in the middle block: the ops before it agree, it does not.
    let mut broken = model.clone().with_layout(Layout::Ndhwc);
    let conv = &mut broken.middle_block.res_1.in_layers.conv;
    conv.weight = conv.weight.clone().map(|w| w.mul_scalar(1.01));
    let stats = op_stats(&broken, &x);
    let first = stats
        .iter()
        .zip(&reference)
        .position(|(s, r)| s.deviation(r) > 1e-4)
        .expect("the scaled convolution deviates");
    assert!(
        stats[first].op.starts_with("convolution #"),
        "{:?}",
        stats[first]
    );
    let middle_conv = op_stats(&model.clone().with_layout(Layout::Ndhwc), &x)
        .iter()
        .zip(&stats)
        .position(|(a, b)| a.op.starts_with("convolution") && a.sum != b.sum)
        .unwrap();
    assert_eq!(first, middle_conv);
}

#[test]
fn operation_statistics_see_values_in_the_wrong_place() {
    let device = Default::default();
    // Fixed values (random ones, drawn from the backend's generator that other tests reseed,
    // now and then made a flip that moved the position-weighted sum by less than 1e-2).
    let x = Tensor::<B, 1, burn::tensor::Int>::arange(0..24, &device)
        .float()
        .reshape([1, 4, 6])
        .sub_scalar(11.5);
    let stats = |t: &Tensor<B, 3>, layout| OpStats::of("t".into(), t, layout);
    let reference = stats(&x, Layout::Ncdhw);
    // The same values channels-last: no deviation.
    let channels_last = x.clone().swap_dims(1, 2);
    assert!(stats(&channels_last, Layout::Ndhwc).deviation(&reference) < 1e-12);
    // The same values in another order: same moments, large deviation.
    let shuffled = x.clone().flip([2]);
    assert!(stats(&shuffled, Layout::Ncdhw).deviation(&reference) > 1e-2);
    // A different shape cannot be compared.
    let other = stats(&x.clone().reshape([1, 2, 12]), Layout::Ncdhw);
    assert_eq!(other.deviation(&reference), f64::INFINITY);
}
