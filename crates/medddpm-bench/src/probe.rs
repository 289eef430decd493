//! The agreement probe: the benchmarked network with fixed random weights, on a fixed small
//! input, evaluated in float64 on the CPU and under the configuration being measured.

use std::path::Path;

use burn::backend::Flex;
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Distribution, FloatDType, Tensor, TensorData};
use medddpm_unet::{
    cast_compute_params, load_weight_values, randomize_weights, weight_values, Compute,
    KernelBackend, OpStats, UNetConfig,
};
use serde::{Deserialize, Serialize};

use crate::error::{Error, FileAction, Result};

/// Timestep the probe evaluates the network at.
pub const PROBE_TIMESTEP: usize = 137;

/// Changes whenever the probe's weights or network arithmetic change, so that a cached float64
/// reference from an older build is not reused.
pub const PROBE_VERSION: u32 = 2;

/// Names the probe of `unet` at `size` with `seed` in cache file names.
pub fn probe_key(unet: &UNetConfig, size: [usize; 3], seed: u64) -> Result<String> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(unet)?.hash(&mut hasher);
    (size, seed, PROBE_TIMESTEP, PROBE_VERSION).hash(&mut hasher);
    Ok(format!("{:016x}", hasher.finish()))
}

/// Reads a little-endian f64 file.
pub fn read_f64(path: &Path) -> Result<Vec<f64>> {
    Ok(std::fs::read(path)
        .map_err(Error::io(FileAction::Read, path))?
        .chunks_exact(8)
        .map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes")))
        .collect())
}

/// Writes a little-endian f64 file atomically.
pub fn write_f64(path: &Path, values: &[f64]) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(Error::io(FileAction::CreateDir, dir))?;
    }
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    medddpm_atomic::write(path, &bytes).map_err(Error::io(FileAction::Write, path))
}

/// The probe's network (seeded random weights, the same at every size: they are drawn before
/// the input) and input at `size`, on the CPU.
fn seeded(
    unet: &UNetConfig,
    size: [usize; 3],
    seed: u64,
) -> Result<(medddpm_unet::UNet<Flex>, Tensor<Flex, 5>)> {
    let device = Default::default();
    Flex::seed(&device, seed);
    let model = randomize_weights(unet.init::<Flex>(&device)?);
    let [d, h, w] = size;
    let x = Tensor::<Flex, 5>::random(
        [1, unet.in_channels, d, h, w],
        Distribution::Normal(0.0, 1.0),
        &device,
    );
    Ok((model, x))
}

/// The probe's weights, input and float64 reference output.
pub struct Probe {
    /// Probe volume (the benchmarked size: its kernels are the ones measured, already tuned).
    pub size: [usize; 3],
    weights: Vec<TensorData>,
    input: TensorData,
    reference: Vec<f64>,
    /// Where the float64 reference (and its per-operation statistics) are cached, by file stem.
    cache_stem: Option<std::path::PathBuf>,
}

/// One operation of a located disagreement.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpDeviation {
    /// Operation class and index (`convolution #12`).
    pub op: String,
    /// Output shape under the configuration tested.
    pub dims: Vec<usize>,
    /// Deviation of its output's statistics from the float64 reference's (`OpStats::deviation`).
    pub deviation: f64,
}

/// Every operation's deviation from the float64 reference, in execution order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Located {
    /// Per operation.
    pub ops: Vec<OpDeviation>,
    /// Tolerance of the precision.
    pub tolerance: f64,
}

impl Located {
    /// Index of the first operation whose output deviates by more than the tolerance: the
    /// first wrong one (its inputs, the earlier outputs, were within tolerance).
    pub fn first_over(&self) -> Option<usize> {
        self.ops
            .iter()
            .position(|o| o.deviation.is_nan() || o.deviation > self.tolerance)
    }

    /// One line naming the first operation over the tolerance and what came before it.
    pub fn summary(&self) -> String {
        match self.first_over() {
            None => format!(
                "no single operation deviates by more than {:.0e} (largest {:.2e})",
                self.tolerance,
                self.ops.iter().map(|o| o.deviation).fold(0.0, f64::max)
            ),
            Some(i) => {
                let o = &self.ops[i];
                let before = i
                    .checked_sub(1)
                    .map(|j| {
                        format!(
                            ", previous op {} {:.1e}",
                            self.ops[j].op, self.ops[j].deviation
                        )
                    })
                    .unwrap_or_default();
                format!(
                    "first deviating op: {} (op {} of {}), output {:?}, deviation {:.2e} > {:.0e}{before}",
                    o.op,
                    i + 1,
                    self.ops.len(),
                    o.dims,
                    o.deviation,
                    self.tolerance
                )
            }
        }
    }
}

