//! Several conditions sampled in one network call per reverse step, each example's noise drawn
//! from a seed of its own, so that an example's sample does not depend on what else shares its
//! batch: what `medddpm synthesize` samples with.

use std::path::Path;

use burn::tensor::{Distribution, Tensor, TensorData};
use medddpm_diffusion::{Sampler, SamplerConfig, Scheduler};
use medddpm_nifti::Volume;
use medddpm_unet::{GraphStatus, GraphedUNet, KernelBackend};

use super::output::on_mask_grid;
use super::{prepare_volume, PreparedMask, SamplingModel};
use crate::TrainError;

/// A label map ready to condition the network: encoded on the model grid, with the grid its
/// sample is written on.
pub struct Condition {
    mask: PreparedMask,
}

impl Condition {
    /// The label map the network is conditioned on, on the grid its sample is written on (the
    /// mask's own grid): what a synthetic pair's label file holds.
    pub fn labels(&self) -> &Volume {
        self.mask.original.as_ref().unwrap_or(&self.mask.reference)
    }

    /// Condition channels and network grid, `[c, d, h, w]`.
    pub fn dims(&self) -> [usize; 4] {
        self.mask.dims
    }
}

/// Encodes label map `seg` (read or made from `mask_path`, which errors name) for `model`, and
/// checks it fits the network. A model with a brain channel needs the brain label in `seg`
/// already ([`super::brain::ensure_brain_label`]).
pub fn prepare_condition<B: KernelBackend>(
    model: &SamplingModel<B>,
    seg: Volume,
    mask_path: &Path,
) -> Result<Condition, TrainError> {
    let scheme = &model.config.data.label_scheme;
    let mask = prepare_volume(model, seg, mask_path, scheme, None)?;
    Ok(Condition { mask })
}

/// The seed of draw `i` of the example seeded `seed`: draw 0 is its x_T, draw `i + 1` the z
/// of reverse step `i` (SplitMix64 of both, so neighbouring seeds and draws are unrelated).
pub fn draw_seed(seed: u64, i: usize) -> u64 {
    splitmix64(seed ^ splitmix64(i as u64 ^ 0x6a09_e667_f3bc_c908))
}

/// SplitMix64's output function (Steele, Lea and Flood 2014).
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A model, a sampler and the network's (optionally graphed) forward pass, sampling batches.
pub struct BatchSampler<'a, B: KernelBackend> {
    model: &'a SamplingModel<B>,
    sampler: Sampler,
    denoiser: GraphedUNet<'a, B>,
    rescale: Option<(f32, f32)>,
}

impl<'a, B: KernelBackend> BatchSampler<'a, B> {
    /// Samples `model` with the reverse process `config` asks for (following the run's
    /// prediction target), the forward pass replayed from CUDA graphs where `cuda_graphs`, the
    /// output mapped from [-1, 1] to `rescale` where given.
    pub fn new(
        model: &'a SamplingModel<B>,
        config: &SamplerConfig,
        cuda_graphs: bool,
        rescale: Option<(f32, f32)>,
    ) -> Result<Self, TrainError> {
        let sampler = Sampler::new(model.schedule.clone(), config)
            .map_err(|e| TrainError::Config {
                path: None,
                message: e.to_string(),
            })?
            .with_prediction(model.config.diffusion.prediction);
        Ok(Self {
            model,
            sampler,
            denoiser: GraphedUNet::new(&model.unet, cuda_graphs),
            rescale,
        })
    }

    /// Network calls per sample.
    pub fn num_steps(&self) -> usize {
        self.sampler.num_steps()
    }

    /// What the CUDA graphs did so far.
    pub fn graphs(&self) -> GraphStatus {
        self.denoiser.status()
    }

    /// One sample per `(condition, seed)` of `batch`, all in one network call per reverse step;
    /// `progress(steps_done)` after each. Example `n` starts from, and adds, noise drawn from
    /// its own seed ([`draw_seed`]), so its sample is the one it gets alone or in another batch
    /// (up to the float rounding of batched kernels). Returns each sample's values (channels
    /// in file order) on its condition's own grid, rescaled where asked.
    pub fn sample(
        &self,
        batch: &[(&Condition, u64)],
        device: &B::Device,
        mut progress: impl FnMut(usize),
    ) -> Result<Vec<Vec<f32>>, TrainError> {
        let Some((first, _)) = batch.first() else {
            return Ok(Vec::new());
        };
        let [c, d, h, w] = first.dims();
        if let Some((other, _)) = batch.iter().find(|(m, _)| m.dims() != first.dims()) {
            return Err(TrainError::Config {
                path: None,
                message: format!(
                    "a batch mixes condition shapes {:?} and {:?}",
                    first.dims(),
                    other.dims()
                ),
            });
        }
        let mut cond = Vec::with_capacity(batch.len() * c * d * h * w);
        for (m, _) in batch {
            cond.extend_from_slice(&m.mask.cond);
        }
        let cond =
            Tensor::<B, 5>::from_data(TensorData::new(cond, [batch.len(), c, d, h, w]), device);
        let channels = self.model.unet.out_channels();
        // Each example's draw from its own seed, stacked along the batch (one example's as it
        // is: a join of one part would still copy it).
        let draw = |i: usize| {
            let mut parts: Vec<_> = batch
                .iter()
                .map(|(_, seed)| {
                    B::seed(device, draw_seed(*seed, i));
                    let normal = Distribution::Normal(0.0, 1.0);
                    Tensor::<B, 5>::random([1, channels, d, h, w], normal, device)
                })
                .collect();
            match parts.len() {
                1 => parts.remove(0),
                _ => Tensor::cat(parts, 0),
            }
        };
        let serial = medddpm_diffusion::backend_rng();
        let x = self.sampler.sample_from(
            &self.denoiser,
            cond,
            draw(0),
            |i| draw(i + 1),
            |done, _| progress(done),
        );
        drop(serial);
        let values = crate::host::f32_values(x);
        if let Some(message) = medddpm_kernels::device_error() {
            return Err(TrainError::Device {
                during: format!("a batch of {} samples not written", batch.len()),
                message,
            });
        }
        let policy = self.model.config.data.grid_policy;
        values
            .chunks(channels * d * h * w)
            .zip(batch)
            .map(|(v, (m, _))| Ok(on_mask_grid(v.to_vec(), &m.mask, policy, self.rescale)?.0))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draw_seeds_are_pinned_and_distinct() {
        // Pinned: a change here changes every synthetic data set made from a seed.
        assert_eq!(draw_seed(0, 0), 0xc217_ac47_8e5d_0150);
        let mut seen: Vec<u64> = (0..4)
            .flat_map(|s| (0..50).map(move |i| draw_seed(s, i)))
            .collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 200);
    }
}
