//! What a 3-D convolution is: stride and padding, and how it computes.

use burn::tensor::ops::ConvOptions;

use crate::compute::Compute;

/// Stride and padding of a 3-D convolution (dilation 1, one group: all the U-Net uses), plus
/// how it should compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Conv3dSpec {
    /// Stride per spatial axis.
    pub stride: [usize; 3],
    /// Zero padding per spatial axis (both sides).
    pub padding: [usize; 3],
    /// Engine, precision and the activations' layout.
    pub compute: Compute,
}

impl Conv3dSpec {
    /// burn's options for the same convolution.
    pub fn options(&self) -> ConvOptions<3> {
        ConvOptions::new(self.stride, self.padding, [1, 1, 1], 1)
    }

    /// Output spatial size for input size `input` and kernel size `kernel`.
    pub fn output_size(&self, input: [usize; 3], kernel: [usize; 3]) -> [usize; 3] {
        std::array::from_fn(|i| (input[i] + 2 * self.padding[i] - kernel[i]) / self.stride[i] + 1)
    }
}
