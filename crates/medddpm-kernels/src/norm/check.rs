//! The agreement check of a backend's GroupNorm against the plain-op twin (what
//! `medddpm check-kernels` and the tests run), and the geometries it runs on.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Tensor};

use super::reference::{backward, forward, GroupNormSpec};
use crate::compute::{Layout, NormEngine};
use crate::conv::{rel_l2, KernelBackend};
use crate::dtype::cast_to;
use crate::primitive::{float, tensor};

/// One GroupNorm geometry for agreement checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct NormCase {
    /// Batch size.
    pub batch: usize,
    /// Channels.
    pub channels: usize,
    /// Groups.
    pub groups: usize,
    /// Spatial size (d, h, w).
    pub size: [usize; 3],
    /// SiLU fused in.
    pub silu: bool,
}

impl NormCase {
    /// The U-Net's normalisations (32 groups of 2 to 16 channels, with and without SiLU) at
    /// small sizes, and odd ones: one channel per group, one group, odd volumes (which leave a
    /// short last block in every reduction), batch 2, one group of 2M values. `scale` multiplies
    /// the spatial sizes (but the last case's).
    pub fn standard(scale: usize) -> Vec<NormCase> {
        let c = |batch, channels, groups, size: [usize; 3], silu| NormCase {
            batch,
            channels,
            groups,
            size: size.map(|s| s * scale),
            silu,
        };
        vec![
            c(1, 64, 32, [8, 8, 8], true),
            c(1, 128, 32, [4, 4, 4], false),
            c(2, 24, 4, [5, 6, 7], true),
            c(1, 8, 8, [7, 5, 3], true),
            c(1, 16, 1, [9, 9, 9], false),
            c(1, 512, 32, [2, 2, 2], true),
            c(2, 4, 2, [17, 3, 11], true),
            // One group of two million values whatever the scale: the finishing sums of the
            // CubeCL kernels then run several chunks per thread.
            NormCase {
                batch: 1,
                channels: 64,
                groups: 1,
                size: [32, 32, 32],
                silu: false,
            },
        ]
    }

    /// The case's activation shape in `layout`'s logical order.
    pub fn shape(&self, layout: Layout) -> [usize; 5] {
        let [d, h, w] = self.size;
        match layout {
            Layout::Ncdhw => [self.batch, self.channels, d, h, w],
            Layout::Ndhwc => [self.batch, d, h, w, self.channels],
        }
    }
}

/// Relative L2 differences of backend `B`'s GroupNorm (as `engine` asks) against the plain-op
/// twin in f32 on the CPU for one case, activations in `dtype` and parameters in f32 (as the
/// U-Net keeps them): `[y, dx, dgamma, dbeta]`, the backward from `B`'s own statistics.
///
/// The operands are drawn on the CPU and rounded to `dtype` first, so what remains is the
/// kernels' own arithmetic and the rounding of their outputs.
pub fn engine_vs_reference<B: KernelBackend>(
    device: &B::Device,
    case: NormCase,
    layout: Layout,
    engine: NormEngine,
    dtype: DType,
    seed: u64,
) -> [f64; 4] {
    use burn::backend::Flex;
    use burn::tensor::Distribution;
    let cpu = Default::default();
    Flex::seed(&cpu, seed);
    let round = |t: Tensor<Flex, 5>| cast_to(cast_to(t, dtype), DType::F32);
    let shape = case.shape(layout);
    let c = case.channels;
    // A mean far from zero, as the statistics have to cope with.
    let x = round(Tensor::<Flex, 5>::random(
        shape,
        Distribution::Normal(1.5, 2.0),
        &cpu,
    ));
    let dy = round(Tensor::<Flex, 5>::random(
        shape,
        Distribution::Normal(0.0, 1.0),
        &cpu,
    ));
    let gamma = Tensor::<Flex, 1>::random([c], Distribution::Normal(1.0, 0.5), &cpu);
    let beta = Tensor::<Flex, 1>::random([c], Distribution::Normal(0.0, 0.5), &cpu);
    let spec = GroupNormSpec {
        num_groups: case.groups,
        epsilon: 1e-5,
        silu: case.silu,
        layout,
        engine,
    };
    let (y, mean, rstd) = forward(x.clone(), gamma.clone(), beta.clone(), &spec);
    let (dx, dgamma, dbeta) = backward(
        x.clone(),
        gamma.clone(),
        beta.clone(),
        mean,
        rstd,
        dy.clone(),
        &spec,
    );
    let on5 = |t: &Tensor<Flex, 5>| cast_to(Tensor::<B, 5>::from_data(t.to_data(), device), dtype);
    let on1 = |t: &Tensor<Flex, 1>| Tensor::<B, 1>::from_data(t.to_data(), device);
    let out = B::group_norm_forward(float(on5(&x)), float(on1(&gamma)), float(on1(&beta)), spec);
    let grads = B::group_norm_backward(
        float(on5(&x)),
        float(on1(&gamma)),
        float(on1(&beta)),
        out.mean,
        out.rstd,
        float(on5(&dy)),
        spec,
    );
    let back5 = |t: FloatTensor<B>| {
        Tensor::<Flex, 5>::from_data(cast_to(tensor::<B, 5>(t), DType::F32).to_data(), &cpu)
    };
    let back1 = |t: FloatTensor<B>| {
        Tensor::<Flex, 1>::from_data(cast_to(tensor::<B, 1>(t), DType::F32).to_data(), &cpu)
    };
    [
        rel_l2(back5(out.y), y),
        rel_l2(back5(grads.x), dx),
        rel_l2(back1(grads.gamma), dgamma),
        rel_l2(back1(grads.beta), dbeta),
    ]
}
