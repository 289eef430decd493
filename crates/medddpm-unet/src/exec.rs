//! How a forward pass runs, apart from the weights: the memory layout of the activations, the
//! compute dtype, and an optional per-operation timer.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use burn::module::{Module, ModuleMapper, Param, ParamId};
use burn::nn::conv::Conv3d;
use burn::nn::{GroupNorm, PaddingConfig3d};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, ElementConversion, Tensor, TensorMetadata, TensorPrimitive};
use medddpm_kernels::{Compute, Conv3dSpec, GroupNormSpec, KernelBackend, NormEngine};
use serde::{Deserialize, Serialize};

pub use medddpm_kernels::{cast_to, to_stats, Layout};

/// Operation classes of the per-operation breakdown (the paper's kernel mix).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpClass {
    /// 3-D convolutions (including the strided downsampling ones).
    Convolution,
    /// GroupNorm.
    Normalisation,
    /// The attention blocks' projections, products and softmax.
    Attention,
    /// SiLU, residual additions, time-embedding addition, skip concatenation, layout changes.
    Elementwise,
    /// Trilinear x2 upsampling.
    Upsample,
}

impl OpClass {
    /// Every class, in the order reports list them.
    pub const ALL: [OpClass; 5] = [
        OpClass::Convolution,
        OpClass::Normalisation,
        OpClass::Attention,
        OpClass::Elementwise,
        OpClass::Upsample,
    ];

    /// Name used in reports.
    pub const fn name(self) -> &'static str {
        match self {
            OpClass::Convolution => "convolution",
            OpClass::Normalisation => "normalisation",
            OpClass::Attention => "attention",
            OpClass::Elementwise => "elementwise",
            OpClass::Upsample => "upsample",
        }
    }
}

/// Time spent per operation class in one or more profiled forward passes.
///
/// Each operation is synchronised on its own, so kernels that burn's fusion would otherwise
/// merge run separately: the sum is larger than an unprofiled forward and the split shows
/// where the unfused work goes.
#[derive(Debug, Clone, Default, Serialize)]
pub struct OpProfile {
    /// Milliseconds per class.
    pub ms: BTreeMap<String, f64>,
    /// Operations timed per class.
    pub calls: BTreeMap<String, usize>,
    /// A device synchronisation failed while profiling; the numbers are not trustworthy.
    pub sync_failed: bool,
    /// Set before the pass to test every operation's output for NaN and infinity (a read-back
    /// per operation: for locating a defect, not for timing).
    pub check_finite: bool,
    /// The first operation whose output was not finite (class, its index in that class, shape),
    /// when `check_finite` is set.
    pub first_non_finite: Option<String>,
    /// Set before the pass to record summary statistics of every operation's output in
    /// `stats` (a read-back per operation: for locating a wrong kernel, not for timing).
    pub record_stats: bool,
    /// One entry per operation, in execution order, when `record_stats` is set.
    pub stats: Vec<OpStats>,
}

/// Summary of one operation's output that can be compared between layouts, backends and
/// dtypes: a wrong kernel changes its output's moments or where its values lie.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpStats {
    /// Operation class and its 1-based index within the class (`convolution #12`).
    pub op: String,
    /// Shape as produced.
    pub dims: Vec<usize>,
    /// Shape in channels-first order (the channel axis moved from last to 1 under `Ndhwc`).
    pub canonical_dims: Vec<usize>,
    /// Sum of the values.
    pub sum: f64,
    /// Sum of squares.
    pub sum_sq: f64,
    /// Sum of absolute values.
    pub sum_abs: f64,
    /// Sum of the values weighted by a fixed pseudo-random function of their position in
    /// `dims` order: catches values that are right but in the wrong place.
    pub weighted: f64,
    /// The same in `canonical_dims` order.
    pub weighted_canonical: f64,
}

