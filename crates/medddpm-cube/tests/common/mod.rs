//! What the portable kernel tests share: the backend they run on (wgpu, or CUDA with
//! `--features test-cuda`), the convolutions they check and their operands' values.
// Each test file uses only part of it.
#![allow(dead_code, unused_imports)]

#[cfg(not(feature = "test-cuda"))]
pub use burn::backend::{
    wgpu::{WgpuDevice as GpuDevice, WgpuRuntime as GpuRuntime},
    Wgpu as Fused,
};
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::Tensor;
use medddpm_ops::compute::{Compute, Layout};
use medddpm_ops::reference::conv_spec::Conv3dSpec;
#[cfg(feature = "test-cuda")]
pub use {
    burn::backend::{cuda::CudaDevice as GpuDevice, Cuda as Fused},
    cubecl_cuda::CudaRuntime as GpuRuntime,
};

/// The boolean element of the backend's tensors.
#[cfg(not(feature = "test-cuda"))]
pub type GpuBool = u32;
#[cfg(feature = "test-cuda")]
pub type GpuBool = u8;

/// One convolution: batch, input and output channels, input size, kernel, stride, padding.
#[derive(Debug, Clone, Copy)]
pub struct Case {
    pub batch: usize,
    pub c_in: usize,
    pub c_out: usize,
    pub size: [usize; 3],
    pub kernel: [usize; 3],
    pub stride: [usize; 3],
    pub padding: [usize; 3],
}

/// A convolution of a cubic kernel `k`, stride `s` and padding `p`.
pub const fn case(
    batch: usize,
    c_in: usize,
    c_out: usize,
    size: [usize; 3],
    k: usize,
    s: usize,
    p: usize,
) -> Case {
    Case::new(batch, c_in, c_out, size, [k; 3], [s; 3], [p; 3])
}

/// Both tests' last case: an uneven kernel, stride and padding, and two output channels from
/// eight input channels (one or two vectors a tap on the narrow kernels, channels-last).
pub const NARROW_UNEVEN: Case = Case::new(1, 8, 2, [6, 5, 7], [2, 3, 1], [1, 2, 3], [0, 1, 1]);

impl Case {
    /// The fields in their order.
    pub const fn new(
        batch: usize,
        c_in: usize,
        c_out: usize,
        size: [usize; 3],
        kernel: [usize; 3],
        stride: [usize; 3],
        padding: [usize; 3],
    ) -> Case {
        Case {
            batch,
            c_in,
            c_out,
            size,
            kernel,
            stride,
            padding,
        }
    }

    pub fn spec(&self) -> Conv3dSpec {
        self.spec_in(Layout::Ncdhw)
    }

    /// The spec with activations in `layout`.
    pub fn spec_in(&self, layout: Layout) -> Conv3dSpec {
        Conv3dSpec {
            stride: self.stride,
            padding: self.padding,
            compute: Compute {
                layout,
                ..Compute::default()
            },
        }
    }

    pub fn out_size(&self) -> [usize; 3] {
        self.spec().output_size(self.size, self.kernel)
    }
}

/// `n` normal values of deviation `std` from a generator of our own (xorshift and
/// Box-Muller), so the operands, and with them the errors, are the same from run to run.
pub fn normal(n: usize, std: f64, seed: u64) -> Vec<f32> {
    let mut uniform = medddpm_testdata::xorshift_uniform(seed);
    (0..n)
        .map(|_| {
            let (u, v) = (uniform(), uniform());
            (std * (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
        })
        .collect()
}

/// The backend's float tensor under `t`, what the kernels' entry points take.
pub fn prim<B: Backend, const D: usize>(t: Tensor<B, D>) -> FloatTensor<B> {
    t.into_primitive().tensor()
}

/// Zeros of `shape` on the backend's default device, as its float tensor.
pub fn zeros<B: Backend>(shape: [usize; 5]) -> FloatTensor<B> {
    prim(Tensor::<B, 5>::zeros(shape, &Default::default()))
}
