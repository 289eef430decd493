//! cuDNN behind burn-fusion's custom operations: the convolution is one operation in the fused
//! stream (as burn-vision registers its CubeCL kernels), executed on the CubeCL tensors.

use burn::tensor::ops::{ConvOptions, FloatTensor, ModuleOps};
use burn::tensor::{DType, Shape};
use burn_cubecl::{BoolElement, FloatElement, IntElement};
use burn_fusion::stream::Operation;
use burn_fusion::FusionBackend;
use burn_ir::{CustomOpIr, OperationOutput};
use cubecl_cuda::CudaRuntime;

use crate::compute::Layout;
use crate::conv::{
    batch_chunks, data_grad_in_batch_chunks, data_grad_via_forward, forward_in_batch_chunks,
    forward_in_padded, is_strided_same, weight_grad_in_batch_chunks, Conv3dSpec, KernelBackend,
    CUDNN_MAX_VALUES,
};
use crate::cuda::{Cube, Fused};
use crate::cudnn::custom::{register, Handles};
use crate::cudnn::engine::{run, warn_fallback, Operands};
use crate::cudnn::operands::ConvOp;
use crate::primitive::{float, tensor};
use crate::reference::adam::{AdamOutput, AdamStep, AdamTensors};
use crate::reference::norm::{GroupNormGrads, GroupNormOutput, GroupNormSpec, NormInput};
use crate::reference::product::product_primitive;
use crate::reference::product::spec::ProductSpec;

#[derive(Debug, Clone)]
struct CudnnConv<B> {
    desc: CustomOpIr,
    op: ConvOp,
    spec: Conv3dSpec,
    _b: core::marker::PhantomData<B>,
}

impl<F: FloatElement, I: IntElement, BT: BoolElement>
    Operation<<Cube<F, I, BT> as FusionBackend>::FusionRuntime> for CudnnConv<Cube<F, I, BT>>
{
    fn execute(&self, handles: &mut Handles<F, I, BT>) {
        let options: ConvOptions<3> = self.spec.options();
        let out = match self.op {
            ConvOp::Forward => {
                let ([x, w], [y]) = self.desc.as_fixed();
                let x = handles.get_float_tensor::<Cube<F, I, BT>>(x);
                let w = handles.get_float_tensor::<Cube<F, I, BT>>(w);
                let operands = Operands {
                    x: x.clone(),
                    w: w.clone(),
                    dy: None,
                };
                let out = run(self.op, operands, &self.spec).unwrap_or_else(|e| {
                    warn_fallback(&e);
                    Cube::<F, I, BT>::conv3d(x, w, None, options)
                });
                (y.id, out)
            }
            ConvOp::DataGrad | ConvOp::WeightGrad => {
                let ([x, w, dy], [out_ir]) = self.desc.as_fixed();
                let x = handles.get_float_tensor::<Cube<F, I, BT>>(x);
                let w = handles.get_float_tensor::<Cube<F, I, BT>>(w);
                let dy = handles.get_float_tensor::<Cube<F, I, BT>>(dy);
                let operands = Operands {
                    x: x.clone(),
                    w: w.clone(),
                    dy: Some(dy.clone()),
                };
                let out = run(self.op, operands, &self.spec).unwrap_or_else(|e| {
                    warn_fallback(&e);
                    if self.op == ConvOp::DataGrad {
                        Cube::<F, I, BT>::conv3d_x_backward(x, w, dy, options)
                    } else {
                        Cube::<F, I, BT>::conv3d_weight_backward(x, w, dy, options)
                    }
                });
                (out_ir.id, out)
            }
        };
        handles.register_float_tensor::<Cube<F, I, BT>>(&out.0, out.1);
    }
}

fn register_conv<F: FloatElement, I: IntElement, BT: BoolElement>(
    op: ConvOp,
    inputs: Vec<FloatTensor<Fused<F, I, BT>>>,
    out_shape: Shape,
    spec: Conv3dSpec,
) -> FloatTensor<Fused<F, I, BT>> {
    let client = inputs[0].client.clone();
    let output = (out_shape, inputs[0].dtype);
    let name = match op {
        ConvOp::Forward => "medddpm_cudnn_conv3d_forward",
        ConvOp::DataGrad => "medddpm_cudnn_conv3d_data_grad",
        ConvOp::WeightGrad => "medddpm_cudnn_conv3d_weight_grad",
    };
    register::<F, I, BT, _>(&client, name, inputs, [output], |desc| CudnnConv::<
        Cube<F, I, BT>,
    > {
        desc,
        op,
        spec,
        _b: core::marker::PhantomData,
    })
    .output()
}