impl OpStats {
    /// Statistics of `out`, an operation's output in `layout`.
    pub fn of<B: Backend, const D: usize>(op: String, out: &Tensor<B, D>, layout: Layout) -> Self {
        let dims = out.dims().to_vec();
        let (mut sum, mut sum_sq, mut sum_abs, mut weighted) = (0.0, 0.0, 0.0, 0.0);
        for (i, v) in out.clone().into_data().iter::<f64>().enumerate() {
            sum += v;
            sum_sq += v * v;
            sum_abs += v.abs();
            weighted += position_weight(i) * v;
        }
        let (canonical_dims, weighted_canonical) = match layout {
            Layout::Ndhwc if D >= 3 => {
                let mut axes: [usize; D] = std::array::from_fn(|i| i);
                axes[1..].rotate_right(1);
                let canonical = out.clone().permute(axes);
                let canonical_dims = canonical.dims().to_vec();
                let weighted_canonical = canonical
                    .into_data()
                    .iter::<f64>()
                    .enumerate()
                    .map(|(i, v)| position_weight(i) * v)
                    .sum();
                (canonical_dims, weighted_canonical)
            }
            // Already channels-first: one read-back.
            _ => (dims.clone(), weighted),
        };
        Self {
            op,
            dims,
            canonical_dims,
            sum,
            sum_sq,
            sum_abs,
            weighted,
            weighted_canonical,
        }
    }

    /// How far this output is from `reference`'s, relative to the reference's size: about the
    /// relative error of the values for small errors, of order one for a wrong result. Infinite
    /// when the shapes differ or a value is not finite.
    pub fn deviation(&self, reference: &OpStats) -> f64 {
        let weighted = if self.canonical_dims == reference.dims {
            self.weighted_canonical
        } else if self.dims == reference.dims {
            self.weighted
        } else {
            return f64::INFINITY;
        };
        let rel = |a: f64, b: f64, scale: f64| (a - b).abs() / scale.max(f64::MIN_POSITIVE);
        let norm = reference.sum_sq.sqrt();
        let d = rel(self.sum_sq, reference.sum_sq, reference.sum_sq)
            .max(rel(self.sum_abs, reference.sum_abs, reference.sum_abs))
            .max(rel(weighted, reference.weighted, norm))
            .max(rel(
                self.sum,
                reference.sum,
                norm * (self.count() as f64).sqrt(),
            ));
        if d.is_nan() {
            f64::INFINITY
        } else {
            d
        }
    }

    /// Number of values.
    pub fn count(&self) -> usize {
        self.dims.iter().product()
    }
}

/// A fixed weight in [-0.5, 0.5) for position `i` (Fibonacci hashing).
fn position_weight(i: usize) -> f64 {
    let h = (i as u64)
        .wrapping_add(1)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        >> 40;
    h as f64 / (1u64 << 24) as f64 - 0.5
}

impl OpProfile {
    /// Sum over all classes, milliseconds.
    pub fn total_ms(&self) -> f64 {
        self.ms.values().sum()
    }

    /// Divides every time by `n` (to average over `n` profiled passes).
    pub fn scaled(&self, n: usize) -> OpProfile {
        let n = n.max(1) as f64;
        OpProfile {
            ms: self.ms.iter().map(|(k, v)| (k.clone(), v / n)).collect(),
            calls: self.calls.clone(),
            sync_failed: self.sync_failed,
            check_finite: self.check_finite,
            first_non_finite: self.first_non_finite.clone(),
            record_stats: self.record_stats,
            stats: self.stats.clone(),
        }
    }
}

/// Per-call settings threaded through the blocks.
pub(crate) struct Ctx<'a, B: Backend> {
    pub layout: Layout,
    pub compute: Compute,
    pub profile: Option<&'a RefCell<OpProfile>>,
    pub device: B::Device,
}

