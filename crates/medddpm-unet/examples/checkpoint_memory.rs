//! Peak memory of one training forward and backward pass on the CPU, with and without
//! activation checkpointing: the process's peak resident set size (Linux `VmHWM`), so run
//! each choice in its own process.
//!
//! ```text
//! cargo run --release -p medddpm-unet --example checkpoint_memory -- none 64 32
//! cargo run --release -p medddpm-unet --example checkpoint_memory -- blocks 64 32
//! cargo run --release -p medddpm-unet --example checkpoint_memory -- norms 64 32
//! ```
//! Arguments: `none`, `norms` or `blocks`, the cube's side (a multiple of 16), the model width C
//! (whole-head shape otherwise).

use std::time::Instant;

use burn::backend::{Autodiff, Flex};
use burn::module::Module;
use burn::optim::GradientsParams;
use burn::tensor::{Distribution, Tensor};
use medddpm_unet::{randomize_weights, ActivationCheckpointing, UNetConfig};

type A = Autodiff<Flex>;

fn rss_mib(key: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let choice: ActivationCheckpointing = args
        .first()
        .map_or("none", String::as_str)
        .parse()
        .unwrap_or_else(|e| panic!("{e}"));
    let side: usize = args.get(1).map_or(64, |s| s.parse().expect("a side"));
    let width: usize = args.get(2).map_or(32, |s| s.parse().expect("a width"));
    let device = Default::default();
    // The same weights and data in every process.
    <A as burn::tensor::backend::Backend>::seed(&device, 0);
    let config = UNetConfig {
        model_channels: width,
        ..UNetConfig::whole_head()
    };
    let unet = randomize_weights(config.init::<A>(&device).expect("a valid configuration"));
    let x = Tensor::<A, 5>::random(
        [1, 3, side, side, side],
        Distribution::Normal(0.0, 1.0),
        &device,
    );
    let target = Tensor::<A, 5>::random(
        [1, 1, side, side, side],
        Distribution::Normal(0.0, 1.0),
        &device,
    );
    let before = rss_mib("VmRSS:");
    let start = Instant::now();
    let (loss, grads) = match choice {
        ActivationCheckpointing::None | ActivationCheckpointing::Norms => {
            let out = match choice {
                ActivationCheckpointing::Norms => unet.forward_recomputing_norms(x, &[100]),
                _ => unet.try_forward(x, &[100]),
            };
            let loss = (out.expect("a fitting input") - target).abs().mean();
            let value: f32 = loss.clone().into_scalar();
            (value, GradientsParams::from_grads(loss.backward(), &unet))
        }
        ActivationCheckpointing::Blocks => {
            let (out, kept) = unet
                .forward_checkpointed(x, &[100])
                .expect("a fitting input");
            let loss = (out.clone() - target).abs().mean();
            let value: f32 = loss.clone().into_scalar();
            let g = out.grad(&loss.backward()).expect("the output's gradient");
            (value, kept.backward(&unet, g))
        }
    };
    println!(
        "{choice}: {side}^3, C = {width} ({} parameters): loss {loss:.6}, {} gradients, {:.1} s; RSS before {before:.0} MiB, peak {:.0} MiB",
        unet.num_params(),
        grads.len(),
        start.elapsed().as_secs_f64(),
        rss_mib("VmHWM:"),
    );
}