/// What the probe is evaluated as: the network, the dtype of its convolutions and products, how
/// it computes (layout and convolution engine: the probe checks the engine the run uses), and
/// the precision's tolerance.
pub struct ProbeCase<'a> {
    /// The network.
    pub unet: &'a UNetConfig,
    /// Compute dtype.
    pub dtype: DType,
    /// Activation layout, convolution engine and precision.
    pub compute: Compute,
    /// Largest relative L2 error (and per-operation deviation) that agrees.
    pub tolerance: f64,
}

/// How one configuration did on the probe.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProbeResult {
    /// Relative L2 error of the output against the float64 reference.
    pub rel_l2: f64,
    /// Largest absolute difference.
    pub max_abs: f64,
    /// Tolerance for the precision.
    pub tolerance: f64,
}

impl ProbeResult {
    /// Within tolerance (and finite).
    pub fn agrees(&self) -> bool {
        self.rel_l2.is_finite() && self.rel_l2 <= self.tolerance
    }
}

impl Probe {
    /// Builds the probe for `unet` at `size` (seeded weights and input) and its float64
    /// reference, on the CPU. The reference is the expensive part (a float64 forward of the
    /// whole network): with `cache`, it is kept there as raw little-endian f64 and reused by
    /// every configuration and later runs with the same network, size and seed.
    pub fn new(
        unet: &UNetConfig,
        size: [usize; 3],
        seed: u64,
        cache: Option<&Path>,
    ) -> Result<Self> {
        let (model, x) = seeded(unet, size, seed)?;
        let weights = weight_values(&model);
        let key = format!("reference-{}.f64", probe_key(unet, size, seed)?);
        let cache_stem = cache.map(|dir| dir.join(&key));
        let cached = cache_stem.clone().filter(|p| p.is_file());
        let reference: Vec<f64> = match cached {
            Some(path) => read_f64(&path)?,
            None => {
                let out: Vec<f64> = cast_compute_params(model, DType::F64)
                    .forward(x.clone().cast(FloatDType::F64), &[PROBE_TIMESTEP])
                    .into_data()
                    .to_vec()
                    .map_err(|e| Error::ReadTensor {
                        what: "reference output",
                        cause: format!("{e:?}"),
                    })?;
                if let Some(path) = &cache_stem {
                    write_f64(path, &out)?;
                }
                out
            }
        };
        Ok(Self {
            size,
            weights,
            input: x.into_data(),
            reference,
            cache_stem,
        })
    }

    /// Evaluates the probe on backend `B` as `case` says, and compares.
    pub fn run<B: KernelBackend>(
        &self,
        case: &ProbeCase,
        device: &B::Device,
    ) -> Result<ProbeResult> {
        let (model, x) = self.model_and_input::<B>(case, device)?;
        let out: Vec<f64> = model
            .forward(x, &[PROBE_TIMESTEP])
            .cast(FloatDType::F64)
            .into_data()
            .to_vec()
            .map_err(probe_output_error)?;
        Ok(compare(&out, &self.reference, case.tolerance))
    }
}

impl Probe {
    /// The probe's weights and input at `size` (the same weights at every size: they are drawn
    /// before the input), compared with `reference` (e.g. the strict-FP32 output of the same
    /// backend at this size) instead of a float64 evaluation.
    pub fn against(
        unet: &UNetConfig,
        size: [usize; 3],
        seed: u64,
        reference: Vec<f64>,
    ) -> Result<Self> {
        let (model, x) = seeded(unet, size, seed)?;
        Ok(Self {
            size,
            weights: weight_values(&model),
            input: x.into_data(),
            reference,
            cache_stem: None,
        })
    }

    /// The probe's output on backend `B` as `case` says, in f64.
    pub fn output<B: KernelBackend>(
        &self,
        case: &ProbeCase,
        device: &B::Device,
    ) -> Result<Vec<f64>> {
        let (model, x) = self.model_and_input::<B>(case, device)?;
        model
            .forward(x, &[PROBE_TIMESTEP])
            .cast(FloatDType::F64)
            .into_data()
            .to_vec()
            .map_err(probe_output_error)
    }

    /// Compares an output of this probe with its reference.
    pub fn compare(&self, out: &[f64], tolerance: f64) -> ProbeResult {
        compare(out, &self.reference, tolerance)
    }

