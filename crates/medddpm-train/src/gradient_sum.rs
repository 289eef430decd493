//! The gradients of an optimizer step's micro-batches, summed in f32 as they arrive.
//!
//! The sum is one backend operation for the whole model
//! ([`medddpm_kernels::KernelBackend::sum_f32`]: on the GPU a kernel launch per few dozen
//! tensors): a cast to f32 per gradient and an addition per parameter tensor were 738
//! operations an optimizer step of the whole-head U-Net with two micro-batches. The values are
//! those of casting each gradient to f32 and adding in f32, bit for bit; a bf16 sum would round
//! at every addition.

use std::collections::HashMap;

use burn::module::{AutodiffModule, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Tensor, TensorPrimitive};
use medddpm_kernels::KernelBackend;

/// The running sum of one optimizer step's gradients. The first micro-batch's gradients are
/// kept as they came (a single micro-batch's stay in the compute dtype); from the second on,
/// the sum is in f32.
#[derive(Default)]
pub struct GradientSum {
    grads: Option<GradientsParams>,
}

impl GradientSum {
    /// An empty sum.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one micro-batch's gradients of `module`'s parameters.
    pub fn add<B, M>(&mut self, module: &M, grads: GradientsParams)
    where
        B: AutodiffBackend<InnerBackend: KernelBackend>,
        M: AutodiffModule<B>,
    {
        self.grads = Some(match self.grads.take() {
            None => grads,
            Some(sum) => sum_gradients(module, sum, grads),
        });
    }

    /// The sum so far, leaving the sum empty.
    pub fn grads(&mut self) -> GradientsParams {
        self.grads.take().unwrap_or_default()
    }
}

/// Per parameter of `module`, `f32(a) + f32(b)`; a parameter with a gradient in only one of
/// them keeps that one, cast to f32.
pub fn sum_gradients<B, M>(
    module: &M,
    mut a: GradientsParams,
    mut b: GradientsParams,
) -> GradientsParams
where
    B: AutodiffBackend<InnerBackend: KernelBackend>,
    M: AutodiffModule<B>,
{
    type Prim<B> = FloatTensor<<B as AutodiffBackend>::InnerBackend>;
    struct Take<'a, B: AutodiffBackend> {
        a: &'a mut GradientsParams,
        b: &'a mut GradientsParams,
        ids: Vec<ParamId>,
        pairs: Vec<[Prim<B>; 2]>,
        lone: HashMap<ParamId, Prim<B>>,
    }
    impl<B: AutodiffBackend> ModuleVisitor<B> for Take<'_, B> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let id = param.id;
            let prim = |t: Tensor<B::InnerBackend, D>| t.into_primitive().tensor();
            match (
                self.a.remove::<B::InnerBackend, D>(id),
                self.b.remove::<B::InnerBackend, D>(id),
            ) {
                (Some(x), Some(y)) => {
                    self.ids.push(id);
                    self.pairs.push([prim(x), prim(y)]);
                }
                (Some(x), None) | (None, Some(x)) => {
                    self.lone
                        .insert(id, prim(medddpm_kernels::cast_to(x, DType::F32)));
                }
                (None, None) => {}
            }
        }
    }
    struct Put<B: AutodiffBackend> {
        sums: HashMap<ParamId, Prim<B>>,
        out: GradientsParams,
    }
    impl<B: AutodiffBackend> ModuleVisitor<B> for Put<B> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            if let Some(t) = self.sums.remove(&param.id) {
                let t = Tensor::<B::InnerBackend, D>::from_primitive(TensorPrimitive::Float(t));
                self.out.register(param.id, t);
            }
        }
    }
    let mut take = Take::<B> {
        a: &mut a,
        b: &mut b,
        ids: Vec::new(),
        pairs: Vec::new(),
        lone: HashMap::new(),
    };
    module.visit(&mut take);
    let Take {
        ids, pairs, lone, ..
    } = take;
    let mut sums = lone;
    sums.extend(ids.into_iter().zip(B::InnerBackend::sum_f32(pairs)));
    let mut put = Put::<B> {
        sums,
        out: GradientsParams::new(),
    };
    module.visit(&mut put);
    put.out
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, Flex};
    use burn::nn::{Linear, LinearConfig};
    use burn::tensor::Distribution;

    type B = Autodiff<Flex>;

    /// A small network's gradients on a random input, the weight's in `dtype` (as a 16-bit
    /// forward pass hands them over), the bias's in f32.
    fn grads_of(model: &Linear<B>, seed: u64, dtype: DType) -> GradientsParams {
        let _turn = medddpm_diffusion::autodiff_turn();
        let device = Default::default();
        <Flex as burn::tensor::backend::Backend>::seed(&device, seed);
        let x = Tensor::<B, 2>::random([3, 4], Distribution::Normal(0.0, 1.0), &device);
        let grads = model.forward(x).powi_scalar(2).sum().backward();
        let mut grads = GradientsParams::from_grads(grads, model);
        let g = grads.remove::<Flex, 2>(model.weight.id).unwrap();
        grads.register(model.weight.id, medddpm_kernels::cast_to(g, dtype));
        grads
    }

    /// Three micro-batches' sum is the f32 sum of each gradient cast to f32, bit for bit, and
    /// one micro-batch's gradients stay as they came.
    #[test]
    fn sum_is_the_f32_sum_of_the_casts() {
        let device = Default::default();
        let model: Linear<B> = LinearConfig::new(4, 5).init(&device);
        let bias = model.bias.as_ref().unwrap().id;
        for dtype in [DType::F32, DType::BF16] {
            let mut sum = GradientSum::new();
            let mut weight: Option<Tensor<Flex, 2>> = None;
            let mut biases: Option<Tensor<Flex, 1>> = None;
            for k in 0..3 {
                let mut part = grads_of(&model, 10 + k, dtype);
                let w = part.remove::<Flex, 2>(model.weight.id).unwrap();
                let b = part.remove::<Flex, 1>(bias).unwrap();
                let w32 = medddpm_kernels::cast_to(w.clone(), DType::F32);
                weight = Some(weight.map_or(w32.clone(), |acc| acc + w32));
                biases = Some(biases.map_or(b.clone(), |acc| acc + b.clone()));
                part.register(model.weight.id, w);
                part.register(bias, b);
                sum.add(&model, part);
                if k == 0 {
                    let mut first = sum.grads();
                    let w = first.remove::<Flex, 2>(model.weight.id).unwrap();
                    assert_eq!(w.dtype(), dtype);
                    first.register(model.weight.id, w);
                    sum.add(&model, first);
                }
            }
            let mut got = sum.grads();
            let w = got.remove::<Flex, 2>(model.weight.id).unwrap();
            assert_eq!(w.dtype(), DType::F32);
            assert_eq!(w.into_data(), weight.unwrap().into_data(), "{dtype:?}");
            let b = got.remove::<Flex, 1>(bias).unwrap();
            assert_eq!(b.into_data(), biases.unwrap().into_data());
        }
    }
}
