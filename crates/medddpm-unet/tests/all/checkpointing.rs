//! Activation checkpointing changes memory, not results: a small U-Net with ResBlocks,
//! attention, down- and upsampling, trained one step with and without it (`blocks`, and
//! `norms`: the normalisations recomputed), gives the same loss and the same gradient for every
//! parameter, in both activation layouts.

use burn::backend::{Autodiff, Flex};
use burn::module::{Module, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::{Distribution, Tensor};
use medddpm_unet::{randomize_weights, ActivationCheckpointing, Compute, Layout, UNet, UNetConfig};

type A = Autodiff<Flex>;

/// Every float parameter's id and name.
fn parameters(unet: &UNet<A>) -> Vec<(ParamId, String)> {
    struct Ids {
        path: Vec<String>,
        out: Vec<(ParamId, String)>,
    }
    impl ModuleVisitor<A> for Ids {
        fn enter_module(&mut self, name: &str, _container_type: &str) {
            self.path.push(name.to_string());
        }
        fn exit_module(&mut self, _name: &str, _container_type: &str) {
            self.path.pop();
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<A, D>>) {
            self.out.push((param.id, self.path.join(".")));
        }
    }
    let mut ids = Ids {
        path: Vec::new(),
        out: Vec::new(),
    };
    unet.visit(&mut ids);
    ids.out
}

/// A loss with a non-trivial gradient everywhere: mean |y - target|.
fn loss(y: Tensor<A, 5>, target: Tensor<A, 5>) -> Tensor<A, 1> {
    (y - target).abs().mean()
}

/// The loss and every parameter gradient with plain autodiff and with checkpointing `mode`.
fn both(
    layout: Layout,
    mode: ActivationCheckpointing,
) -> ([f32; 2], GradientsParams, GradientsParams, UNet<A>) {
    let _turn = medddpm_diffusion::autodiff_turn();
    let device = Default::default();
    <A as burn::tensor::backend::Backend>::seed(&device, 7);
    let config = UNetConfig::tiny();
    let unet = randomize_weights(config.init::<A>(&device).unwrap()).with_compute(Compute {
        layout,
        ..Compute::default()
    });
    let x = Tensor::<A, 5>::random([2, 3, 8, 8, 8], Distribution::Normal(0.0, 1.0), &device);
    let target = Tensor::<A, 5>::random([2, 1, 8, 8, 8], Distribution::Normal(0.0, 1.0), &device);
    let timesteps = [17, 230];

    let plain = loss(unet.forward(x.clone(), &timesteps), target.clone());
    let plain_value = plain.clone().into_scalar();
    let plain_grads = GradientsParams::from_grads(plain.backward(), &unet);

    if mode == ActivationCheckpointing::Norms {
        let out = unet.forward_recomputing_norms(x, &timesteps).unwrap();
        let checkpointed = loss(out, target);
        let value = checkpointed.clone().into_scalar();
        let grads = GradientsParams::from_grads(checkpointed.backward(), &unet);
        return ([plain_value, value], plain_grads, grads, unet);
    }
    let (out, kept) = unet.forward_checkpointed(x, &timesteps).unwrap();
    let checkpointed = loss(out.clone(), target);
    let value = checkpointed.clone().into_scalar();
    let grads = checkpointed.backward();
    let grad_out = out.grad(&grads).unwrap();
    let checkpointed_grads = kept.backward(&unet, grad_out);
    ([plain_value, value], plain_grads, checkpointed_grads, unet)
}

fn check(layout: Layout, mode: ActivationCheckpointing) {
    let ([plain, checkpointed], want, got, unet) = both(layout, mode);
    assert_eq!(plain.to_bits(), checkpointed.to_bits(), "{layout}: loss");
    let params = parameters(&unet);
    assert_eq!(
        want.len(),
        params.len(),
        "{layout}: every parameter has a gradient"
    );
    assert_eq!(
        got.len(),
        params.len(),
        "{layout}: every parameter has a gradient"
    );
    let mut identical = 0;
    for (id, name) in &params {
        // Rank does not matter for the comparison: view every gradient flat.
        let flat = |g: &GradientsParams| -> Vec<f32> {
            for rank in 1..=5 {
                let v = match rank {
                    1 => g.get::<Flex, 1>(*id).map(|t| t.into_data()),
                    2 => g.get::<Flex, 2>(*id).map(|t| t.into_data()),
                    3 => g.get::<Flex, 3>(*id).map(|t| t.into_data()),
                    4 => g.get::<Flex, 4>(*id).map(|t| t.into_data()),
                    _ => g.get::<Flex, 5>(*id).map(|t| t.into_data()),
                };
                if let Some(v) = v.filter(|d| d.shape.len() == rank) {
                    return v.to_vec().unwrap();
                }
            }
            panic!("{layout}: no gradient for {name}")
        };
        let (w, g) = (flat(&want), flat(&got));
        assert_eq!(w.len(), g.len(), "{layout}: {name}");
        let scale = w.iter().fold(0f32, |m, v| m.max(v.abs()));
        let diff = w
            .iter()
            .zip(&g)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        // Only the order of summing a tensor's gradient contributions differs (the time
        // embedding's, one per ResBlock, and an encoder output's from its next block and its
        // skip connection): measured 2e-7 of the largest value at most when run alone, 1.04e-6
        // once (a bias gradient, channels-last) with the workspace's tests running beside it.
        assert!(
            diff <= 4e-6 * scale.max(1e-12),
            "{layout}: {name}: max abs difference {diff:e} at scale {scale:e}"
        );
        assert!(scale > 0.0, "{layout}: {name}: zero gradient tests nothing");
        let same = w.iter().zip(&g).all(|(a, b)| a.to_bits() == b.to_bits());
        // The decoder and the head see no such sum: bit for bit the same.
        let blocks = mode == ActivationCheckpointing::Blocks;
        if blocks && (name.starts_with("output_blocks") || name.starts_with("out.")) {
            assert!(same, "{layout}: {name} differs");
        }
        identical += usize::from(same);
    }
    eprintln!(
        "{layout}, {mode}: {identical} of {} parameter gradients bit-identical",
        params.len()
    );
}

#[test]
fn checkpointed_gradients_equal_the_plain_ones_channels_first() {
    check(Layout::Ncdhw, ActivationCheckpointing::Blocks);
}

#[test]
fn checkpointed_gradients_equal_the_plain_ones_channels_last() {
    check(Layout::Ndhwc, ActivationCheckpointing::Blocks);
}

/// The normalisation and its convolution as one node recomputing the normalisation.
#[test]
fn recomputed_norms_give_the_plain_gradients_in_both_layouts() {
    check(Layout::Ncdhw, ActivationCheckpointing::Norms);
    check(Layout::Ndhwc, ActivationCheckpointing::Norms);
}
