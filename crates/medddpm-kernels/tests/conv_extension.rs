//! The convolution extension on the CPU: the autodiff backend's hand-written backward gives
//! burn's own gradients, in both layouts, on the U-Net's geometries and odd ones.

use burn::backend::{Autodiff, Flex};
use burn::tensor::{Distribution, Tensor};
use medddpm_kernels::conv::{
    batch_chunks_vs_reference, engine_vs_reference, in_layout, reference, rel_l2, ConvCase,
};
use medddpm_kernels::{conv3d, Compute, Conv3dSpec, Layout, Precision};

type A = Autodiff<Flex>;

fn compute(layout: Layout) -> Compute {
    Compute {
        precision: Precision::Fp32,
        layout,
        ..Default::default()
    }
}

/// A 3x3x3 convolution's spec: `stride`, padding 1, f32 in `layout`.
fn padded_one(stride: [usize; 3], layout: Layout) -> Conv3dSpec {
    Conv3dSpec {
        stride,
        padding: [1, 1, 1],
        compute: compute(layout),
    }
}

/// `got` has `want`'s shape and agrees with it to 1e-6 (relative L2); `case` names it.
fn assert_agrees(got: Tensor<Flex, 5>, want: Tensor<Flex, 5>, case: &str) {
    assert_eq!(got.dims(), want.dims(), "{case}");
    let e = rel_l2(got, want);
    assert!(e < 1e-6, "{case}: {e:e}");
}

/// Every case of `cases` through `check` (the engine's differences from the twin), in f32 and
/// bf16, both layouts: f32 is the same arithmetic; bf16 rounds the results to an 8-bit mantissa.
fn assert_cases_agree(cases: &[ConvCase], check: impl Fn(ConvCase, Compute, u64) -> [f64; 3]) {
    for (precision, tolerance) in [(Precision::Fp32, 1e-6), (Precision::Bf16, 1e-2)] {
        for layout in Layout::ALL {
            let compute = Compute {
                precision,
                ..compute(layout)
            };
            for (i, &case) in cases.iter().enumerate() {
                let errs = check(case, compute, i as u64);
                for (part, e) in ["forward", "data gradient", "weight gradient"]
                    .iter()
                    .zip(errs)
                {
                    assert!(e < tolerance, "{precision} {layout} {case:?} {part}: {e:e}");
                }
            }
        }
    }
}

#[test]
fn inner_ops_match_the_reference_twin_in_both_layouts() {
    let device = Default::default();
    assert_cases_agree(&ConvCase::standard(1), |case, compute, seed| {
        engine_vs_reference::<Flex>(&device, case, compute, seed, 2)
    });
}

#[test]
fn a_batch_in_several_calls_matches_the_reference_twin_in_both_layouts() {
    let device = Default::default();
    let three = ConvCase {
        batch: 3,
        c_in: 8,
        c_out: 16,
        size: [4, 5, 3],
        kernel: 3,
        stride: 1,
    };
    let cases = ConvCase::standard(1).into_iter().chain([three]);
    let batches: Vec<_> = cases.filter(|c| c.batch > 1).collect();
    assert_cases_agree(&batches, |case, compute, seed| {
        batch_chunks_vs_reference::<Flex>(&device, case, compute, seed, 1)
    });
}

