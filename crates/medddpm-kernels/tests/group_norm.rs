//! GroupNorm through the extension on the CPU: the forward matches burn's `nn::GroupNorm`, and
//! the hand-written backward matches autodiff of the plain-op forward, in both layouts, with
//! and without the fused SiLU, in f32 and with bf16 activations.

use burn::backend::{Autodiff, Flex};
use burn::nn::GroupNormConfig;
use burn::tensor::activation::silu;
use burn::tensor::{DType, Distribution, FloatDType, Tensor};
use medddpm_kernels::conv::rel_l2;
use medddpm_kernels::norm::{self, GroupNormSpec};
use medddpm_kernels::{group_norm, Layout};

type A = Autodiff<Flex>;

/// `x` `[b, c, d, h, w]` in `layout`'s logical shape.
fn in_layout<B: burn::tensor::backend::Backend>(x: Tensor<B, 5>, layout: Layout) -> Tensor<B, 5> {
    match layout {
        Layout::Ncdhw => x,
        Layout::Ndhwc => x.permute([0, 2, 3, 4, 1]),
    }
}

fn from_layout<B: burn::tensor::backend::Backend>(x: Tensor<B, 5>, layout: Layout) -> Tensor<B, 5> {
    match layout {
        Layout::Ncdhw => x,
        Layout::Ndhwc => x.permute([0, 4, 1, 2, 3]),
    }
}

/// (batch, channels, groups, spatial size): the U-Net's 32 groups of 2 channels, one channel
/// per group, one group, odd and unequal sizes, batch 2.
const CASES: [(usize, usize, usize, [usize; 3]); 4] = [
    (1, 64, 32, [8, 8, 8]),
    (2, 6, 3, [5, 7, 3]),
    (1, 4, 4, [6, 6, 6]),
    (1, 5, 1, [4, 3, 5]),
];

#[test]
fn forward_matches_burns_group_norm() {
    let device = Default::default();
    for layout in Layout::ALL {
        for silu_too in [false, true] {
            for (i, &(b, c, g, [d, h, w])) in CASES.iter().enumerate() {
                let module = GroupNormConfig::new(g, c).init::<Flex>(&device);
                // Non-trivial affine parameters.
                let gamma = Tensor::<Flex, 1>::random([c], Distribution::Normal(1.0, 0.5), &device);
                let beta = Tensor::<Flex, 1>::random([c], Distribution::Normal(0.0, 0.5), &device);
                let module = burn::nn::GroupNorm {
                    gamma: Some(burn::module::Param::from_tensor(gamma.clone())),
                    beta: Some(burn::module::Param::from_tensor(beta.clone())),
                    ..module
                };
                let x = Tensor::<Flex, 5>::random(
                    [b, c, d, h, w],
                    Distribution::Normal(0.3, 2.0),
                    &device,
                );
                let mut want = module.forward(x.clone());
                if silu_too {
                    want = silu(want);
                }
                let spec = GroupNormSpec {
                    num_groups: g,
                    epsilon: module.epsilon,
                    silu: silu_too,
                    layout,
                    engine: medddpm_kernels::NormEngine::Kernel,
                };
                let got = from_layout(group_norm(in_layout(x, layout), gamma, beta, spec), layout);
                let e = rel_l2(got, want);
                assert!(e < 1e-5, "case {i} {layout} silu {silu_too}: {e:e}");
            }
        }
    }
}

/// gamma `[c]` from N(1, 0.5), beta from N(0, 0.5) and a probe of `dims` from N(0, 1) (the
/// loss's weights), drawn in that order: what the gradient tests share.
fn params_and_probe(
    c: usize,
    dims: [usize; 5],
) -> (Tensor<Flex, 1>, Tensor<Flex, 1>, Tensor<Flex, 5>) {
    let device = Default::default();
    let gamma = Tensor::<Flex, 1>::random([c], Distribution::Normal(1.0, 0.5), &device);
    let beta = Tensor::<Flex, 1>::random([c], Distribution::Normal(0.0, 0.5), &device);
    let probe = Tensor::<Flex, 5>::random(dims, Distribution::Normal(0.0, 1.0), &device);
    (gamma, beta, probe)
}

/// `t` on the autodiff backend, its gradient tracked.
fn tracked<const D: usize>(t: &Tensor<Flex, D>) -> Tensor<A, D> {
    Tensor::from_inner(t.clone()).require_grad()
}

/// Gradients of `sum(y * probe)` through the extension's node and through autodiff of the
/// plain-op forward.
fn grads(
    layout: Layout,
    silu_too: bool,
    (b, c, g, [d, h, w]): (usize, usize, usize, [usize; 3]),
    dtype: DType,
) -> [(Tensor<Flex, 1>, Tensor<Flex, 1>); 3] {
    let device = Default::default();
    let spec = GroupNormSpec {
        num_groups: g,
        epsilon: 1e-5,
        silu: silu_too,
        layout,
        engine: medddpm_kernels::NormEngine::Kernel,
    };
    let x = Tensor::<Flex, 5>::random([b, c, d, h, w], Distribution::Normal(0.3, 2.0), &device);
    let x = in_layout(x, layout);
    let x = if dtype == DType::BF16 {
        x.cast(FloatDType::BF16)
    } else {
        x
    };
    let (gamma, beta, probe) = params_and_probe(c, x.dims());
    let run = |fused: bool| {
        let (xa, ga, ba) = (tracked(&x), tracked(&gamma), tracked(&beta));
        let y = if fused {
            group_norm(xa.clone(), ga.clone(), ba.clone(), spec)
        } else {
            norm::forward(xa.clone(), None, ga.clone(), ba.clone(), &spec).0
        };
        let loss = y
            .cast(FloatDType::F32)
            .mul(Tensor::from_inner(probe.clone()))
            .sum();
        let g = loss.backward();
        (
            xa.grad(&g).unwrap().cast(FloatDType::F32),
            ga.grad(&g).unwrap(),
            ba.grad(&g).unwrap(),
        )
    };
    let (fx, fg, fb) = run(true);
    let (rx, rg, rb) = run(false);
    [(fx.flatten(0, 4), rx.flatten(0, 4)), (fg, rg), (fb, rb)]
}