impl<B: KernelBackend> Ctx<'_, B> {
    /// Runs `f`; when profiling, synchronises before and after and charges the time to `class`.
    pub fn op<const D: usize>(
        &self,
        class: OpClass,
        f: impl FnOnce() -> Tensor<B, D>,
    ) -> Tensor<B, D> {
        let Some(profile) = self.profile else {
            return f();
        };
        let mut failed = B::sync(&self.device).is_err();
        let start = Instant::now();
        let out = f();
        failed |= B::sync(&self.device).is_err();
        let ms = start.elapsed().as_secs_f64() * 1e3;
        let mut p = profile.borrow_mut();
        *p.ms.entry(class.name().to_string()).or_default() += ms;
        let calls = p.calls.entry(class.name().to_string()).or_default();
        *calls += 1;
        let index = *calls;
        p.sync_failed |= failed;
        if p.check_finite && p.first_non_finite.is_none() {
            let flag =
                |b: Tensor<B, 1, burn::tensor::Bool>| b.int().into_scalar().elem::<i64>() != 0;
            let bad = flag(out.clone().is_nan().any()) || flag(out.clone().is_inf().any());
            if bad {
                p.first_non_finite = Some(format!(
                    "{} #{index}, output shape {:?}",
                    class.name(),
                    out.dims()
                ));
            }
        }
        if p.record_stats {
            let op = format!("{} #{index}", class.name());
            p.stats.push(OpStats::of(op, &out, self.layout));
        }
        out
    }

    /// A 3-D convolution of an activation in this layout, on the backend's convolution engine
    /// ([`KernelBackend`]).
    pub fn conv(&self, conv: &Conv3d<B>, x: Tensor<B, 5>) -> Tensor<B, 5> {
        self.op(OpClass::Convolution, || match self.layout {
            Layout::Ndhwc if is_pointwise(conv) => pointwise_channels_last(conv, x),
            layout => conv3d(x, conv, None, self.compute, layout),
        })
    }

    /// [`Ctx::conv`] plus a per-(batch, channel) term `extra` `[b, c_out]` (a ResBlock's time
    /// embedding). Channels-last, the term joins the bias in one addition over the volume,
    /// whose backward is two reductions instead of two sets of three.
    pub fn conv_add(&self, conv: &Conv3d<B>, x: Tensor<B, 5>, extra: Tensor<B, 2>) -> Tensor<B, 5> {
        match self.layout {
            Layout::Ndhwc if is_pointwise(conv) => {
                let y = self.conv(conv, x);
                let [b, c] = extra.dims();
                self.op(OpClass::Elementwise, || y + extra.reshape([b, 1, 1, 1, c]))
            }
            layout => self.op(OpClass::Convolution, || {
                conv3d(x, conv, Some(extra), self.compute, layout)
            }),
        }
    }

    /// GroupNorm of an activation in this layout, with statistics in f32 (or f64) whatever the
    /// compute dtype (as mixed-precision training does: the statistics need f32's mantissa).
    pub fn norm(&self, norm: &GroupNorm<B>, x: Tensor<B, 5>) -> Tensor<B, 5> {
        self.op(OpClass::Normalisation, || {
            group_norm(norm, x, self.layout, self.compute.norm_engine, false)
        })
    }

    /// SiLU(GroupNorm(x)) as one operation of the backend extension (the U-Net applies SiLU
    /// after every GroupNorm but the attention block's).
    pub fn norm_silu(&self, norm: &GroupNorm<B>, x: Tensor<B, 5>) -> Tensor<B, 5> {
        self.op(OpClass::Normalisation, || {
            group_norm(norm, x, self.layout, self.compute.norm_engine, true)
        })
    }
}

/// `conv` applied to an activation `x` in `layout`'s order through the backend extension.
/// burn's `Conv3d` module supplies the weights and geometry; the U-Net only builds dilation-1,
/// single-group convolutions with symmetric padding.
///
/// Channels-last: the engine receives the `[b, d, h, w, c]` buffer as a permuted view and
/// returns its channels-last result the same way, viewed back without a copy; the bias is added
/// to that contiguous view, so the sum is channels-last for the operations that follow. (With
/// the bias added to the channels-first view, an H100 run spent 278 / 112 ms in normalisation /
/// elementwise per forward against 182 / 60 ms before; a sum written channels-first and read
/// strided is the likely cause, not yet confirmed on the GPU.)
fn conv3d<B: KernelBackend>(
    x: Tensor<B, 5>,
    conv: &Conv3d<B>,
    extra: Option<Tensor<B, 2>>,
    compute: Compute,
    layout: Layout,
) -> Tensor<B, 5> {
    let padding = match &conv.padding {
        PaddingConfig3d::Explicit(a, b, c) => [*a, *b, *c],
        PaddingConfig3d::Valid => [0, 0, 0],
        // `Same` with stride 1 and odd kernels pads by half the kernel.
        PaddingConfig3d::Same => conv.kernel_size.map(|k| k / 2),
    };
    let spec = Conv3dSpec {
        stride: conv.stride,
        padding,
        compute: Compute { layout, ..compute },
    };
    debug_assert!(conv.groups == 1 && conv.dilation == [1, 1, 1]);
    let weight = conv.weight.val();
    let bias = conv.bias.as_ref().map(|b| b.val());
    match layout {
        Layout::Ncdhw => {
            let y = medddpm_kernels::conv3d(x, weight, bias, spec);
            match extra {
                Some(extra) => {
                    let [b, c] = extra.dims();
                    y + extra.reshape([b, c, 1, 1, 1])
                }
                None => y,
            }
        }
        Layout::Ndhwc => {
            let y = medddpm_kernels::conv3d(x.permute([0, 4, 1, 2, 3]), weight, None, spec)
                .permute([0, 2, 3, 4, 1]);
            let add = match (bias, extra) {
                (Some(bias), Some(extra)) => {
                    let c = bias.dims()[0];
                    Some(extra + bias.reshape([1, c]))
                }
                (Some(bias), None) => {
                    let c = bias.dims()[0];
                    Some(bias.reshape([1, c]))
                }
                (None, extra) => extra,
            };
            match add {
                Some(add) => add_per_channel(y, add),
                None => y,
            }
        }
    }
}