#[test]
fn autodiff_backward_matches_burns_conv3d_gradients() {
    let device = Default::default();
    for layout in Layout::ALL {
        for case in ConvCase::standard(1) {
            let [d, h, w] = case.size;
            let k = case.kernel;
            let x = Tensor::<A, 5>::random(
                [case.batch, case.c_in, d, h, w],
                Distribution::Normal(0.0, 1.0),
                &device,
            );
            let weight = Tensor::<A, 5>::random(
                [case.c_out, case.c_in, k, k, k],
                Distribution::Normal(0.0, 0.2),
                &device,
            );
            let bias =
                Tensor::<A, 1>::random([case.c_out], Distribution::Normal(0.0, 1.0), &device);
            let spec = case.spec(compute(layout));
            let out = spec.output_size(case.size, [k; 3]);
            let upstream = Tensor::<A, 5>::random(
                [case.batch, case.c_out, out[0], out[1], out[2]],
                Distribution::Normal(0.0, 1.0),
                &device,
            );

            // The extension, with x in the layout under test.
            let (xe, we, be) = (
                x.clone().require_grad(),
                weight.clone().require_grad(),
                bias.clone().require_grad(),
            );
            let y = conv3d(
                in_layout(xe.clone(), layout),
                we.clone(),
                Some(be.clone()),
                spec,
            );
            let grads = (y.clone() * upstream.clone()).sum().backward();
            let (gx, gw, gb) = (
                xe.grad(&grads).unwrap(),
                we.grad(&grads).unwrap(),
                be.grad(&grads).unwrap(),
            );

            // burn's own convolution and autodiff.
            let (xr, wr, br) = (x.require_grad(), weight.require_grad(), bias.require_grad());
            let yr = burn::tensor::module::conv3d(
                xr.clone(),
                wr.clone(),
                Some(br.clone()),
                spec.options(),
            );
            let grads_r = (yr.clone() * upstream).sum().backward();

            let tol = 1e-5;
            let e = rel_l2(y.inner(), yr.inner());
            assert!(e < tol, "{layout} {case:?} forward {e:e}");
            let e = rel_l2(gx, xr.grad(&grads_r).unwrap());
            assert!(e < tol, "{layout} {case:?} dx {e:e}");
            let e = rel_l2(gw, wr.grad(&grads_r).unwrap());
            assert!(e < tol, "{layout} {case:?} dw {e:e}");
            let e = rel_l2(gb, br.grad(&grads_r).unwrap());
            assert!(e < tol, "{layout} {case:?} dbias {e:e}");
        }
    }
}

#[test]
fn reference_twin_is_burns_convolution() {
    let device = Default::default();
    let case = ConvCase::standard(1)[1];
    let spec = case.spec(compute(Layout::Ncdhw));
    let x = Tensor::<Flex, 5>::random([1, 16, 8, 8, 8], Distribution::Default, &device);
    let w = Tensor::<Flex, 5>::random([16, 16, 3, 3, 3], Distribution::Default, &device);
    let want = burn::tensor::module::conv3d(x.clone(), w.clone(), None, spec.options());
    assert_eq!(rel_l2(reference::forward(x, w, spec), want), 0.0);
}

#[test]
fn upsampling_through_the_extension_is_layout_independent() {
    let device = Default::default();
    let x = Tensor::<A, 5>::random([1, 3, 2, 3, 4], Distribution::Default, &device).require_grad();
    let first = medddpm_kernels::upsample_x2(x.clone(), Layout::Ncdhw);
    let last = medddpm_kernels::upsample_x2(x.clone().permute([0, 2, 3, 4, 1]), Layout::Ndhwc)
        .permute([0, 4, 1, 2, 3]);
    assert_eq!(first.dims(), [1, 3, 4, 6, 8]);
    assert!(rel_l2(last.clone().inner(), first.clone().inner()) < 1e-6);
    // The autodiff node's backward (the plain-op adjoint): every voxel's weights sum to 8.
    let grads = last.sum().backward();
    for g in x.grad(&grads).unwrap().into_data().to_vec::<f32>().unwrap() {
        assert!((g - 8.0).abs() < 1e-5, "{g}");
    }
    // And it is autodiff's gradient of the plain-op forward, in both layouts.
    let probe = Tensor::<A, 5>::random([1, 3, 4, 6, 8], Distribution::Default, &device);
    let grads = (medddpm_kernels::upsample_trilinear_x2(x.clone()) * probe.clone())
        .sum()
        .backward();
    let want = x.grad(&grads).unwrap();
    for layout in Layout::ALL {
        let x = x.clone().detach().require_grad();
        let y = match layout {
            Layout::Ncdhw => medddpm_kernels::upsample_x2(x.clone(), layout),
            Layout::Ndhwc => {
                medddpm_kernels::upsample_x2(x.clone().permute([0, 2, 3, 4, 1]), layout)
                    .permute([0, 4, 1, 2, 3])
            }
        };
        let grads = (y * probe.clone()).sum().backward();
        let e = rel_l2(x.grad(&grads).unwrap(), want.clone());
        assert!(e < 1e-6, "{layout}: {e:e}");
    }
}

