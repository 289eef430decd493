//! What the replicas of a data-parallel run do together each step: agree that every replica
//! drew its batch, average the gradients (NCCL on CUDA, the host elsewhere) and the losses.
//! A one-device run is a team of one, for which each of these returns its input.

use std::iter::{Peekable, Zip};
use std::vec::IntoIter;

use burn::module::{Module, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, DeviceId};
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Tensor, TensorPrimitive};
use medddpm_kernels::{Collective, CollectiveBackend};
use medddpm_unet::{KernelAutodiffBackend, UNet};

use super::exchange::{Aborted, Exchange};
use super::shard::Shard;
use crate::TrainError;

/// How the errors of replicas that only stopped because another one did begin.
pub(super) const STOPPED_BY_ANOTHER: &str = "stopped because another replica";

/// One replica's view of its team.
pub(super) struct Team<'a> {
    pub shard: Shard,
    exchange: Option<&'a Exchange>,
    collective: Collective,
    /// Every replica's device, in rank order (NCCL's group).
    group: Vec<DeviceId>,
    /// This replica's device, for messages.
    device: String,
}

impl<'a> Team<'a> {
    /// A one-device run.
    pub fn alone(shard: Shard) -> Self {
        Self {
            shard,
            exchange: None,
            collective: Collective::Host,
            group: Vec::new(),
            device: String::new(),
        }
    }

    /// Replica `shard.rank` of a run on the devices `group`.
    pub fn member(
        shard: Shard,
        exchange: &'a Exchange,
        collective: Collective,
        group: Vec<DeviceId>,
        device: String,
    ) -> Self {
        Self {
            shard,
            exchange: Some(exchange),
            collective,
            group,
            device,
        }
    }

    fn error(&self, message: impl Into<String>) -> TrainError {
        TrainError::Replica {
            rank: self.shard.rank,
            device: self.device.clone(),
            message: message.into(),
        }
    }

    fn aborted(&self, _: Aborted) -> TrainError {
        self.error(format!("{STOPPED_BY_ANOTHER} stopped"))
    }

    /// `outcome` once every replica has reached this point without an error: a replica whose
    /// batch failed stops the others here, before any of them enters a collective that would
    /// wait for it forever.
    pub fn ready<T>(&self, outcome: Result<T, TrainError>) -> Result<T, TrainError> {
        let Some(exchange) = self.exchange else {
            return outcome;
        };
        let all = exchange
            .all_gather(self.shard.rank, outcome.is_ok())
            .map_err(|a| self.aborted(a))?;
        let value = outcome?;
        if all.iter().all(|ok| *ok) {
            Ok(value)
        } else {
            Err(self.error(format!("{STOPPED_BY_ANOTHER} failed to draw its batch")))
        }
    }

    /// The mean of every replica's `loss` (each the mean over an equal share of the step).
    pub fn mean_loss(&self, loss: f32) -> Result<f32, TrainError> {
        let Some(exchange) = self.exchange else {
            return Ok(loss);
        };
        let all = exchange
            .all_gather(self.shard.rank, loss)
            .map_err(|a| self.aborted(a))?;
        Ok(all.iter().sum::<f32>() / all.len() as f32)
    }

    /// The mean over the replicas of their gradients, in f32, under the same ids. With NCCL
    /// all of them go to the device in one packed all-reduce (no per-tensor operations on the
    /// host); through the host, as one flat tensor (cast, flattened and concatenated, then
    /// split again: a few operations per tensor). `MEDDDPM_ALL_REDUCE_FLAT=1` sends NCCL the
    /// flat tensor instead of packing, to compare the two.
    pub fn average<B: KernelAutodiffBackend>(
        &self,
        model: &UNet<B>,
        mut grads: GradientsParams,
        device: &B::Device,
    ) -> Result<GradientsParams, TrainError> {
        let Some(exchange) = self.exchange else {
            return Ok(grads);
        };
        if self.collective == Collective::Nccl && !flat_all_reduce() {
            let mut take = Take::<B> {
                grads: &mut grads,
                parts: Vec::new(),
            };
            model.visit(&mut take);
            let (ids, parts): (Vec<ParamId>, Vec<_>) = take.parts.into_iter().unzip();
            let means =
                <B::InnerBackend as CollectiveBackend>::all_reduce_mean_packed(parts, &self.group)
                    .map_err(|e| self.error(format!("NCCL all-reduce: {e}")))?;
            let mut give = Give::<B> {
                grads: &mut grads,
                parts: ids.into_iter().zip(means).peekable(),
            };
            model.visit(&mut give);
            return Ok(grads);
        }
        let mut flatten = Flatten::<B> {
            grads: &mut grads,
            parts: Vec::new(),
            shapes: Vec::new(),
        };
        model.visit(&mut flatten);
        let Flatten { parts, shapes, .. } = flatten;
        if parts.is_empty() {
            return Ok(grads);
        }
        let flat = Tensor::cat(parts, 0);
        let mean = if self.collective == Collective::Nccl {
            let prim = flat.into_primitive().tensor();
            let out = <B::InnerBackend as CollectiveBackend>::all_reduce_mean(prim, &self.group)
                .map_err(|e| self.error(format!("NCCL all-reduce: {e}")))?;
            Tensor::from_primitive(TensorPrimitive::Float(out))
        } else {
            let all = exchange
                .all_gather(self.shard.rank, flat)
                .map_err(|a| self.aborted(a))?;
            let world = all.len();
            let mut sum: Option<Tensor<B::InnerBackend, 1>> = None;
            for t in all {
                let t = t.to_device(device);
                sum = Some(match sum {
                    None => t,
                    Some(s) => s + t,
                });
            }
            sum.expect("a team has members").div_scalar(world as f32)
        };
        let mut unflatten = Unflatten::<B> {
            grads: &mut grads,
            flat: mean,
            offset: 0,
            shapes: shapes.into_iter().peekable(),
        };
        model.visit(&mut unflatten);
        Ok(grads)
    }
}