/// `y + add` for a channels-last `y` `[b, d, h, w, c]` and `add` `[b or 1, c]`, with `y` viewed
/// as `[b, d, h * w, c]`: autodiff then sums the gradient for `add` in two reductions (over
/// `d`, then over `h * w`) instead of one per spatial axis. (One reduction over all the voxels
/// would leave only `c` outputs to spread over the GPU.)
fn add_per_channel<B: Backend>(y: Tensor<B, 5>, add: Tensor<B, 2>) -> Tensor<B, 5> {
    let dims = y.dims();
    let [b, d, h, w, c] = dims;
    let rows = add.dims()[0];
    (y.reshape([b, d, h * w, c]) + add.reshape([rows, 1, 1, c])).reshape(dims)
}

/// Whether `conv` is a plain 1x1x1 convolution (stride 1, no padding, one group).
fn is_pointwise<B: Backend>(conv: &Conv3d<B>) -> bool {
    conv.kernel_size == [1, 1, 1]
        && conv.stride == [1, 1, 1]
        && conv.groups == 1
        && !matches!(conv.padding, PaddingConfig3d::Explicit(a, b, c) if a + b + c > 0)
}

/// A 1x1x1 convolution of channels-last activations `[b, d, h, w, c_in]` as a product of the
/// voxels-by-channels matrix with the transposed kernel: channels-last is exactly the layout
/// that makes it a plain matrix product (on the H100 it trained faster than burn's 1x1x1
/// convolution in this layout: docs/benchmarks/README.md; and faster than cuDNN's, whose bf16
/// weight gradient took about 145 ms more per training step, call 4 of 2026-11-23).
///
/// The voxels go in [`token_chunks`] batches of one product each, so that autodiff computes the
/// weight gradient, a sum over every voxel, as one product per chunk and a sum over the chunks:
/// as a single product over the 2M voxels of a 128^3 volume burn ran it in one or two thread
/// blocks, 35 ms each in bf16 on an H100 (ncu, 2026-11-23).
fn pointwise_channels_last<B: Backend>(conv: &Conv3d<B>, x: Tensor<B, 5>) -> Tensor<B, 5> {
    let [b, d, h, w, c_in] = x.dims();
    let c_out = conv.weight.dims()[0];
    let n = d * h * w;
    let chunks = token_chunks(n);
    let weight = conv
        .weight
        .val()
        .reshape([1, 1, c_out, c_in])
        .swap_dims(2, 3);
    let y = x.reshape([b, chunks, n / chunks, c_in]).matmul(weight);
    let y = match conv.bias.as_ref() {
        Some(bias) => y + bias.val().reshape([1, 1, 1, c_out]),
        None => y,
    };
    y.reshape([b, d, h, w, c_out])
}

/// Batches of voxels for [`pointwise_channels_last`]: the largest power of two dividing `n`
/// that leaves at least 4096 voxels per batch (one batch for small volumes).
fn token_chunks(n: usize) -> usize {
    let mut k = 1;
    while n.is_multiple_of(2 * k) && n / (2 * k) >= 4096 {
        k *= 2;
    }
    k
}