#[test]
fn backward_matches_autodiff_of_the_plain_forward() {
    for layout in Layout::ALL {
        for silu_too in [false, true] {
            for (i, &case) in CASES.iter().enumerate() {
                let [x, gamma, beta] = grads(layout, silu_too, case, DType::F32);
                for (what, (got, want)) in [("x", x), ("gamma", gamma), ("beta", beta)] {
                    let e = rel_l2(got, want);
                    assert!(e < 1e-4, "case {i} {layout} silu {silu_too} d{what}: {e:e}");
                }
            }
        }
    }
}

#[test]
fn bf16_activations_keep_f32_statistics_and_parameter_gradients() {
    for layout in Layout::ALL {
        let case = CASES[0];
        let [x, gamma, beta] = grads(layout, true, case, DType::BF16);
        // The parameter gradients come back in the parameters' f32.
        assert_eq!((gamma.0.dtype(), beta.0.dtype()), (DType::F32, DType::F32));
        // Both sides see the same bf16 input; the gradients differ by bf16 rounding of dx only.
        for (what, (got, want), tolerance) in
            [("x", x, 1e-2), ("gamma", gamma, 1e-4), ("beta", beta, 1e-4)]
        {
            let e = rel_l2(got, want);
            assert!(e < tolerance, "{layout} d{what}: {e:e}");
        }
    }
}

#[test]
fn bf16_input_gives_bf16_output_and_f32_statistics() {
    use medddpm_kernels::KernelBackend;
    let device = Default::default();
    let x = Tensor::<Flex, 5>::random([1, 8, 4, 4, 4], Distribution::Default, &device)
        .cast(FloatDType::BF16);
    let spec = GroupNormSpec {
        num_groups: 4,
        epsilon: 1e-5,
        silu: true,
        layout: Layout::Ncdhw,
        engine: medddpm_kernels::NormEngine::Kernel,
    };
    let out = Flex::group_norm_forward(
        medddpm_kernels::norm::NormInput::Shifted(x.into_primitive().tensor(), None),
        Tensor::<Flex, 1>::ones([8], &device)
            .into_primitive()
            .tensor(),
        Tensor::<Flex, 1>::zeros([8], &device)
            .into_primitive()
            .tensor(),
        spec,
    );
    let dtype =
        |t| Tensor::<Flex, 2>::from_primitive(burn::tensor::TensorPrimitive::Float(t)).dtype();
    assert_eq!(dtype(out.mean.clone()), DType::F32);
    assert_eq!(dtype(out.rstd.clone()), DType::F32);
    let y = Tensor::<Flex, 5>::from_primitive(burn::tensor::TensorPrimitive::Float(out.y));
    assert_eq!(y.dtype(), DType::BF16);
}

/// A shifted GroupNorm (the shift added per batch item and channel inside the operation) gives
/// what GroupNorm of `x + shift` gives, and its hand-written backward the gradients autodiff
/// finds through the addition, the shift's included; both layouts, batch 2, with SiLU.
#[test]
fn a_shifted_input_matches_the_shift_added_before_the_norm() {
    use medddpm_kernels::norm::group_norm_shifted;
    let device = Default::default();
    for layout in Layout::ALL {
        let (b, c) = (2, 6);
        let spec = GroupNormSpec {
            num_groups: 3,
            epsilon: 1e-5,
            silu: true,
            layout,
            engine: medddpm_kernels::NormEngine::Kernel,
        };
        let x = in_layout(
            Tensor::<Flex, 5>::random([b, c, 5, 4, 3], Distribution::Normal(0.3, 2.0), &device),
            layout,
        );
        let shift = Tensor::<Flex, 2>::random([b, c], Distribution::Normal(0.5, 1.0), &device);
        let (gamma, beta, probe) = params_and_probe(c, x.dims());
        let run = |fused: bool| {
            let (xa, sa) = (tracked(&x), tracked(&shift));
            let (ga, ba) = (tracked(&gamma), tracked(&beta));
            let y = if fused {
                group_norm_shifted(xa.clone(), Some(sa.clone()), ga.clone(), ba.clone(), spec)
            } else {
                let s5 = match layout {
                    Layout::Ncdhw => sa.clone().reshape([b, c, 1, 1, 1]),
                    Layout::Ndhwc => sa.clone().reshape([b, 1, 1, 1, c]),
                };
                norm::forward(xa.clone() + s5, None, ga.clone(), ba.clone(), &spec).0
            };
            let g = y
                .clone()
                .mul(Tensor::from_inner(probe.clone()))
                .sum()
                .backward();
            [
                y.inner().flatten(0, 4),
                xa.grad(&g).unwrap().flatten(0, 4),
                sa.grad(&g).unwrap().flatten(0, 1),
                ga.grad(&g).unwrap(),
                ba.grad(&g).unwrap(),
            ]
        };
        let fused = run(true);
        let plain = run(false);
        for (what, (got, want)) in ["y", "dx", "dshift", "dgamma", "dbeta"]
            .iter()
            .zip(fused.into_iter().zip(plain))
        {
            let e = rel_l2(got, want);
            assert!(e < 1e-4, "{layout} {what}: {e:e}");
        }
    }
}
