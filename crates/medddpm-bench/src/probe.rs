//! The agreement probe: the benchmarked network with fixed random weights, on a fixed small
//! input, evaluated in float64 on the CPU and under the configuration being measured.

use burn::backend::Flex;
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Distribution, FloatDType, Tensor, TensorData};
use medddpm_unet::{
    cast_compute_params, load_weight_values, randomize_weights, weight_values, Layout, UNetConfig,
};
use serde::{Deserialize, Serialize};

/// Timestep the probe evaluates the network at.
pub const PROBE_TIMESTEP: usize = 137;

/// The probe's weights, input and float64 reference output.
pub struct Probe {
    /// Side of the cubic probe volume.
    pub size: usize,
    weights: Vec<TensorData>,
    input: TensorData,
    reference: Vec<f64>,
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
    /// Builds the probe for `unet` (seeded weights and input) and its float64 reference, on the
    /// CPU. The volume is the smallest the network accepts (2^(levels-1) per side).
    pub fn new(unet: &UNetConfig, seed: u64) -> anyhow::Result<Self> {
        let device = Default::default();
        Flex::seed(&device, seed);
        let model = randomize_weights(unet.init::<Flex>(&device)?);
        let size = unet.size_divisor();
        let x = Tensor::<Flex, 5>::random(
            [1, unet.in_channels, size, size, size],
            Distribution::Normal(0.0, 1.0),
            &device,
        );
        let weights = weight_values(&model);
        let reference: Vec<f64> = cast_compute_params(model, DType::F64)
            .forward(x.clone().cast(FloatDType::F64), &[PROBE_TIMESTEP])
            .into_data()
            .to_vec()
            .map_err(|e| anyhow::anyhow!("reading the reference output: {e:?}"))?;
        Ok(Self {
            size,
            weights,
            input: x.into_data(),
            reference,
        })
    }

    /// Evaluates the probe on backend `B` in `compute` dtype and `layout`, and compares.
    pub fn run<B: Backend>(
        &self,
        unet: &UNetConfig,
        compute: DType,
        layout: Layout,
        tolerance: f64,
        device: &B::Device,
    ) -> anyhow::Result<ProbeResult> {
        let model = load_weight_values(unet.init::<B>(device)?, self.weights.clone());
        let model = cast_compute_params(model, compute).with_layout(layout);
        let x = Tensor::<B, 5>::from_data(self.input.clone(), device);
        let out: Vec<f64> = model
            .forward(x, &[PROBE_TIMESTEP])
            .cast(FloatDType::F64)
            .into_data()
            .to_vec()
            .map_err(|e| anyhow::anyhow!("reading the probe output: {e:?}"))?;
        Ok(compare(&out, &self.reference, tolerance))
    }
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
