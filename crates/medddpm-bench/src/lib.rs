//! Timing and memory benchmarks of the Med-DDPM U-Net on burn's backends.
//!
//! [`step_bench`] measures what a researcher pays per network evaluation: the first forward
//! and the first training micro-step (which include kernel compilation and autotuning), then the
//! median of several synchronised forwards (one sampling step's network call) and training
//! micro-steps (forward, L1 loss, backward, Adam update).
#![warn(missing_docs)]

use std::time::Instant;

use burn::module::{AutodiffModule, Module};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Distribution, ElementConversion, Tensor};
use medddpm_diffusion::{training_loss, CosineSchedule, LossType};
use medddpm_unet::UNetConfig;
use serde::Serialize;

/// What to measure.
#[derive(Debug, Clone, Serialize)]
pub struct StepBenchConfig {
    /// The network.
    pub unet: UNetConfig,
    /// Volume size (d, h, w) as the network sees it.
    pub size: [usize; 3],
    /// Batch size.
    pub batch: usize,
    /// Untimed steps after the first one.
    pub warmup: usize,
    /// Timed steps; the median is reported.
    pub steps: usize,
    /// Adam learning rate (the reference's 1e-5).
    pub lr: f64,
}

/// Timings of one [`step_bench`] run, in seconds unless named otherwise.
#[derive(Debug, Clone, Serialize)]
pub struct StepBenchResult {
    /// Backend name.
    pub backend: String,
    /// Device, as burn prints it.
    pub device: String,
    /// The configuration measured.
    pub config: StepBenchConfig,
    /// Trainable parameters.
    pub params: usize,
    /// Seconds to build the model on the device.
    pub init_s: f64,
    /// First forward, including kernel compilation and autotuning.
    pub first_forward_s: f64,
    /// Median synchronised forward (no autodiff), milliseconds.
    pub forward_median_ms: f64,
    /// Every timed forward, milliseconds.
    pub forward_ms: Vec<f64>,
    /// First training micro-step, including compilation and autotuning of the backward kernels.
    pub first_train_step_s: f64,
    /// Median synchronised training micro-step (forward, loss, backward, Adam), milliseconds.
    pub train_step_median_ms: f64,
    /// Every timed training micro-step, milliseconds.
    pub train_step_ms: Vec<f64>,
    /// Loss of the last training micro-step (to show the step computed something finite).
    pub last_loss: f32,
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if v.is_empty() {
        return f64::NAN;
    }
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        0.5 * (v[m - 1] + v[m])
    }
}

fn sync<B: Backend>(device: &B::Device) -> anyhow::Result<()> {
    B::sync(device).map_err(|e| anyhow::anyhow!("device synchronisation failed: {e:?}"))
}

