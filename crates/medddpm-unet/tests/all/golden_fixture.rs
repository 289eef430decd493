//! The reference's golden fixture: a 32-channel whole-head U-Net checkpoint written by the
//! reference trainer, and the outputs the reference computed from it in float64. Matching them
//! proves the architecture, the checkpoint import, the schedule, the loss, the sampler step and
//! the backward pass at once.

use burn::backend::{Autodiff, Flex};
use burn::tensor::{backend::Backend, Tensor, TensorData};
use medddpm_diffusion::{network_input, noise_loss, CosineSchedule, DdpmSampler, LossType};
use medddpm_unet::{load_reference_checkpoint, UNet, UNetConfig, WeightsEntry};
use safetensors::SafeTensors;

type B = Flex;
type A = Autodiff<Flex>;

const T: usize = 137;

use medddpm_testdata::shared_dir;

/// The fixture's network: `create_model(image_size=64, num_channels=32, num_res_blocks=1,
/// channel_mult="1,1,2,3,4", attention_resolutions="8")`.
pub(crate) fn fixture_config() -> UNetConfig {
    UNetConfig {
        model_channels: 32,
        image_size: 64,
        attention_resolutions: vec![8],
        ..UNetConfig::whole_head()
    }
}

struct Expected {
    bytes: Vec<u8>,
}

impl Expected {
    fn load() -> Self {
        let path = shared_dir().join("fixtures/medddpm_whole_head_c32.expected.safetensors");
        Self {
            bytes: std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        }
    }

    fn get(&self, name: &str) -> (Vec<f32>, Vec<usize>) {
        let st = SafeTensors::deserialize(&self.bytes).unwrap();
        let view = st
            .tensor(name)
            .unwrap_or_else(|e| panic!("fixture lacks {name}: {e}"));
        let data = view
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        (data, view.shape().to_vec())
    }

    fn tensor<BK: Backend, const D: usize>(
        &self,
        name: &str,
        device: &BK::Device,
    ) -> Tensor<BK, D> {
        let (data, shape) = self.get(name);
        Tensor::from_data(TensorData::new(data, shape), device)
    }
}

fn values<BK: Backend, const D: usize>(t: Tensor<BK, D>) -> Vec<f32> {
    t.into_data().convert::<f32>().to_vec::<f32>().unwrap()
}

/// ||ours - ref|| / ||ref|| in f64.
fn rel_l2(ours: &[f32], reference: &[f32]) -> f64 {
    assert_eq!(ours.len(), reference.len(), "length mismatch");
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (a, b) in ours.iter().zip(reference) {
        num += (*a as f64 - *b as f64).powi(2);
        den += (*b as f64).powi(2);
    }
    (num / den.max(f64::MIN_POSITIVE)).sqrt()
}

struct Report {
    failures: Vec<String>,
}

impl Report {
    fn check(&mut self, name: &str, ours: &[f32], reference: &[f32], tolerance: f64) {
        let err = rel_l2(ours, reference);
        let ok = err < tolerance;
        println!(
            "{:<48} rel L2 error {err:.3e} (tolerance {tolerance:.0e}) {}",
            name,
            if ok { "ok" } else { "FAIL" }
        );
        if !ok {
            self.failures
                .push(format!("{name}: {err:.3e} >= {tolerance:.0e}"));
        }
    }
}

fn load_unet<BK: Backend>(device: &BK::Device) -> UNet<BK> {
    let unet = fixture_config().init::<BK>(device).unwrap();
    let path = shared_dir().join("fixtures/medddpm_whole_head_c32.pt");
    let (unet, report) = load_reference_checkpoint(unet, &path, WeightsEntry::Model).unwrap();
    assert_eq!(report.timesteps, Some(250));
    // The stored buffers are f32 roundings of the f64 schedule.
    let schedule_err = report.schedule_max_rel_error.unwrap();
    println!("checkpoint schedule buffers vs ours: max rel error {schedule_err:.2e}");
    assert!(
        schedule_err < 1e-5,
        "checkpoint schedule differs from ours: {schedule_err}"
    );
    unet
}

/// Parameter gradient in the reference's layout (Linear weights are [out, in] there).
fn grad_of(
    unet: &UNet<A>,
    grads: &<A as burn::tensor::backend::AutodiffBackend>::Gradients,
    name: &str,
) -> Vec<f32> {
    let g = |t: Tensor<A, 5>| values(t.grad(grads).expect("parameter has a gradient"));
    match name {
        "input_blocks.0.0.weight" => g(unet.input_blocks[0].conv.as_ref().unwrap().weight.val()),
        "output_blocks.0.0.out_layers.3.weight" => g(unet.output_blocks[0]
            .res
            .as_ref()
            .unwrap()
            .out_layers
            .conv
            .weight
            .val()),
        "out.2.weight" => g(unet.out.conv.weight.val()),
        "middle_block.1.qkv.weight" => {
            values(unet.middle_block.attn.qkv.weight.val().grad(grads).unwrap())
        }
        "time_embed.0.weight" => values(
            unet.time_embed
                .linear_1
                .weight
                .val()
                .grad(grads)
                .unwrap()
                .transpose(),
        ),
        other => panic!("no accessor for {other}"),
    }
}

