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
use medddpm_kernels::{Collective, CollectiveBackend, CollectiveUnavailable, ProcessGroup};
use medddpm_unet::{KernelAutodiffBackend, UNet};

use super::exchange::{Aborted, Exchange};
use super::link::ProcessLink;
use super::shard::Shard;
use crate::TrainError;

/// How the errors of replicas that only stopped because another one did begin.
pub(super) const STOPPED_BY_ANOTHER: &str = "stopped because another replica";

/// How the replicas of a team meet.
#[derive(Clone, Copy)]
pub(super) enum Link<'a> {
    /// Threads of one process, on these devices in rank order (NCCL's group).
    Threads(&'a Exchange, &'a [DeviceId]),
    /// A process each: the host's meetings over the loopback connections, and NCCL's
    /// communicator across the processes where the collective is NCCL.
    Processes(&'a ProcessLink, Option<&'a ProcessGroup>),
}

impl Link<'_> {
    /// Every replica's `value` (as bytes through `to` and `from` between processes).
    fn all_gather<T: Clone + Send + 'static>(
        &self,
        rank: usize,
        value: T,
        to: impl FnOnce(T) -> Vec<u8>,
        from: impl Fn(&[u8]) -> T,
    ) -> Result<Vec<T>, Aborted> {
        match self {
            Link::Threads(exchange, _) => exchange.all_gather(rank, value),
            Link::Processes(link, _) => Ok(link
                .all_gather(to(value))?
                .iter()
                .map(|b| from(b))
                .collect()),
        }
    }
}

/// One replica's view of its team.
pub(super) struct Team<'a> {
    pub shard: Shard,
    link: Option<Link<'a>>,
    collective: Collective,
    /// This replica's device, for messages.
    device: String,
}

impl<'a> Team<'a> {
    /// A one-device run.
    pub fn alone(shard: Shard) -> Self {
        Self {
            shard,
            link: None,
            collective: Collective::Host,
            device: String::new(),
        }
    }

    /// Replica `shard.rank` of a run whose replicas meet through `link`.
    pub fn member(shard: Shard, link: Link<'a>, collective: Collective, device: String) -> Self {
        Self {
            shard,
            link: Some(link),
            collective,
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
        let Some(link) = self.link else {
            return outcome;
        };
        let all = link
            .all_gather(
                self.shard.rank,
                outcome.is_ok(),
                |ok| vec![ok as u8],
                |b| b == [1],
            )
            .map_err(|a| self.aborted(a))?;
        let value = outcome?;
        if all.iter().all(|ok| *ok) {
            Ok(value)
        } else {
            Err(self.error(format!("{STOPPED_BY_ANOTHER} failed to draw its batch")))
        }
    }

    /// Whether the run stops after this optimizer step: `stop` is the lead's wish (a signal it
    /// caught), the others pass false; every replica calls this once per applied step, so
    /// they all stop at the same step boundary, after the lead's checkpoint of it.
    pub fn agree_stop(&self, stop: bool) -> Result<bool, TrainError> {
        let Some(link) = self.link else {
            return Ok(stop);
        };
        let all = link
            .all_gather(self.shard.rank, stop, |s| vec![s as u8], |b| b == [1])
            .map_err(|a| self.aborted(a))?;
        Ok(all.iter().any(|s| *s))
    }

    /// The mean of every replica's `loss` (each the mean over an equal share of the step).
    pub fn mean_loss(&self, loss: f32) -> Result<f32, TrainError> {
        let Some(link) = self.link else {
            return Ok(loss);
        };
        let all = link
            .all_gather(
                self.shard.rank,
                loss,
                |l| l.to_le_bytes().to_vec(),
                |b| b.try_into().map_or(f32::NAN, f32::from_le_bytes),
            )
            .map_err(|a| self.aborted(a))?;
        Ok(all.iter().sum::<f32>() / all.len() as f32)
    }

    /// The mean over the replicas of their gradients, in f32, under the same ids. With NCCL
    /// all of them go to the device in one packed all-reduce (no per-tensor operations on the
    /// host); through the host, as one flat tensor (cast, flattened and concatenated, then
    /// split again: a few operations per tensor).
    pub fn average<B: KernelAutodiffBackend>(
        &self,
        model: &UNet<B>,
        mut grads: GradientsParams,
        device: &B::Device,
    ) -> Result<GradientsParams, TrainError> {
        let Some(link) = self.link else {
            return Ok(grads);
        };
        if self.collective == Collective::Nccl {
            return self.average_packed(link, model, grads);
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
        let mean = match link {
            Link::Threads(exchange, _) => mean_in_rank_order(
                exchange
                    .all_gather(self.shard.rank, flat)
                    .map_err(|a| self.aborted(a))?,
                device,
            ),
            Link::Processes(link, _) => mean_in_rank_order(
                host_gather(link, flat, device).map_err(|a| self.aborted(a))?,
                device,
            ),
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

impl Team<'_> {
    /// [`Team::average`] by NCCL, every gradient in one packed all-reduce.
    fn average_packed<B: KernelAutodiffBackend>(
        &self,
        link: Link<'_>,
        model: &UNet<B>,
        mut grads: GradientsParams,
    ) -> Result<GradientsParams, TrainError> {
        let mut take = Take::<B> {
            grads: &mut grads,
            parts: Vec::new(),
        };
        model.visit(&mut take);
        let (ids, parts): (Vec<ParamId>, Vec<_>) = take.parts.into_iter().unzip();
        let means = match link {
            Link::Processes(_, Some(group)) => {
                <B::InnerBackend as CollectiveBackend>::all_reduce_mean_packed_across(parts, group)
            }
            Link::Threads(_, group) => {
                <B::InnerBackend as CollectiveBackend>::all_reduce_mean_packed(parts, group)
            }
            Link::Processes(_, None) => Err(CollectiveUnavailable(
                "no NCCL communicator across the processes".into(),
            )),
        }
        .map_err(|e| self.error(format!("NCCL all-reduce: {e}")))?;
        let mut give = Give::<B> {
            grads: &mut grads,
            parts: ids.into_iter().zip(means).peekable(),
        };
        model.visit(&mut give);
        Ok(grads)
    }
}

/// The mean of every replica's flat gradient, summed on `device` in rank order (the order a
/// device accumulating their micro-batches sums in).
fn mean_in_rank_order<B: burn::tensor::backend::Backend>(
    all: Vec<Tensor<B, 1>>,
    device: &B::Device,
) -> Tensor<B, 1> {
    let world = all.len();
    let mut sum: Option<Tensor<B, 1>> = None;
    for t in all {
        let t = t.to_device(device);
        sum = Some(match sum {
            None => t,
            Some(s) => s + t,
        });
    }
    sum.expect("a team has members").div_scalar(world as f32)
}

/// Every process's flat gradient, through host memory, as tensors on `device`.
fn host_gather<B: burn::tensor::backend::Backend>(
    link: &ProcessLink,
    flat: Tensor<B, 1>,
    device: &B::Device,
) -> Result<Vec<Tensor<B, 1>>, Aborted> {
    let values = crate::host::f32_values(flat);
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let all = link.all_gather(bytes)?;
    Ok(all
        .into_iter()
        .map(|b| {
            let floats: Vec<f32> = b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().expect("four bytes")))
                .collect();
            let n = floats.len();
            Tensor::from_data(burn::tensor::TensorData::new(floats, [n]), device)
        })
        .collect())
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
