//! What a convolution call is and what it runs on: the operation and its operands' device
//! pointers.

/// The three convolution operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConvOp {
    /// `y = conv(x, w)`.
    Forward,
    /// `dx` from `dy` and `w`.
    DataGrad,
    /// `dw` from `x` and `dy`.
    WeightGrad,
}

impl ConvOp {
    /// Short name, in the algorithm cache's keys and in error messages.
    pub(super) fn name(self) -> &'static str {
        match self {
            ConvOp::Forward => "fwd",
            ConvOp::DataGrad => "bwd-data",
            ConvOp::WeightGrad => "bwd-filter",
        }
    }

    /// How many algorithms cuDNN numbers for this operation.
    pub(super) fn algo_count(self) -> u32 {
        match self {
            ConvOp::Forward => 8,
            ConvOp::DataGrad => 6,
            ConvOp::WeightGrad => 7,
        }
    }
}

/// Device pointers of one call's operands (0 for one the operation does not read); `out` is
/// `y` for the forward pass, `dL/dx` or `dL/dw` for the gradients.
pub(super) struct Ptrs {
    pub x: u64,
    pub w: u64,
    pub dy: u64,
    pub out: u64,
}

/// A device pointer as cuDNN takes it.
pub(super) fn vp(p: u64) -> *mut std::ffi::c_void {
    p as usize as *mut std::ffi::c_void
}