const GRAD_PARAMS: [&str; 5] = [
    "input_blocks.0.0.weight",
    "time_embed.0.weight",
    "middle_block.1.qkv.weight",
    "output_blocks.0.0.out_layers.3.weight",
    "out.2.weight",
];

#[test]
fn matches_the_reference_golden_fixture() {
    let device = Default::default();
    let fx = Expected::load();
    let mut report = Report {
        failures: Vec::new(),
    };
    let schedule = CosineSchedule::new(250);
    let sampler = DdpmSampler::new(schedule.clone());

    // Schedule.
    let betas: Vec<f32> = schedule.betas.iter().map(|&b| b as f32).collect();
    let abar: Vec<f32> = schedule.alphas_cumprod.iter().map(|&b| b as f32).collect();
    report.check("betas", &betas, &fx.get("betas").0, 1e-4);
    report.check("alphas_cumprod", &abar, &fx.get("alphas_cumprod").0, 1e-4);

    // Forward pass, sampler step and time embedding, without autodiff.
    let unet = load_unet::<B>(&device);
    let x0: Tensor<B, 5> = fx.tensor("x0", &device);
    let cond: Tensor<B, 5> = fx.tensor("cond", &device);
    let noise: Tensor<B, 5> = fx.tensor("noise", &device);
    let x_t = schedule.q_sample(x0, &[T], noise.clone());
    report.check(
        "x_t (q_sample)",
        &values(x_t.clone()),
        &fx.get("x_t").0,
        1e-4,
    );
    let x_t: Tensor<B, 5> = fx.tensor("x_t", &device);

    let emb = unet.time_embedding(&[0, 1, 137, 249], &device);
    report.check(
        "time_embed_0_1_137_249",
        &values(emb),
        &fx.get("time_embed_0_1_137_249").0,
        1e-4,
    );

    let eps = unet.forward(network_input(x_t.clone(), Some(cond.clone())), &[T]);
    report.check("eps", &values(eps.clone()), &fx.get("eps").0, 1e-4);
    let loss = noise_loss(noise.clone(), eps.clone(), LossType::L1);
    report.check("loss", &values(loss), &fx.get("loss").0, 1e-4);
    let loss_l2 = noise_loss(noise.clone(), eps.clone(), LossType::L2);
    report.check("loss_l2", &values(loss_l2), &fx.get("loss_l2").0, 1e-4);

    let z: Tensor<B, 5> = fx.tensor("z", &device);
    let step = sampler.step(eps, T, x_t.clone(), z);
    report.check("p_mean", &values(step.mean), &fx.get("p_mean").0, 1e-4);
    report.check(
        "p_logvar",
        &[step.log_variance as f32],
        &fx.get("p_logvar").0,
        1e-4,
    );
    report.check(
        "x_prev",
        &values(step.prev_sample),
        &fx.get("x_prev").0,
        1e-4,
    );

    let eps_t0 = unet.forward(network_input(x_t.clone(), Some(cond.clone())), &[0]);
    let zeros = x_t.zeros_like();
    let step0 = sampler.step(eps_t0, 0, x_t, zeros);
    report.check(
        "p_mean_t0",
        &values(step0.mean),
        &fx.get("p_mean_t0").0,
        1e-4,
    );
    drop(unet);

    // Backward pass, once per loss.
    let _turn = medddpm_diffusion::autodiff_turn();
    let unet = load_unet::<A>(&device);
    for (loss_type, prefix, tolerance) in [
        (LossType::L2, "grad_l2", 1e-4),
        (LossType::L1, "grad", 2e-2),
    ] {
        let x_t: Tensor<A, 5> = fx.tensor("x_t", &device);
        let cond: Tensor<A, 5> = fx.tensor("cond", &device);
        let noise: Tensor<A, 5> = fx.tensor("noise", &device);
        let eps = unet.forward(network_input(x_t, Some(cond)), &[T]);
        let grads = noise_loss(noise, eps, loss_type).backward();
        for name in GRAD_PARAMS {
            let key = format!("{prefix}.{name}");
            report.check(
                &key,
                &grad_of(&unet, &grads, name),
                &fx.get(&key).0,
                tolerance,
            );
        }
    }

    assert!(
        report.failures.is_empty(),
        "golden fixture mismatches:\n{}",
        report.failures.join("\n")
    );
}