fn conv_output_shape(x: &Shape, w: &Shape, spec: &Conv3dSpec) -> Shape {
    let sp = spec.output_size([x[2], x[3], x[4]], [w[2], w[3], w[4]]);
    Shape::new([x[0], w[0], sp[0], sp[1], sp[2]])
}

impl<F: FloatElement, I: IntElement, BT: BoolElement> KernelBackend for Fused<F, I, BT> {
    cube_kernels!(CudaRuntime, F, I, BT);

    fn host_bytes(device: &Self::Device, parts: &[&[u8]]) -> Option<burn::tensor::Bytes> {
        crate::cudnn::pinned::host_bytes(device, parts)
    }

    fn float_from_host(data: burn::tensor::TensorData, device: &Self::Device) -> FloatTensor<Self> {
        crate::cudnn::pinned::float_from_host::<F, I, BT>(data, device)
    }

    fn product(a: FloatTensor<Self>, b: FloatTensor<Self>, spec: ProductSpec) -> FloatTensor<Self> {
        match spec.compute.uses_cudnn() {
            true => crate::cudnn::cublas::register_product::<F, I, BT>(a, b, spec),
            false => product_primitive::<Self>(a, b, spec),
        }
    }

    fn graph_warm_up(
        _device: &Self::Device,
        inputs: Vec<FloatTensor<Self>>,
        step: &mut crate::capture::StepFn<'_, Self>,
    ) -> Vec<FloatTensor<Self>> {
        crate::cudnn::cuda_graph::warm_up::<F, I, BT>(inputs, step)
    }

    fn graph_capture(
        device: &Self::Device,
        inputs: Vec<FloatTensor<Self>>,
        step: &mut crate::capture::StepFn<'_, Self>,
    ) -> Result<crate::capture::Captured<Self>, crate::capture::GraphError> {
        crate::cudnn::cuda_graph::capture::<F, I, BT>(device, inputs, step)
    }

    fn graph_replay(
        captured: &crate::capture::Captured<Self>,
        inputs: Vec<FloatTensor<Self>>,
    ) -> Vec<FloatTensor<Self>> {
        crate::cudnn::cuda_graph::replay::<F, I, BT>(captured, inputs)
    }

    fn conv3d_forward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        spec: Conv3dSpec,
    ) -> FloatTensor<Self> {
        if !spec.compute.uses_cudnn() {
            return crate::cube::conv::engine::forward::<CudaRuntime, F, I, BT>(x, weight, spec);
        }
        let shape = conv_output_shape(&x.shape, &weight.shape, &spec);
        if let Some(chunks) = cudnn_batch_chunks(&x.shape, &shape) {
            let (x, w) = (tensor(x), tensor(weight));
            return float(forward_in_batch_chunks::<Self>(x, w, spec, &chunks));
        }
        if let Some(padded) = padded_in_channels(x.shape[1], x.dtype, &spec) {
            return float(forward_in_padded::<Self>(
                tensor(x),
                tensor(weight),
                spec,
                padded,
            ));
        }
        register_conv::<F, I, BT>(ConvOp::Forward, vec![x, weight], shape, spec)
    }

    conv_grads!(
        conv3d_data_grad: |x, w, dy, spec| {
            conv3d_grad::<F, I, BT>(ConvOp::DataGrad, x, w, dy, spec)
        },
        conv3d_weight_grad: |x, w, dy, spec| {
            conv3d_grad::<F, I, BT>(ConvOp::WeightGrad, x, w, dy, spec)
        },
    );
}