/// `MEDDDPM_ALL_REDUCE_FLAT=1`: NCCL averages one flat tensor built with tensor operations
/// (the packing before 2026-11-26), for comparing the two on a GPU.
fn flat_all_reduce() -> bool {
    static FLAT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FLAT.get_or_init(|| std::env::var("MEDDDPM_ALL_REDUCE_FLAT").is_ok_and(|v| v == "1"))
}

/// Takes every gradient out of `grads` as it is, in the module's parameter order.
struct Take<'g, B: KernelAutodiffBackend> {
    grads: &'g mut GradientsParams,
    parts: Vec<(ParamId, FloatTensor<B::InnerBackend>)>,
}

impl<B: KernelAutodiffBackend> ModuleVisitor<B> for Take<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if let Some(g) = self.grads.remove::<B::InnerBackend, D>(param.id) {
            self.parts.push((param.id, g.into_primitive().tensor()));
        }
    }
}

/// A gradient as the inner backend's tensor, whatever its rank.
type Gradient<B> = FloatTensor<<B as AutodiffBackend>::InnerBackend>;

/// Puts the averaged gradients back under their ids, in the order [`Take`] took them.
struct Give<'g, B: KernelAutodiffBackend> {
    grads: &'g mut GradientsParams,
    parts: Peekable<Zip<IntoIter<ParamId>, IntoIter<Gradient<B>>>>,
}

impl<B: KernelAutodiffBackend> ModuleVisitor<B> for Give<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if self.parts.peek().map(|(id, _)| *id) != Some(param.id) {
            return;
        }
        let (id, mean) = self.parts.next().expect("peeked");
        let mean = Tensor::<B::InnerBackend, D>::from_primitive(TensorPrimitive::Float(mean));
        self.grads.register(id, mean);
    }
}

/// Takes every gradient out of `grads` as a flat tensor, in the module's parameter order.
struct Flatten<'g, B: KernelAutodiffBackend> {
    grads: &'g mut GradientsParams,
    parts: Vec<Tensor<B::InnerBackend, 1>>,
    /// (id, dims) of each part.
    shapes: Vec<(ParamId, Vec<usize>)>,
}

impl<B: KernelAutodiffBackend> ModuleVisitor<B> for Flatten<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if let Some(g) = self.grads.remove::<B::InnerBackend, D>(param.id) {
            // Averaged in f32 (several replicas already sum in f32; a group of one may still
            // hold a bf16 forward pass's gradients).
            let g = if g.dtype() == DType::F32 {
                g
            } else {
                g.cast(DType::F32)
            };
            let dims = g.dims().to_vec();
            let n = dims.iter().product::<usize>();
            self.parts.push(g.reshape([n]));
            self.shapes.push((param.id, dims));
        }
    }
}

/// Puts the averaged parts back under their ids, in the order [`Flatten`] took them.
struct Unflatten<'g, B: KernelAutodiffBackend> {
    grads: &'g mut GradientsParams,
    flat: Tensor<B::InnerBackend, 1>,
    offset: usize,
    shapes: std::iter::Peekable<std::vec::IntoIter<(ParamId, Vec<usize>)>>,
}

impl<B: KernelAutodiffBackend> ModuleVisitor<B> for Unflatten<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        // The same walk as `Flatten`'s: the next part is this parameter's if it had a gradient.
        if self.shapes.peek().map(|(id, _)| *id) != Some(param.id) {
            return;
        }
        let (id, dims) = self.shapes.next().expect("peeked");
        let n = dims.iter().product::<usize>();
        let part = self.flat.clone().narrow(0, self.offset, n);
        self.offset += n;
        let dims: [usize; D] = dims.try_into().expect("a parameter keeps its rank");
        self.grads.register(id, part.reshape(dims));
    }
}
