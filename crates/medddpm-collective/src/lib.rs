//! Averaging a tensor over the replicas of data-parallel training: NCCL's all-reduce on CUDA
//! (through cubecl-cuda's communicators, the call burn's own `DistributedBackend` makes), and
//! nothing elsewhere (the trainer then averages on the host).
//!
//! burn 0.21's `distributed` feature is not used: with it, burn-autodiff differentiates only
//! over backends that implement `DistributedBackend`, which the CPU backend (Flex) does not, so
//! the CPU training path would no longer compile.
//!
//! Every replica calls the same collectives, with the same group, in the same order, each from
//! its own thread: NCCL matches the calls of the ranks by their order, and a rank that calls
//! something else (or nothing) leaves the others waiting on the GPU for ever.

#![warn(missing_docs)]

mod check;
#[cfg(feature = "cuda")]
mod fused;
#[cfg(feature = "cuda")]
mod nccl;
#[cfg(feature = "cuda")]
mod nccl_process;
#[cfg(feature = "cuda")]
mod watchdog;

// The layers below, under the paths this code was written with.
pub(crate) use medddpm_ops::{compute, dtype, panics, primitive};
#[cfg(feature = "cuda")]
pub(crate) use medddpm_ops::{cuda, device_error};

use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::Autodiff;
use burn::tensor::backend::{AutodiffBackend, Backend, DeviceId};
use burn::tensor::ops::FloatTensor;
use burn::tensor::FloatDType;
use serde::{Deserialize, Serialize};

pub use crate::compute::{Collective, Launch};
pub use check::{check_all_reduce, CollectiveCheck, CollectiveRow, BF16_TOLERANCE, F32_TOLERANCE};
#[cfg(feature = "cuda")]
pub use nccl::MIN_NCCL_VERSION;

/// Why a backend cannot run a collective.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct CollectiveUnavailable(pub String);

/// The id of an NCCL communicator that several processes join (`ncclUniqueId`'s 128 bytes):
/// made by one process ([`nccl_unique_id`]) and handed to the others by the caller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NcclId(pub Vec<u8>);

/// This process's member of a communicator across processes, one device each (made by
/// [`CollectiveBackend::join_process_group`]).
#[derive(Clone)]
pub struct ProcessGroup {
    /// The backend's communicator.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) comm: std::sync::Arc<dyn std::any::Any + Send + Sync>,
    /// This process's rank and the number of processes.
    pub rank: usize,
    /// See `rank`.
    pub world: usize,
}

impl std::fmt::Debug for ProcessGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ProcessGroup(rank {} of {})", self.rank, self.world)
    }
}

/// A fresh id for a communicator across processes: the first process makes it and hands it
/// to the others, which all join with it.
pub fn nccl_unique_id() -> Result<NcclId, CollectiveUnavailable> {
    #[cfg(feature = "cuda")]
    {
        nccl_process::unique_id()
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err(CollectiveUnavailable(
            "NCCL: this build has no CUDA backend (build with the `cuda` feature)".into(),
        ))
    }
}

/// What the backends without collectives answer.
const NO_COLLECTIVES: &str = "this backend has no collective operations (NCCL runs on CUDA only)";

/// A backend that can average a tensor across devices in one collective call.
pub trait CollectiveBackend: Backend {
    /// Whether [`all_reduce_mean`](Self::all_reduce_mean) can run over `group`, and with what
    /// (e.g. "NCCL 2.21.5"). Ask before the replicas start: an error inside the collective on
    /// one rank leaves the others waiting.
    fn collective_available(group: &[DeviceId]) -> Result<String, CollectiveUnavailable> {
        let _ = group;
        Err(CollectiveUnavailable(NO_COLLECTIVES.into()))
    }

