use burn::backend::Flex;
use burn::tensor::{DType, Tensor, TensorData};

use super::*;

#[test]
fn sizes_follow_the_transpositions_and_refuse_what_does_not_multiply() {
    let c = Compute::default();
    assert_eq!(
        ProductSpec::plain(c).sizes([1, 4, 3], [1, 3, 5]),
        Ok((4, 3, 5))
    );
    assert_eq!(
        ProductSpec::plain(c)
            .with(true, true)
            .sizes([2, 3, 4], [2, 5, 3]),
        Ok((4, 3, 5))
    );
    assert!(ProductSpec::plain(c).sizes([1, 4, 3], [2, 3, 5]).is_err());
    assert!(ProductSpec::plain(c)
        .with(false, true)
        .sizes([1, 4, 3], [1, 3, 5])
        .is_err());
}

#[test]
fn product_transposes_what_the_spec_says() {
    let device = Default::default();
    // a = [[1, 2], [3, 4]], b = [[5, 6], [7, 8]]
    let a = Tensor::<Flex, 3>::from_data(
        TensorData::new(vec![1.0f32, 2.0, 3.0, 4.0], [1, 2, 2]),
        &device,
    );
    let b = Tensor::<Flex, 3>::from_data(
        TensorData::new(vec![5.0f32, 6.0, 7.0, 8.0], [1, 2, 2]),
        &device,
    );
    let spec = ProductSpec::plain(Compute::default());
    let got = |ta, tb| {
        product(a.clone(), b.clone(), spec.with(ta, tb))
            .into_data()
            .to_vec::<f32>()
            .unwrap()
    };
    assert_eq!(got(false, false), vec![19.0, 22.0, 43.0, 50.0]);
    assert_eq!(got(true, false), vec![26.0, 30.0, 38.0, 44.0]);
    assert_eq!(got(false, true), vec![17.0, 23.0, 39.0, 53.0]);
    assert_eq!(got(true, true), vec![23.0, 31.0, 34.0, 46.0]);
}

#[test]
fn the_backward_plan_gives_burns_gradients_for_every_transposition() {
    // On Flex the product is the reference itself; what this checks is the autodiff node's
    // gradients (the backward plan) against burn's own differentiation of matmul.
    for (i, (a, b, ta, tb)) in check::cases(1).into_iter().enumerate() {
        let spec = ProductSpec::plain(Compute::default()).with(ta, tb);
        let errs =
            engine_vs_reference::<Flex>(&Default::default(), a, b, spec, DType::F32, i as u64);
        assert!(
            errs.iter().all(|e| *e < 1e-6),
            "case {i} {a:?} {b:?} ({ta}, {tb}): {errs:?}"
        );
    }
}

#[test]
fn pointwise_is_the_kernel_size_one_convolution_over_every_token() {
    let device = Default::default();
    let x = Tensor::<Flex, 3>::from_data(
        TensorData::new((0..12).map(|v| v as f32).collect::<Vec<_>>(), [2, 2, 3]),
        &device,
    );
    let w = Tensor::<Flex, 2>::from_data(
        TensorData::new(vec![1.0f32, 0.0, -1.0, 0.5, 0.5, 0.5], [2, 3]),
        &device,
    );
    let got = pointwise(x.clone(), w.clone(), Compute::default());
    let want = x.matmul(w.transpose().unsqueeze::<3>());
    assert_eq!(got.dims(), [2, 2, 2]);
    assert_eq!(
        got.into_data().to_vec::<f32>().unwrap(),
        want.into_data().to_vec::<f32>().unwrap()
    );
}

#[test]
fn a_long_weight_gradient_product_is_split_and_summed() {
    use crate::reference::product::{chunks_of, product_primitive};
    assert_eq!(chunks_of(16 * 32 * 32), 4);
    assert_eq!(chunks_of(4096), 1);
    assert_eq!(chunks_of(3 * 4096), 2);
    assert_eq!(chunks_of(100), 1);
    let device = Default::default();
    // dW = Gᵀ · X over 16384 tokens: four batches of 4096.
    let g = Tensor::<Flex, 3>::random([1, 16384, 5], burn::tensor::Distribution::Default, &device);
    let x = Tensor::<Flex, 3>::random([1, 16384, 6], burn::tensor::Distribution::Default, &device);
    let spec = ProductSpec::plain(Compute::default()).with(true, false);
    let want = reference::product(g.clone(), x.clone(), spec);
    let got: Tensor<Flex, 3> = crate::primitive::tensor(product_primitive::<Flex>(
        crate::primitive::float(g),
        crate::primitive::float(x),
        spec,
    ));
    assert_eq!(got.dims(), [1, 5, 6]);
    let rel = (got - want.clone()).abs().max().into_scalar() / want.abs().max().into_scalar();
    assert!(rel < 1e-5, "relative difference {rel}");
}