/// `x · weightᵀ + bias` for channels-last tokens `x` `[batch, n, c_in]` and a kernel-size-1
/// weight `[c_out, c_in]`: a pointwise convolution in channels-last memory.
pub(crate) fn pointwise_tokens<B: Backend>(
    x: Tensor<B, 3>,
    weight: Tensor<B, 2>,
    bias: Option<Tensor<B, 1>>,
) -> Tensor<B, 3> {
    let [c_out, c_in] = weight.dims();
    let y = x.matmul(weight.reshape([1, c_out, c_in]).swap_dims(1, 2));
    match bias {
        Some(bias) => y + bias.reshape([1, 1, c_out]),
        None => y,
    }
}

/// GroupNorm (then SiLU when `silu`) of `x` in `layout`'s logical shape through the backend
/// extension ([`medddpm_kernels::group_norm`]: a hand-written backward that keeps the input and
/// the per-group statistics). burn's `GroupNorm` module supplies the parameters; without affine
/// parameters the identity ones are used.
pub fn group_norm<B: KernelBackend>(
    norm: &GroupNorm<B>,
    x: Tensor<B, 5>,
    layout: Layout,
    engine: NormEngine,
    silu: bool,
) -> Tensor<B, 5> {
    let c = x.dims()[layout.channel_dim()];
    let device = x.device();
    let gamma = norm.gamma.as_ref().map(|p| p.val());
    let beta = norm.beta.as_ref().map(|p| p.val());
    let spec = GroupNormSpec {
        num_groups: norm.num_groups,
        epsilon: norm.epsilon,
        silu,
        layout,
        engine,
    };
    medddpm_kernels::group_norm(
        x,
        gamma.unwrap_or_else(|| Tensor::ones([c], &device)),
        beta.unwrap_or_else(|| Tensor::zeros([c], &device)),
        spec,
    )
}

/// Which parameters run in the compute dtype: all but GroupNorm's (its scale and shift stay
/// f32, as its statistics do).
struct ComputeParams {
    in_norm: usize,
}

impl ComputeParams {
    fn enter(&mut self, container_type: &str) {
        if container_type == "Struct:GroupNorm" {
            self.in_norm += 1;
        }
    }
    fn exit(&mut self, container_type: &str) {
        if container_type == "Struct:GroupNorm" {
            self.in_norm -= 1;
        }
    }
    fn cast(&self) -> bool {
        self.in_norm == 0
    }
}

/// Casts the parameters of convolutions and linear layers to `dtype`, leaving GroupNorm's in
/// f32. Inside an autodiff graph the casts are recorded, so gradients flow back to (and come
/// out for) the original f32 parameters. Sampling uses this; training uses
/// [`working_params`], which records no casts.
pub fn cast_compute_params<B: Backend, M: Module<B>>(module: M, dtype: DType) -> M {
    struct CastMapper {
        dtype: DType,
        params: ComputeParams,
    }
    impl<B: Backend> ModuleMapper<B> for CastMapper {
        fn enter_module(&mut self, _name: &str, container_type: &str) {
            self.params.enter(container_type);
        }
        fn exit_module(&mut self, _name: &str, container_type: &str) {
            self.params.exit(container_type);
        }
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
            if !self.params.cast() {
                return param;
            }
            let dtype = self.dtype;
            param.map(|t| cast_to(t, dtype))
        }
    }
    module.map(&mut CastMapper {
        dtype,
        params: ComputeParams { in_norm: 0 },
    })
}

/// The working copy of an f32 module for a forward pass in `dtype` (mixed-precision
/// training): each parameter of a convolution or linear layer becomes a leaf of the graph in
/// `dtype` with the parameter's id, taken from `copies` (the optimizer writes them with its
/// update) or else cast outside the graph; GroupNorm's parameters are the module's own. The
/// backward pass then gives `dtype` gradients under the master weights' ids, and no cast runs
/// in either pass. With `dtype` f32 this is the module itself.
pub fn working_params<B, M>(
    module: &M,
    dtype: DType,
    mut copies: HashMap<ParamId, FloatTensor<B::InnerBackend>>,
) -> M
where
    B: AutodiffBackend,
    M: Module<B>,
{
    struct WorkMapper<'a, B: AutodiffBackend> {
        dtype: DType,
        params: ComputeParams,
        copies: &'a mut HashMap<ParamId, FloatTensor<B::InnerBackend>>,
    }
    impl<B: AutodiffBackend> ModuleMapper<B> for WorkMapper<'_, B> {
        fn enter_module(&mut self, _name: &str, container_type: &str) {
            self.params.enter(container_type);
        }
        fn exit_module(&mut self, _name: &str, container_type: &str) {
            self.params.exit(container_type);
        }
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
            if !self.params.cast() {
                return param;
            }
            let (id, tensor, mapper) = param.consume();
            let require_grad = tensor.is_require_grad();
            let copy = match self.copies.remove(&id) {
                Some(c) if c.dtype() == self.dtype && c.shape() == tensor.shape() => {
                    Tensor::from_primitive(TensorPrimitive::Float(c))
                }
                _ => cast_to(tensor.inner(), self.dtype),
            };
            let mut leaf = Tensor::<B, D>::from_inner(copy);
            if require_grad {
                leaf = leaf.require_grad();
            }
            Param::from_mapped_value(id, leaf, mapper)
        }
    }
    if dtype == DType::F32 {
        return module.clone();
    }
    module.clone().map(&mut WorkMapper::<B> {
        dtype,
        params: ComputeParams { in_norm: 0 },
        copies: &mut copies,
    })
}