    /// The element-wise mean of `tensor` over the tensors that the same call on each device of
    /// `group` passes (every device calls it, in the same order of calls). Later work on the
    /// device waits for it; the calling thread does not wait for the other devices. The default:
    /// no collective on this backend.
    fn all_reduce_mean(
        tensor: FloatTensor<Self>,
        group: &[DeviceId],
    ) -> Result<FloatTensor<Self>, CollectiveUnavailable> {
        let _ = (tensor, group);
        Err(CollectiveUnavailable(NO_COLLECTIVES.into()))
    }

    /// [`all_reduce_mean`](Self::all_reduce_mean) of each tensor, in order, as one operation
    /// (on CUDA one hand-over to the device thread for all of them, e.g. a step's gradients).
    fn all_reduce_mean_many(
        tensors: Vec<FloatTensor<Self>>,
        group: &[DeviceId],
    ) -> Result<Vec<FloatTensor<Self>>, CollectiveUnavailable> {
        tensors
            .into_iter()
            .map(|t| Self::all_reduce_mean(t, group))
            .collect()
    }

    /// The mean of each tensor (any float dtype) over `group`, in f32, for a step's gradients:
    /// one operation however many tensors. On CUDA they are packed into one f32 buffer, averaged
    /// by one NCCL call and handed back as f32 views of that buffer, where casting, flattening
    /// and splitting them with tensor operations would cost the host a few operations per
    /// tensor (hundreds per step). The default casts each to f32 and calls
    /// [`all_reduce_mean_many`](Self::all_reduce_mean_many).
    fn all_reduce_mean_packed(
        tensors: Vec<FloatTensor<Self>>,
        group: &[DeviceId],
    ) -> Result<Vec<FloatTensor<Self>>, CollectiveUnavailable> {
        let f32s = tensors
            .into_iter()
            .map(|t| Self::float_cast(t, FloatDType::F32))
            .collect();
        Self::all_reduce_mean_many(f32s, group)
    }

    /// Joins the communicator `id` as `rank` of `world` processes, on `device` (every process
    /// calls it with the same id; the call returns once all have). With a `timeout`, a call
    /// that takes longer (a rank stopped, hung or gone) aborts the communicator and is reported
    /// as the device error, instead of holding the device for ever. The default: no collective
    /// on this backend.
    fn join_process_group(
        device: &Self::Device,
        id: &NcclId,
        (rank, world): (usize, usize),
        timeout: Option<std::time::Duration>,
    ) -> Result<ProcessGroup, CollectiveUnavailable> {
        let _ = (device, id, rank, world, timeout);
        Err(CollectiveUnavailable(NO_COLLECTIVES.into()))
    }

    /// [`all_reduce_mean_packed`](Self::all_reduce_mean_packed) over the processes of
    /// `group` instead of the devices of this process: one NCCL call on the device's own
    /// stream, after the work queued before it.
    fn all_reduce_mean_packed_across(
        tensors: Vec<FloatTensor<Self>>,
        group: &ProcessGroup,
    ) -> Result<Vec<FloatTensor<Self>>, CollectiveUnavailable> {
        let _ = (tensors, group);
        Err(CollectiveUnavailable(NO_COLLECTIVES.into()))
    }
}

impl CollectiveBackend for burn::backend::Flex {}

#[cfg(feature = "wgpu")]
impl CollectiveBackend for burn::backend::Wgpu {}

/// The inner backend's collective on the tensor's value, outside the graph: gradients are
/// averaged after the backward pass, never differentiated through.
impl<B: CollectiveBackend, C: CheckpointStrategy> CollectiveBackend for Autodiff<B, C> {
    fn collective_available(group: &[DeviceId]) -> Result<String, CollectiveUnavailable> {
        B::collective_available(group)
    }

    fn all_reduce_mean(
        tensor: FloatTensor<Self>,
        group: &[DeviceId],
    ) -> Result<FloatTensor<Self>, CollectiveUnavailable> {
        B::all_reduce_mean(Self::inner(tensor), group).map(Self::from_inner)
    }