    fn model_and_input<B: KernelBackend>(
        &self,
        case: &ProbeCase,
        device: &B::Device,
    ) -> Result<(medddpm_unet::UNet<B>, Tensor<B, 5>)> {
        let model = load_weight_values(case.unet.init::<B>(device)?, self.weights.clone());
        let model = cast_compute_params(model, case.dtype).with_compute(case.compute);
        Ok((model, Tensor::<B, 5>::from_data(self.input.clone(), device)))
    }

    /// Runs the probe again with every operation's output tested, and names the first that is
    /// not finite (for a configuration whose output was NaN or infinite).
    pub fn locate_non_finite<B: KernelBackend>(
        &self,
        case: &ProbeCase,
        device: &B::Device,
    ) -> Result<Option<String>> {
        let (model, x) = self.model_and_input::<B>(case, device)?;
        let profile = std::cell::RefCell::new(medddpm_unet::OpProfile {
            check_finite: true,
            ..Default::default()
        });
        drop(model.forward_profiled(x, &[PROBE_TIMESTEP], &profile));
        Ok(profile.into_inner().first_non_finite)
    }

    /// Runs the probe again recording every operation's output statistics, and compares them
    /// with the float64 reference's, operation by operation (for a configuration whose output
    /// disagreed): the first operation over the tolerance is the wrong one.
    pub fn locate_deviation<B: KernelBackend>(
        &self,
        case: &ProbeCase,
        device: &B::Device,
    ) -> Result<Located> {
        let reference = self.reference_stats(case.unet)?;
        let (model, x) = self.model_and_input::<B>(case, device)?;
        let stats = op_stats(&model, x);
        if stats.len() != reference.len() {
            return Err(Error::OperationCount {
                ran: stats.len(),
                reference: reference.len(),
            });
        }
        let ops = stats
            .iter()
            .zip(&reference)
            .map(|(s, r)| OpDeviation {
                op: s.op.clone(),
                dims: s.dims.clone(),
                deviation: s.deviation(r),
            })
            .collect();
        Ok(Located {
            ops,
            tolerance: case.tolerance,
        })
    }

    /// Per-operation statistics of the float64 reference pass (channels-first, CPU), cached
    /// beside the reference output.
    fn reference_stats(&self, unet: &UNetConfig) -> Result<Vec<OpStats>> {
        let path = self
            .cache_stem
            .as_ref()
            .map(|stem| stem.with_extension("stats.json"));
        if let Some(path) = path.as_ref().filter(|p| p.is_file()) {
            let text = std::fs::read_to_string(path).map_err(Error::io(FileAction::Read, path))?;
            return serde_json::from_str(&text).map_err(|source| Error::Parse {
                path: path.clone(),
                source,
            });
        }
        let device = Default::default();
        let case = ProbeCase {
            unet,
            dtype: DType::F64,
            compute: Compute::default(),
            tolerance: 0.0,
        };
        let (model, x) = self.model_and_input::<Flex>(&case, &device)?;
        let stats = op_stats(&model, x.cast(FloatDType::F64));
        if let Some(path) = path {
            medddpm_atomic::write(&path, &serde_json::to_vec(&stats)?)
                .map_err(Error::io(FileAction::Write, &path))?;
        }
        Ok(stats)
    }
}

/// The error of reading the probe's output back from the device.
fn probe_output_error(e: impl std::fmt::Debug) -> Error {
    Error::ReadTensor {
        what: "probe output",
        cause: format!("{e:?}"),
    }
}

fn op_stats<B: KernelBackend>(model: &medddpm_unet::UNet<B>, x: Tensor<B, 5>) -> Vec<OpStats> {
    let profile = std::cell::RefCell::new(medddpm_unet::OpProfile {
        record_stats: true,
        ..Default::default()
    });
    drop(model.forward_profiled(x, &[PROBE_TIMESTEP], &profile));
    profile.into_inner().stats
}

/// Relative L2 error and largest absolute difference of `out` against `reference`.
pub fn compare(out: &[f64], reference: &[f64], tolerance: f64) -> ProbeResult {
    let mut num = 0.0;
    let mut den = 0.0;
    let mut max_abs: f64 = 0.0;
    for (o, r) in out.iter().zip(reference) {
        num += (o - r) * (o - r);
        den += r * r;
        max_abs = max_abs.max((o - r).abs());
    }
    let rel_l2 = if out.len() != reference.len() {
        f64::INFINITY
    } else {
        (num / den.max(f64::MIN_POSITIVE)).sqrt()
    };
    ProbeResult {
        rel_l2,
        max_abs,
        tolerance,
    }
}