/// Replaces every weight with random values (zero-initialised output layers included), drawn
/// from the backend's generator: a freshly initialised network outputs exactly zero, which
/// would hide any difference between backends, precisions or layouts in a comparison.
///
/// Weights get N(0, 1/fan_in), biases and GroupNorm shifts N(0, 0.1^2), GroupNorm scales
/// 1 + N(0, 0.1^2): zero-mean activations, so the comparison measures the arithmetic, not the
/// cancellation a large common offset would cause in GroupNorm's statistics.
pub fn randomize_weights<B: Backend, M: Module<B>>(module: M) -> M {
    struct Random {
        norm_depth: usize,
        norm_params: usize,
    }
    impl<B: Backend> ModuleMapper<B> for Random {
        fn enter_module(&mut self, _name: &str, container_type: &str) {
            if container_type == "Struct:GroupNorm" {
                self.norm_depth += 1;
                self.norm_params = 0;
            }
        }
        fn exit_module(&mut self, _name: &str, container_type: &str) {
            if container_type == "Struct:GroupNorm" {
                self.norm_depth -= 1;
            }
        }
        fn map_float<const D: usize>(&mut self, p: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
            // GroupNorm holds gamma then beta.
            let is_gamma = self.norm_depth > 0 && self.norm_params == 0;
            if self.norm_depth > 0 {
                self.norm_params += 1;
            }
            p.map(|t| {
                let shape = t.shape();
                let dims = shape.to_vec();
                let fan_in: usize = dims[1..].iter().product::<usize>().max(1);
                let std: f64 = if D == 1 {
                    0.1
                } else {
                    (1.0 / fan_in as f64).sqrt()
                };
                let noise = Tensor::random(
                    shape,
                    burn::tensor::Distribution::Normal(0.0, std),
                    &t.device(),
                );
                let value = if is_gamma {
                    noise.add_scalar(1.0)
                } else {
                    noise
                };
                // A fresh tensor is untracked: keep trainable parameters trainable.
                value.set_require_grad(t.is_require_grad())
            })
        }
    }
    module.map(&mut Random {
        norm_depth: 0,
        norm_params: 0,
    })
}

/// Every float parameter's values, in module order (for [`load_weight_values`] on another
/// backend).
pub fn weight_values<B: Backend, M: Module<B>>(module: &M) -> Vec<burn::tensor::TensorData> {
    struct Collect(Vec<burn::tensor::TensorData>);
    impl<B: Backend> burn::module::ModuleVisitor<B> for Collect {
        fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<B, D>>) {
            self.0.push(p.val().into_data());
        }
    }
    let mut c = Collect(Vec::new());
    module.visit(&mut c);
    c.0
}

