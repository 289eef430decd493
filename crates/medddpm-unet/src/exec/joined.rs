//! The decoder's [current, skip] as the two parts of one input joined along channels, without
//! the join where no GroupNorm group straddles them: the join (as large as both) would be kept
//! for the backward pass by the normalisation and the 1x1x1 skip convolution, where the skip is
//! kept anyway by the encoder's next operation and only the current activation is new.

use burn::nn::conv::Conv3d;
use burn::nn::GroupNorm;
use burn::tensor::Tensor;
use medddpm_kernels::norm::NormInput;
use medddpm_kernels::primitive::float;
use medddpm_kernels::{KernelBackend, Layout};

use super::ops::{conv_spec, norm_params, norm_spec};
use super::profile::OpClass;
use super::Ctx;

impl<B: KernelBackend> Ctx<'_, B> {
    /// Whether a ResBlock whose first GroupNorm is `norm` takes the decoder's [current, skip]
    /// with `current` as its first part without joining them: the pass takes parts at all
    /// ([`Ctx::decoder_parts`]) and no group straddles the two. The blocks where that holds
    /// (whole-head: the top level's two, the second at 64^3, the first at 8^3) hold the
    /// largest joins; elsewhere the join is small, and one skip product takes fewer launches
    /// than one per part.
    pub fn splits(&self, norm: &GroupNorm<B>, current: &Tensor<B, 5>) -> bool {
        if !self.decoder_parts {
            return false;
        }
        let first = current.dims()[self.layout.channel_dim()];
        let spec = norm_spec(norm, self.layout, self.compute.norm_engine, true);
        spec.splits_whole_groups(norm.num_channels, first)
    }

    /// `a` and `b` joined along channels ([`join`]).
    pub fn join(&self, a: Tensor<B, 5>, b: Tensor<B, 5>) -> Tensor<B, 5> {
        self.op(OpClass::Elementwise, || join(a, b, self.layout))
    }

    /// [`Ctx::norm_silu_conv_unbiased`] of `a` and `b` joined along channels where the
    /// GroupNorm [`Ctx::splits`] at `a`: the normalisation reads the two parts (its output is
    /// the convolution's joined input), so the join of the inputs (a tensor as large as both,
    /// which the normalisation's backward pass would keep) is never made. With
    /// [`Ctx::recompute_norms`] one operation that computes the same.
    pub fn norm_silu_conv_joined(
        &self,
        norm: &GroupNorm<B>,
        a: Tensor<B, 5>,
        b: Tensor<B, 5>,
        conv: &Conv3d<B>,
    ) -> Tensor<B, 5> {
        if self.recompute_norms {
            return self.recomputed_norm_conv(norm, NormInput::Parts(float(a), float(b)), conv);
        }
        let (gamma, beta) = norm_params(norm, &a.device());
        let spec = norm_spec(norm, self.layout, self.compute.norm_engine, true);
        let y = self.op(OpClass::Normalisation, || {
            medddpm_kernels::norm::group_norm_parts(a, b, gamma, beta, spec)
        });
        self.conv_unbiased(conv, y)
    }

    /// [`Ctx::conv_unbiased`] of `a` and `b` joined along channels for a 1x1x1 `conv`, as the
    /// sum of the two products over each part's input channels (the caller adds the two, in
    /// its residual sum), without the join.
    pub fn pointwise_parts(
        &self,
        conv: &Conv3d<B>,
        a: Tensor<B, 5>,
        b: Tensor<B, 5>,
    ) -> [Tensor<B, 5>; 2] {
        let first = a.dims()[self.layout.channel_dim()];
        let [c_out, c_in, ..] = conv.weight.dims();
        let weight = conv.weight.val();
        let parts = [(a, 0, first), (b, first, c_in - first)];
        parts.map(|(x, start, len)| {
            self.op(OpClass::Convolution, || {
                let weight = weight.clone().narrow(1, start, len);
                match self.layout {
                    Layout::Ndhwc => {
                        let [n, d, h, w, _] = x.dims();
                        let weight = weight.reshape([c_out, len]);
                        medddpm_kernels::pointwise(
                            x.reshape([n, d * h * w, len]),
                            weight,
                            self.compute,
                        )
                        .reshape([n, d, h, w, c_out])
                    }
                    Layout::Ncdhw => {
                        let spec = conv_spec(conv, self.compute, self.layout);
                        medddpm_kernels::conv3d(x, weight, None, spec)
                    }
                }
            })
        })
    }
}