/// Either convolution gradient (`op`): CubeCL's engine where cuDNN is not asked for, the batch
/// in chunks where cuDNN cannot index it whole, then the gradient's own rewrites before cuDNN.
fn conv3d_grad<F: FloatElement, I: IntElement, BT: BoolElement>(
    op: ConvOp,
    x: FloatTensor<Fused<F, I, BT>>,
    weight: FloatTensor<Fused<F, I, BT>>,
    grad_out: FloatTensor<Fused<F, I, BT>>,
    spec: Conv3dSpec,
) -> FloatTensor<Fused<F, I, BT>> {
    let data = op == ConvOp::DataGrad;
    if !spec.compute.uses_cudnn() {
        let cube = match data {
            true => crate::cube::conv::engine::data_grad::<CudaRuntime, F, I, BT>,
            false => crate::cube::conv::engine::weight_grad::<CudaRuntime, F, I, BT>,
        };
        return cube(x, weight, grad_out, spec);
    }
    if let Some(chunks) = cudnn_batch_chunks(&x.shape, &grad_out.shape) {
        let chunked = match data {
            true => data_grad_in_batch_chunks::<Fused<F, I, BT>>,
            false => weight_grad_in_batch_chunks::<Fused<F, I, BT>>,
        };
        let (x, w, dy) = (tensor(x), tensor(weight), tensor(grad_out));
        return float(chunked(x, w, dy, spec, &chunks));
    }
    let shape = if data {
        let kernel = [weight.shape[2], weight.shape[3], weight.shape[4]];
        if is_strided_same(kernel, &spec) {
            // cuDNN's own strided data gradient is an order of magnitude slower (see there).
            let x_spatial = [x.shape[2], x.shape[3], x.shape[4]];
            return float(data_grad_via_forward::<Fused<F, I, BT>>(
                x_spatial,
                tensor(weight),
                tensor(grad_out),
                spec,
            ));
        }
        x.shape.clone()
    } else {
        let c_out = weight.shape[0];
        if c_out < PADDED_OUT_CHANNELS {
            let padded = PADDED_OUT_CHANNELS;
            return float(crate::conv::weight_grad_padded::<Fused<F, I, BT>>(
                tensor(x),
                tensor(weight),
                tensor(grad_out),
                spec,
                padded,
            ));
        }
        weight.shape.clone()
    };
    register_conv::<F, I, BT>(op, vec![x, weight, grad_out], shape, spec)
}

/// The ranges of examples to give cuDNN one call each when an operand of the whole batch is
/// past what it indexes (see [`CUDNN_MAX_VALUES`]); `None` for one call.
fn cudnn_batch_chunks(x: &Shape, y: &Shape) -> Option<Vec<std::ops::Range<usize>>> {
    let batch = x[0].max(1);
    let largest = x.num_elements().max(y.num_elements());
    batch_chunks(batch, largest / batch, CUDNN_MAX_VALUES)
}

/// Weight gradients with fewer output channels are computed with this many, the extra ones
/// zero: for few output channels cuDNN has only slow kernels. For the U-Net's last
/// convolution (64 -> 1 channels, 3x3x3, 128^3, channels-last) its search picked algorithms
/// that took 34.7 ms in bf16 (13.6 ms in tf32); padded to 8 output channels, 163.8 ms (6.3 ms);
/// the 64 -> 64 convolution of the same size takes 1.2 ms (5.4 ms): cuDNN's own timings on an
/// H100.
const PADDED_OUT_CHANNELS: usize = 64;

/// 16-bit channels-last forward convolutions with fewer than this many input channels, not a
/// multiple of 8, run with zero channels added up to it: with 3 input channels (the U-Net's
/// first convolution) cuDNN has only a kernel without tensor cores, and with 32 its tensor-core
/// forward kernels read whole 64-byte rows per tap, less than half the time. Its padded weight
/// gradient and its TF32 kernels were slower than the unpadded ones in its own timings, so only
/// the 16-bit forward pass is padded (figures in the optimisation log).
const SMALL_IN_CHANNELS: usize = 32;

/// The padded input-channel count of a forward convolution, where [`SMALL_IN_CHANNELS`] says.
fn padded_in_channels(c_in: usize, dtype: DType, spec: &Conv3dSpec) -> Option<usize> {
    let half = matches!(dtype, DType::BF16 | DType::F16);
    (half
        && spec.compute.layout == Layout::Ndhwc
        && c_in < SMALL_IN_CHANNELS
        && !c_in.is_multiple_of(8))
    .then_some(SMALL_IN_CHANNELS)
}