    fn all_reduce_mean_many(
        tensors: Vec<FloatTensor<Self>>,
        group: &[DeviceId],
    ) -> Result<Vec<FloatTensor<Self>>, CollectiveUnavailable> {
        on_inner::<Self, _>(tensors, group, B::all_reduce_mean_many)
    }

    fn all_reduce_mean_packed(
        tensors: Vec<FloatTensor<Self>>,
        group: &[DeviceId],
    ) -> Result<Vec<FloatTensor<Self>>, CollectiveUnavailable> {
        on_inner::<Self, _>(tensors, group, B::all_reduce_mean_packed)
    }

    fn join_process_group(
        device: &Self::Device,
        id: &NcclId,
        member: (usize, usize),
        timeout: Option<std::time::Duration>,
    ) -> Result<ProcessGroup, CollectiveUnavailable> {
        B::join_process_group(device, id, member, timeout)
    }

    fn all_reduce_mean_packed_across(
        tensors: Vec<FloatTensor<Self>>,
        group: &ProcessGroup,
    ) -> Result<Vec<FloatTensor<Self>>, CollectiveUnavailable> {
        on_inner::<Self, _>(tensors, group, B::all_reduce_mean_packed_across)
    }
}

/// `op` of the inner backend on the tensors' values, its results back on the autodiff backend.
fn on_inner<A: AutodiffBackend, G: ?Sized>(
    tensors: Vec<FloatTensor<A>>,
    group: &G,
    op: impl FnOnce(
        Vec<FloatTensor<A::InnerBackend>>,
        &G,
    ) -> Result<Vec<FloatTensor<A::InnerBackend>>, CollectiveUnavailable>,
) -> Result<Vec<FloatTensor<A>>, CollectiveUnavailable> {
    let inner = tensors.into_iter().map(A::inner).collect();
    let out = op(inner, group)?;
    Ok(out.into_iter().map(A::from_inner).collect())
}

/// NCCL's version (e.g. "NCCL 2.21.5") if the library loads, else why not and how to provide
/// it. Never panics; the answer is worked out once per process.
pub fn nccl_status() -> Result<String, CollectiveUnavailable> {
    #[cfg(feature = "cuda")]
    {
        nccl::status()
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err(CollectiveUnavailable(
            "NCCL: this build has no CUDA backend (build with the `cuda` feature)".into(),
        ))
    }
}

/// How many CUDA devices this process sees (for a group of all of them).
pub fn cuda_device_count() -> Result<usize, CollectiveUnavailable> {
    #[cfg(feature = "cuda")]
    {
        nccl::device_count()
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err(CollectiveUnavailable(
            "this build has no CUDA backend (build with the `cuda` feature)".into(),
        ))
    }
}

/// `group` sorted, if it can be one: not empty, no device twice, all of one device type. Every
/// rank sorts the same way, so the order the caller lists the devices in does not matter.
pub fn sorted_group(group: &[DeviceId]) -> Result<Vec<DeviceId>, CollectiveUnavailable> {
    let Some(first) = group.first() else {
        return Err(CollectiveUnavailable("the device group is empty".into()));
    };
    if let Some(other) = group.iter().find(|d| d.type_id != first.type_id) {
        return Err(CollectiveUnavailable(format!(
            "the device group mixes device types ({first} and {other})"
        )));
    }
    let mut sorted = group.to_vec();
    sorted.sort();
    if let Some(pair) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(CollectiveUnavailable(format!(
            "device {} is in the group twice",
            pair[0]
        )));
    }
    Ok(sorted)
}

/// Where each part of `sizes` starts in the packed buffer (each start a multiple of `align`),
/// then the buffer's length.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn pack_offsets(sizes: impl Iterator<Item = usize>, align: usize) -> Vec<usize> {
    let mut offsets = vec![0];
    for n in sizes {
        let start = *offsets.last().expect("starts with 0");
        offsets.push((start + n).next_multiple_of(align));
    }
    offsets
}

#[cfg(test)]
mod tests;