/// Loads values taken by [`weight_values`] from a module of the same structure, possibly on
/// another backend; values are converted to each parameter's current dtype.
///
/// # Panics
/// If the count or a shape differs (the modules are not the same network).
pub fn load_weight_values<B: Backend, M: Module<B>>(
    module: M,
    values: Vec<burn::tensor::TensorData>,
) -> M {
    struct Load(std::vec::IntoIter<burn::tensor::TensorData>);
    impl<B: Backend> ModuleMapper<B> for Load {
        fn map_float<const D: usize>(&mut self, p: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
            let data = self.0.next().expect("as many values as parameters");
            p.map(|t| {
                assert_eq!(t.shape().to_vec(), data.shape.to_vec(), "parameter shape");
                let dtype = t.dtype();
                let value = cast_to(Tensor::<B, D>::from_data(data, &t.device()), dtype);
                value.set_require_grad(t.is_require_grad())
            })
        }
    }
    let n = values.len();
    let mut load = Load(values.into_iter());
    let out = module.map(&mut load);
    assert_eq!(load.0.len(), 0, "{n} values for fewer parameters");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::nn::conv::Conv3dConfig;
    use burn::tensor::Distribution;

    #[test]
    fn channels_last_pointwise_convolution_is_the_1x1x1_convolution() {
        let device = Default::default();
        let ctx = Ctx::<Flex> {
            layout: Layout::Ndhwc,
            compute: Compute {
                layout: Layout::Ndhwc,
                ..Default::default()
            },
            profile: None,
            device,
        };
        // 24 input channels: a depth burn's wgpu matmul got wrong before the double-buffering
        // patch in vendor/cubek-matmul.
        for c_in in [8, 24] {
            let conv = Conv3dConfig::new([c_in, 16], [1, 1, 1]).init::<Flex>(&device);
            assert!(is_pointwise(&conv));
            let x = Tensor::<Flex, 5>::random(
                [2, c_in, 3, 4, 5],
                Distribution::Normal(0.0, 1.0),
                &device,
            );
            let expected = conv.forward(x.clone()).permute([0, 2, 3, 4, 1]);
            let got = ctx.conv(&conv, x.permute([0, 2, 3, 4, 1]));
            assert_eq!(got.dims(), [2, 3, 4, 5, 16]);
            let diff = (got - expected).abs().max().into_scalar().elem::<f32>();
            assert!(diff < 1e-5, "{c_in} channels: max abs difference {diff}");
        }
        let strided = Conv3dConfig::new([8, 8], [1, 1, 1])
            .with_stride([2, 2, 2])
            .init::<Flex>(&device);
        let padded = Conv3dConfig::new([8, 8], [1, 1, 1])
            .with_padding(PaddingConfig3d::Explicit(1, 1, 1))
            .init::<Flex>(&device);
        let wide = Conv3dConfig::new([8, 8], [3, 3, 3]).init::<Flex>(&device);
        assert!(!is_pointwise(&strided) && !is_pointwise(&padded) && !is_pointwise(&wide));
    }

    #[test]
    fn chunked_pointwise_convolution_has_the_convolutions_gradients() {
        use burn::backend::Autodiff;
        type A = Autodiff<Flex>;
        let device = Default::default();
        // 16 x 32 x 32 voxels: four chunks of 4096.
        assert_eq!(token_chunks(16 * 32 * 32), 4);
        assert_eq!(token_chunks(4096), 1);
        assert_eq!(token_chunks(3 * 4096), 2);
        let conv = Conv3dConfig::new([6, 5], [1, 1, 1]).init::<A>(&device);
        let x = Tensor::<A, 5>::random([1, 6, 16, 32, 32], Distribution::Default, &device)
            .require_grad();
        let probe = Tensor::<A, 5>::random([1, 5, 16, 32, 32], Distribution::Default, &device);
        let want = conv.forward(x.clone());
        let grads_want = want.clone().mul(probe.clone()).sum().backward();
        let got = pointwise_channels_last(&conv, x.clone().permute([0, 2, 3, 4, 1]))
            .permute([0, 4, 1, 2, 3]);
        let grads_got = got.clone().mul(probe).sum().backward();
        let max_diff = |a: Tensor<Flex, 5>, b: Tensor<Flex, 5>| {
            (a - b).abs().max().into_scalar().elem::<f32>()
        };
        assert!(max_diff(got.inner(), want.inner()) < 1e-5);
        assert!(max_diff(x.grad(&grads_got).unwrap(), x.grad(&grads_want).unwrap()) < 1e-5);
        let dw_got = conv.weight.grad(&grads_got).unwrap();
        let dw_want = conv.weight.grad(&grads_want).unwrap();
        let rel = (dw_got - dw_want.clone())
            .abs()
            .max()
            .into_scalar()
            .elem::<f32>()
            / dw_want.abs().max().into_scalar().elem::<f32>();
        assert!(rel < 1e-5, "weight gradient: relative difference {rel}");
    }
}