/// Runs the forward and training micro-step benchmark on backend `B`.
///
/// `progress` receives one line per phase, so a caller can show what is happening during the
/// long first steps.
pub fn step_bench<B: AutodiffBackend>(
    backend: &str,
    device: &B::Device,
    config: &StepBenchConfig,
    mut progress: impl FnMut(&str),
) -> anyhow::Result<StepBenchResult> {
    let [d, h, w] = config.size;
    let b = config.batch;
    let image_channels = config.unet.out_channels;
    let cond_channels = config.unet.in_channels - image_channels;
    let schedule = CosineSchedule::new(250);
    B::seed(device, 0);

    progress("building the model");
    let start = Instant::now();
    let mut model = config.unet.init::<B>(device)?;
    sync::<B>(device)?;
    let init_s = start.elapsed().as_secs_f64();
    let params = model.num_params();

    let x0 = Tensor::<B, 5>::random(
        [b, image_channels, d, h, w],
        Distribution::Uniform(-1.0, 1.0),
        device,
    );
    let cond = Tensor::<B, 5>::random(
        [b, cond_channels, d, h, w],
        Distribution::Uniform(-1.0, 1.0),
        device,
    )
    .sign();
    let timesteps: Vec<usize> = (0..b).map(|i| (100 + 37 * i) % 250).collect();
    model.check_input([b, config.unet.in_channels, d, h, w], b)?;

    // Forward only, on the inner backend (what a sampling step runs).
    let inference = model.valid();
    let input = Tensor::<B::InnerBackend, 5>::random(
        [b, config.unet.in_channels, d, h, w],
        Distribution::Normal(0.0, 1.0),
        device,
    );
    progress("first forward (compiles and autotunes kernels)");
    let start = Instant::now();
    let out = inference.forward(input.clone(), &timesteps);
    sync::<B::InnerBackend>(device)?;
    let first_forward_s = start.elapsed().as_secs_f64();
    drop(out);
    progress(&format!(
        "first forward took {first_forward_s:.2} s; timing forwards"
    ));
    let mut forward_ms = Vec::new();
    for i in 0..config.warmup + config.steps {
        let start = Instant::now();
        let out = inference.forward(input.clone(), &timesteps);
        sync::<B::InnerBackend>(device)?;
        if i >= config.warmup {
            forward_ms.push(start.elapsed().as_secs_f64() * 1e3);
        }
        drop(out);
    }
    drop(inference);
    drop(input);
    progress(&format!(
        "forward median {:.2} ms over {} steps",
        median(&forward_ms),
        forward_ms.len()
    ));

    // Training micro-steps: forward, L1 loss, backward, Adam (PyTorch's epsilon).
    let mut optim = AdamConfig::new()
        .with_epsilon(1e-8)
        .init::<B, medddpm_unet::UNet<B>>();
    let mut train_step = |model: medddpm_unet::UNet<B>| -> anyhow::Result<medddpm_unet::UNet<B>> {
        let noise = Tensor::<B, 5>::random(
            [b, image_channels, d, h, w],
            Distribution::Normal(0.0, 1.0),
            device,
        );
        let out = training_loss(
            &model,
            &schedule,
            x0.clone(),
            Some(cond.clone()),
            &timesteps,
            noise,
            LossType::L1,
        );
        let grads = GradientsParams::from_grads(out.loss.backward(), &model);
        let model = optim.step(config.lr, model, grads);
        sync::<B>(device)?;
        Ok(model)
    };
    progress("first training micro-step (compiles and autotunes backward kernels)");
    let start = Instant::now();
    model = train_step(model)?;
    let first_train_step_s = start.elapsed().as_secs_f64();
    progress(&format!(
        "first training micro-step took {first_train_step_s:.2} s; timing training micro-steps"
    ));
    let mut train_step_ms = Vec::new();
    for i in 0..config.warmup + config.steps {
        let start = Instant::now();
        model = train_step(model)?;
        if i >= config.warmup {
            train_step_ms.push(start.elapsed().as_secs_f64() * 1e3);
        }
    }
    progress(&format!(
        "training micro-step median {:.2} ms over {} steps",
        median(&train_step_ms),
        train_step_ms.len()
    ));
    // One more loss evaluation, outside the timings, to report a finite value.
    let noise = Tensor::<B, 5>::random(
        [b, image_channels, d, h, w],
        Distribution::Normal(0.0, 1.0),
        device,
    );
    let last_loss: f32 = training_loss(
        &model.valid(),
        &schedule,
        x0.inner(),
        Some(cond.inner()),
        &timesteps,
        noise.inner(),
        LossType::L1,
    )
    .loss
    .into_scalar()
    .elem::<f32>();
    if !last_loss.is_finite() {
        anyhow::bail!("the training loss is not finite ({last_loss})");
    }

    Ok(StepBenchResult {
        backend: backend.to_string(),
        device: format!("{device:?}"),
        config: config.clone(),
        params,
        init_s,
        first_forward_s,
        forward_median_ms: median(&forward_ms),
        forward_ms,
        first_train_step_s,
        train_step_median_ms: median(&train_step_ms),
        train_step_ms,
        last_loss,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, Flex};

    #[test]
    fn bench_runs_a_tiny_model_on_the_cpu() {
        let unet = UNetConfig {
            model_channels: 32,
            channel_mult: vec![1, 2],
            attention_resolutions: vec![],
            ..UNetConfig::whole_head()
        };
        let config = StepBenchConfig {
            unet,
            size: [8, 8, 8],
            batch: 1,
            warmup: 1,
            steps: 3,
            lr: 1e-5,
        };
        let mut phases = Vec::new();
        let r = step_bench::<Autodiff<Flex>>("cpu", &Default::default(), &config, |p| {
            phases.push(p.to_string())
        })
        .unwrap();
        assert_eq!(r.forward_ms.len(), 3);
        assert_eq!(r.train_step_ms.len(), 3);
        assert!(r.forward_median_ms > 0.0 && r.train_step_median_ms > 0.0);
        assert!(r.last_loss.is_finite() && r.last_loss > 0.0);
        assert_eq!(phases.len(), 7);
        assert!(phases.iter().any(|p| p.starts_with("forward median")));
    }
}
