//! The agreement check of a backend's GroupNorm against the plain-op twin (what
//! `medddpm check-kernels` and the tests run), and the geometries it runs on.

use burn::backend::Flex;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Tensor};

use crate::agreement::{draw_rounded, on_cpu, on_device, rel_l2, seeded_cpu};
use crate::compute::{Layout, NormEngine};
use crate::extension::KernelBackend;
use crate::primitive::{float, tensor};
use crate::reference::norm::{backward, channel_sums, forward, GroupNormSpec, NormInput};

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
    /// A per-(batch, channel) shift added to the input (a ResBlock's bias and time embedding).
    pub shift: bool,
    /// The input as two parts joined along channels, the first of this many channels (the
    /// decoder's [current, skip]: [`KernelBackend::group_norm_parts_forward`]); `None` for one
    /// tensor. Never with a shift.
    pub split: Option<usize>,
}

impl NormCase {
    /// The U-Net's normalisations (32 groups of 2 to 16 channels, with and without SiLU) at
    /// small sizes, and odd ones: one channel per group, one group, odd volumes (which leave a
    /// short last block in every reduction), batch 2, one group of 2M values, and shifted inputs
    /// (one channel per group among them, whose shift gradients are all zero); and inputs in
    /// two parts: the decoder's top-level join (64 + 64 channels), batch 2 with odd volumes, a
    /// group straddling the parts, parts no vector divides, and rows too wide for the
    /// channels-last tiles (which the kernels join first). `scale` multiplies the spatial
    /// sizes (but the 2M-value case's).
    pub fn standard(scale: usize) -> Vec<NormCase> {
        let c = |batch, channels, groups, size: [usize; 3], silu, shift| NormCase {
            batch,
            channels,
            groups,
            size: size.map(|s| s * scale),
            silu,
            shift,
            split: None,
        };
        let parts = |batch, channels, groups, size, silu, first| NormCase {
            split: Some(first),
            ..c(batch, channels, groups, size, silu, false)
        };
        vec![
            c(1, 64, 32, [8, 8, 8], true, false),
            c(1, 128, 32, [4, 4, 4], false, false),
            c(2, 24, 4, [5, 6, 7], true, false),
            c(1, 8, 8, [7, 5, 3], true, false),
            c(1, 16, 1, [9, 9, 9], false, false),
            c(1, 512, 32, [2, 2, 2], true, false),
            c(2, 4, 2, [17, 3, 11], true, false),
            c(1, 64, 32, [8, 8, 8], true, true),
            c(2, 24, 4, [5, 6, 7], true, true),
            c(1, 8, 8, [7, 5, 3], false, true),
            // One group of two million values whatever the scale: the finishing sums of the
            // CubeCL kernels then run several chunks per thread.
            NormCase {
                batch: 1,
                channels: 64,
                groups: 1,
                size: [32, 32, 32],
                silu: false,
                shift: false,
                split: None,
            },
            parts(1, 128, 32, [8, 8, 8], true, 64),
            parts(2, 24, 4, [5, 6, 7], true, 12),
            parts(1, 20, 4, [5, 5, 5], true, 8),
            parts(1, 10, 2, [3, 4, 5], false, 3),
            parts(1, 4096, 32, [2, 2, 2], true, 2048),
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
/// U-Net keeps them): `[y, dx, dgamma, dbeta, dshift]`, the backward from `B`'s own statistics.
/// An input in two parts ([`NormCase::split`]) goes to `B` as two tensors and is checked
/// against the twin's pass over their join (dx: the parts' gradients joined).
/// dshift (0 without a shift) is measured against the per-channel sums of `|dx|`: a group's
/// shift gradients add up to zero, so they are small beside their terms.
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
) -> [f64; 5] {
    let Operands {
        x,
        dy,
        gamma,
        beta,
        shift,
    } = Operands::draw(case, layout, dtype, seed);
    let spec = GroupNormSpec {
        num_groups: case.groups,
        epsilon: 1e-5,
        silu: case.silu,
        layout,
        engine,
    };
    let (y, mean, rstd) = forward(x.clone(), shift.clone(), gamma.clone(), beta.clone(), &spec);
    let (dx, dshift, dgamma, dbeta) = backward(
        x.clone(),
        shift.clone(),
        gamma.clone(),
        beta.clone(),
        mean,
        rstd,
        dy.clone(),
        &spec,
    );
    let ops = Operands {
        x,
        dy,
        gamma,
        beta,
        shift,
    };
    let (y_got, dx_got, [dgamma_got, dbeta_got], dshift_got) =
        backend_passes::<B>(&ops, case, spec, dtype, device);
    let back1 = |t| on_cpu::<B, 1>(tensor(t));
    [
        rel_l2(y_got, y),
        rel_l2(dx_got, dx.clone()),
        rel_l2(back1(dgamma_got), dgamma),
        rel_l2(back1(dbeta_got), dbeta),
        shift_error::<B>(dshift_got, dshift, &dx, layout),
    ]
}

/// What [`backend_passes`] gives: the output and the input's gradient on the CPU, gamma's and
/// beta's gradients, and the shift's.
type Passes<B> = (
    Tensor<Flex, 5>,
    Tensor<Flex, 5>,
    [FloatTensor<B>; 2],
    Option<FloatTensor<B>>,
);

/// `B`'s forward and backward passes over `ops` (two parts of `x` where the case has them):
/// the output and the input's gradient back on the CPU (the parts' gradients joined), gamma's
/// and beta's gradients, and the shift's. The operands are uploaded afresh for each pass, as a
/// training step has them.
fn backend_passes<B: KernelBackend>(
    ops: &Operands,
    case: NormCase,
    spec: GroupNormSpec,
    dtype: DType,
    device: &B::Device,
) -> Passes<B> {
    let params = || {
        (
            float(Tensor::<B, 1>::from_data(ops.gamma.to_data(), device)),
            float(Tensor::<B, 1>::from_data(ops.beta.to_data(), device)),
        )
    };
    let dy = || float(on_device::<B, 5>(&ops.dy, device, dtype));
    let back5 = |t| on_cpu::<B, 5>(tensor(t));
    let dim = spec.layout.channel_dim();
    let input = || match case.split {
        Some(first) => {
            let part = |start, len| {
                float(on_device::<B, 5>(
                    &ops.x.clone().narrow(dim, start, len),
                    device,
                    dtype,
                ))
            };
            NormInput::Parts(part(0, first), part(first, case.channels - first))
        }
        None => NormInput::Shifted(
            float(on_device::<B, 5>(&ops.x, device, dtype)),
            ops.shift
                .as_ref()
                .map(|s| float(on_device::<B, 2>(s, device, dtype))),
        ),
    };
    let (g, be) = params();
    let out = B::group_norm_forward(input(), g, be, spec);
    let (g, be) = params();
    let grads = B::group_norm_backward(input(), g, be, out.mean, out.rstd, dy(), spec);
    let (dx, dshift) = match grads.input {
        NormInput::Parts(da, db) => (Tensor::cat(vec![back5(da), back5(db)], dim), None),
        NormInput::Shifted(dx, dshift) => (back5(dx), dshift),
    };
    (back5(out.y), dx, [grads.gamma, grads.beta], dshift)
}

/// The shift gradient's L2 error against the per-channel sums of `|dx|` (0 without a shift,
/// NaN where only one side has one).
fn shift_error<B: KernelBackend>(
    got: Option<FloatTensor<B>>,
    want: Option<Tensor<Flex, 2>>,
    dx: &Tensor<Flex, 5>,
    layout: Layout,
) -> f64 {
    match (got, want) {
        (Some(got), Some(want)) => {
            let scale = channel_sums(dx.clone().abs(), layout);
            let diff: f64 = on_cpu::<B, 2>(tensor(got))
                .sub(want)
                .square()
                .sum()
                .into_scalar()
                .into();
            let norm: f64 = scale.square().sum().into_scalar().into();
            (diff / norm).sqrt()
        }
        (None, None) => 0.0,
        _ => f64::NAN,
    }
}

/// The operands of one check, drawn on the CPU and rounded to the activations' dtype: `x`
/// (a mean far from zero, as the statistics have to cope with), `dy`, f32 parameters, and the
/// shift where the case has one.
struct Operands {
    x: Tensor<Flex, 5>,
    dy: Tensor<Flex, 5>,
    gamma: Tensor<Flex, 1>,
    beta: Tensor<Flex, 1>,
    shift: Option<Tensor<Flex, 2>>,
}

impl Operands {
    fn draw(case: NormCase, layout: Layout, dtype: DType, seed: u64) -> Self {
        use burn::tensor::Distribution::Normal;
        let cpu = seeded_cpu(seed);
        let shape = case.shape(layout);
        let c = case.channels;
        let x = draw_rounded(shape, Normal(1.5, 2.0), dtype, &cpu);
        let dy = draw_rounded(shape, Normal(0.0, 1.0), dtype, &cpu);
        let gamma = Tensor::<Flex, 1>::random([c], Normal(1.0, 0.5), &cpu);
        let beta = Tensor::<Flex, 1>::random([c], Normal(0.0, 0.5), &cpu);
        let shift = case
            .shift
            .then(|| draw_rounded([case.batch, c], Normal(0.5, 1.0), dtype, &cpu));
        Operands {
            x,
            dy,
            gamma,
            beta,
            shift,
        }
    }
}