/// `a` and `b` joined along channels in `layout`: one copy (the backend's join, whose backward
/// is its split) where burn's `cat` and the strided slices of its backward take more.
fn join<B: KernelBackend>(a: Tensor<B, 5>, b: Tensor<B, 5>, layout: Layout) -> Tensor<B, 5> {
    match layout {
        Layout::Ncdhw => Tensor::cat(vec![a, b], 1),
        Layout::Ndhwc => medddpm_kernels::cat_last(a, b),
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::{Autodiff, Flex};
    use burn::module::{Module, ModuleVisitor, Param};
    use burn::tensor::{Distribution, Tensor};
    use medddpm_kernels::{Compute, Layout};

    use crate::blocks::{BlockInput, ResBlock};
    use crate::exec::{randomize_weights, Ctx};

    type A = Autodiff<Flex>;

    /// Every float parameter's gradient, flattened, in the module's order.
    fn gradients(
        block: &ResBlock<A>,
        grads: &<A as burn::tensor::backend::AutodiffBackend>::Gradients,
    ) -> Vec<Vec<f32>> {
        struct Collect<'a> {
            grads: &'a <A as burn::tensor::backend::AutodiffBackend>::Gradients,
            out: Vec<Vec<f32>>,
        }
        impl ModuleVisitor<A> for Collect<'_> {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<A, D>>) {
                let grad = param.val().grad(self.grads).expect("a gradient");
                self.out.push(grad.into_data().to_vec().unwrap());
            }
        }
        let mut collect = Collect {
            grads,
            out: Vec::new(),
        };
        block.visit(&mut collect);
        collect.out
    }

    fn max_relative(want: &[f32], got: &[f32]) -> f32 {
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-12);
        let diff = want
            .iter()
            .zip(got)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        diff / scale
    }

    /// A decoder ResBlock given [current, skip] as parts computes what it computes of their
    /// join, in both layouts, with the normalisations kept or recomputed: the output and the
    /// gradients of both parts and of every parameter. (Not bit for bit: the skip
    /// convolution's two products sum in another order than one product over the join.)
    #[test]
    fn a_resblock_of_the_parts_is_the_resblock_of_their_join() {
        let _turn = medddpm_diffusion::autodiff_turn();
        let device = Default::default();
        <A as burn::tensor::backend::Backend>::seed(&device, 11);
        // 8 + 8 channels in 4 groups of 4: no group straddles the parts.
        let block = randomize_weights(ResBlock::<A>::new(16, 8, 12, 4, &device));
        let emb = Tensor::<A, 2>::random([2, 12], Distribution::Normal(0.0, 1.0), &device);
        let part =
            || Tensor::<A, 5>::random([2, 8, 4, 6, 6], Distribution::Normal(0.0, 1.0), &device);
        let (current, skip) = (part(), part());
        let probe =
            Tensor::<A, 5>::random([2, 8, 4, 6, 6], Distribution::Normal(0.0, 1.0), &device);
        for layout in [Layout::Ncdhw, Layout::Ndhwc] {
            for recompute_norms in [false, true] {
                let context = |decoder_parts| Ctx::<A> {
                    layout,
                    compute: Compute {
                        layout,
                        ..Compute::default()
                    },
                    profile: None,
                    device,
                    recompute_norms,
                    decoder_parts,
                };
                let ctx = context(true);
                let in_layout = |x: Tensor<A, 5>| match layout {
                    Layout::Ncdhw => x.detach().require_grad(),
                    Layout::Ndhwc => x.permute([0, 2, 3, 4, 1]).detach().require_grad(),
                };
                let probe = in_layout(probe.clone()).detach();
                // A pass that takes no parts (sampling's) joins them.
                let without = context(false);
                assert!(!without.splits(&block.in_layers.norm, &in_layout(current.clone())));
                let run = |joined: bool| {
                    let (a, b) = (in_layout(current.clone()), in_layout(skip.clone()));
                    assert!(ctx.splits(&block.in_layers.norm, &a));
                    let input = if joined {
                        BlockInput::One(ctx.join(a.clone(), b.clone()))
                    } else {
                        BlockInput::Parts(a.clone(), b.clone())
                    };
                    let y = block.forward(input, emb.clone(), &ctx);
                    let grads = (y.clone() * probe.clone()).sum().backward();
                    let flat = |t: Tensor<Flex, 5>| t.into_data().to_vec::<f32>().unwrap();
                    let mut out = vec![
                        flat(y.inner()),
                        flat(a.grad(&grads).unwrap()),
                        flat(b.grad(&grads).unwrap()),
                    ];
                    out.extend(gradients(&block, &grads));
                    out
                };
                let (want, got) = (run(true), run(false));
                assert_eq!(want.len(), got.len());
                for (i, (w, g)) in want.iter().zip(&got).enumerate() {
                    let rel = max_relative(w, g);
                    assert!(
                        rel < 2e-5,
                        "{layout}, recompute {recompute_norms}: output {i} (0: y, 1-2: the parts' \
                         gradients, then the parameters'): relative difference {rel:e}"
                    );
                }
            }
        }
    }
}
