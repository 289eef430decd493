//! NCCL behind the collective operations of burn's fused CUDA backend: within one process
//! ([`super::nccl`]: every device's rank on its own thread) or one process per device
//! ([`super::nccl_process`]).

use std::marker::PhantomData;

use burn::tensor::backend::DeviceId;
use burn::tensor::ops::FloatTensor;
use burn_cubecl::{BoolElement, FloatElement, IntElement};

use super::nccl::{
    check_call, device_count, register, register_packed, status, AllReduceMean, Gradient,
};
use super::{sorted_group, CollectiveBackend, CollectiveUnavailable, NcclId, ProcessGroup};
use crate::cuda::{Cube, Fused};

impl<F: FloatElement, I: IntElement, BT: BoolElement> CollectiveBackend for Fused<F, I, BT> {
    fn collective_available(group: &[DeviceId]) -> Result<String, CollectiveUnavailable> {
        let nccl = status()?;
        let group = sorted_group(group)?;
        let count = device_count()?;
        if let Some(missing) = group.iter().find(|d| d.index_id as usize >= count) {
            return Err(CollectiveUnavailable(format!(
                "CUDA device {} is not there: this process sees {count}",
                missing.index_id
            )));
        }
        Ok(format!("{nccl}, {} ranks", group.len()))
    }

    fn all_reduce_mean(
        tensor: FloatTensor<Self>,
        group: &[DeviceId],
    ) -> Result<FloatTensor<Self>, CollectiveUnavailable> {
        let mut out = Self::all_reduce_mean_many(vec![tensor], group)?;
        Ok(out.remove(0))
    }

    fn all_reduce_mean_packed(
        tensors: Vec<FloatTensor<Self>>,
        group: &[DeviceId],
    ) -> Result<Vec<FloatTensor<Self>>, CollectiveUnavailable> {
        all_reduce_mean::<F, I, BT>(tensors, group, true)
    }

    fn join_process_group(
        device: &Self::Device,
        id: &NcclId,
        member: (usize, usize),
        timeout: Option<std::time::Duration>,
    ) -> Result<ProcessGroup, CollectiveUnavailable> {
        super::nccl_process::join(device, id, member, timeout)
    }

    fn all_reduce_mean_packed_across(
        tensors: Vec<FloatTensor<Self>>,
        group: &ProcessGroup,
    ) -> Result<Vec<FloatTensor<Self>>, CollectiveUnavailable> {
        super::nccl_process::all_reduce_mean_packed_across::<F, I, BT>(tensors, group)
    }

    fn all_reduce_mean_many(
        tensors: Vec<FloatTensor<Self>>,
        group: &[DeviceId],
    ) -> Result<Vec<FloatTensor<Self>>, CollectiveUnavailable> {
        all_reduce_mean::<F, I, BT>(tensors, group, false)
    }
}

/// [`AllReduceMean`] of `tensors` over `group`, packed or each on its own.
fn all_reduce_mean<F: FloatElement, I: IntElement, BT: BoolElement>(
    tensors: Vec<FloatTensor<Fused<F, I, BT>>>,
    group: &[DeviceId],
    packed: bool,
) -> Result<Vec<Gradient<F, I, BT>>, CollectiveUnavailable> {
    let group = check_call::<F, I, BT>(&tensors, group)?;
    let op = |desc| AllReduceMean::<Cube<F, I, BT>> {
        desc,
        group,
        packed,
        _b: PhantomData,
    };
    match packed {
        true => register_packed::<F, I, BT, _>("medddpm_nccl_all_reduce_mean_packed", tensors, op),
        false => Ok(register::<F, I, BT, _>(
            "medddpm_nccl_all_reduce_mean",
            tensors,
            None,
            op,
        )),
    }
}
