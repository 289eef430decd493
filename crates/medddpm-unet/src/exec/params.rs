//! Whole-module parameter passes: casting to the compute dtype (sampling), working copies for
//! mixed-precision training, random weights for comparisons, and moving values between
//! backends.

use std::collections::HashMap;

use burn::module::{Module, ModuleMapper, Param, ParamId};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Tensor, TensorMetadata, TensorPrimitive};
use medddpm_kernels::cast_to;

/// What a compute-dtype pass does to one parameter of a convolution or linear layer.
trait CastParam<B: Backend> {
    fn cast<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>>;
}

/// Runs a [`CastParam`] on every parameter but GroupNorm's: its scale and shift stay f32, as
/// its statistics do.
struct OutsideNorm<C> {
    in_norm: usize,
    cast: C,
}

impl<B: Backend, C: CastParam<B>> ModuleMapper<B> for OutsideNorm<C> {
    fn enter_module(&mut self, _name: &str, container_type: &str) {
        if container_type == "Struct:GroupNorm" {
            self.in_norm += 1;
        }
    }
    fn exit_module(&mut self, _name: &str, container_type: &str) {
        if container_type == "Struct:GroupNorm" {
            self.in_norm -= 1;
        }
    }
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        if self.in_norm == 0 {
            self.cast.cast(param)
        } else {
            param
        }
    }
}

fn outside_norm<B: Backend, M: Module<B>>(module: M, cast: impl CastParam<B>) -> M {
    module.map(&mut OutsideNorm { in_norm: 0, cast })
}

/// Casts the parameters of convolutions and linear layers to `dtype`, leaving GroupNorm's in
/// f32. Inside an autodiff graph the casts are recorded, so gradients flow back to (and come
/// out for) the original f32 parameters. Sampling uses this; training uses
/// [`working_params`], which records no casts.
pub fn cast_compute_params<B: Backend, M: Module<B>>(module: M, dtype: DType) -> M {
    struct Cast(DType);
    impl<B: Backend> CastParam<B> for Cast {
        fn cast<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
            let dtype = self.0;
            param.map(|t| cast_to(t, dtype))
        }
    }
    outside_norm(module, Cast(dtype))
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
    struct Work<'a, B: AutodiffBackend> {
        dtype: DType,
        copies: &'a mut HashMap<ParamId, FloatTensor<B::InnerBackend>>,
    }
    impl<B: AutodiffBackend> CastParam<B> for Work<'_, B> {
        fn cast<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
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
    let work = Work::<B> {
        dtype,
        copies: &mut copies,
    };
    outside_norm(module.clone(), work)
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