#[test]
fn strided_data_gradient_as_a_forward_convolution_matches_the_reference() {
    use medddpm_kernels::conv::{data_grad_via_forward, is_strided_same};
    let device = Default::default();
    // (batch, c_in, c_out, input size, stride): the U-Net's stride 2, odd and unequal sizes,
    // one channel, a stride of 3 and a stride on one axis only.
    let cases = [
        (1, 4, 4, [8, 8, 8], [2, 2, 2]),
        (2, 3, 5, [7, 6, 5], [2, 2, 2]),
        (1, 1, 1, [9, 9, 9], [2, 2, 2]),
        (1, 2, 3, [10, 7, 8], [3, 3, 3]),
        (1, 3, 2, [6, 6, 6], [1, 2, 1]),
    ];
    for layout in Layout::ALL {
        for (i, &(b, ci, co, size, stride)) in cases.iter().enumerate() {
            let spec = padded_one(stride, layout);
            assert!(is_strided_same([3, 3, 3], &spec));
            let x = Tensor::<Flex, 5>::random(
                [b, ci, size[0], size[1], size[2]],
                Distribution::Default,
                &device,
            );
            let w = Tensor::<Flex, 5>::random([co, ci, 3, 3, 3], Distribution::Default, &device);
            let y = reference::forward(x.clone(), w.clone(), spec);
            let dy = Tensor::<Flex, 5>::random(y.dims(), Distribution::Default, &device);
            let want = reference::data_grad(x, w.clone(), dy.clone(), spec);
            let got = data_grad_via_forward(size, w, in_layout(dy, layout), spec);
            assert_agrees(got, want, &format!("case {i} {layout}"));
        }
    }
    let stride_one = padded_one([1, 1, 1], Layout::Ncdhw);
    assert!(!is_strided_same([3, 3, 3], &stride_one));
    let unpadded = Conv3dSpec {
        padding: [0, 0, 0],
        stride: [2, 2, 2],
        ..stride_one
    };
    assert!(!is_strided_same([3, 3, 3], &unpadded));
}

#[test]
fn weight_gradient_with_padded_output_channels_matches_the_reference() {
    use medddpm_kernels::conv::weight_grad_padded;
    let device = Default::default();
    // (c_in, c_out, padded): the U-Net's 64 -> 1 output convolution, 3 -> 8, odd ones.
    for layout in Layout::ALL {
        for (i, &(ci, co, padded)) in [(6, 1, 8), (3, 5, 8), (2, 9, 16)].iter().enumerate() {
            let spec = padded_one([1, 1, 1], layout);
            let x = Tensor::<Flex, 5>::random([1, ci, 6, 5, 7], Distribution::Default, &device);
            let w = Tensor::<Flex, 5>::random([co, ci, 3, 3, 3], Distribution::Default, &device);
            let dy = Tensor::<Flex, 5>::random([1, co, 6, 5, 7], Distribution::Default, &device);
            let want = reference::weight_grad(x.clone(), w.clone(), dy.clone(), spec);
            let got =
                weight_grad_padded(in_layout(x, layout), w, in_layout(dy, layout), spec, padded);
            assert_agrees(got, want, &format!("case {i} {layout}"));
        }
    }
}

#[test]
fn forward_with_padded_input_channels_matches_the_reference() {
    use medddpm_kernels::conv::forward_in_padded;
    let device = Default::default();
    // (c_in, padded, stride): the U-Net's first convolution (3 input channels) padded to 32,
    // odd ones, a strided one.
    for layout in Layout::ALL {
        for (i, &(ci, padded, s)) in [(3, 32, 1), (1, 8, 1), (5, 16, 2)].iter().enumerate() {
            let spec = padded_one([s, s, s], layout);
            let x = Tensor::<Flex, 5>::random([2, ci, 6, 5, 7], Distribution::Default, &device);
            let w = Tensor::<Flex, 5>::random([4, ci, 3, 3, 3], Distribution::Default, &device);
            let want = reference::forward(x.clone(), w.clone(), spec);
            let got = forward_in_padded(in_layout(x, layout), w, spec, padded);
            assert_agrees(got, want, &format!("case {i} {layout}"));
        }
    }
}
