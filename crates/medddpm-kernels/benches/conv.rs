//! Kernel benchmark: the GPU time of each of the whole-head U-Net's costly convolutions
//! (forward, data gradient, weight gradient; batch 1, bf16 or f16, channels-last, as the
//! trainer runs them) on our portable kernels under several pipeline settings
//! ([`ConvTuning`]), and on cuDNN, on CUDA. Prints a table and writes one JSON object per
//! line.
//!
//! ```text
//! cargo bench -p medddpm-kernels --features test-cuda --bench conv -- \
//!     [--out conv.jsonl] [--iters 5] [--dtype bf16|f16] [--size 128] [--no-cudnn] \
//!     [--only SHAPE-NAME-PART] [--variant NAME=stages=2,k_step=64 ...]
//! ```
//! Without `--variant`, the defaults and each switch flipped on its own. Each figure is the
//! median of `--iters` timed calls (after one untimed call that compiles the kernels and, for
//! cuDNN, picks the algorithm), the device synchronised around each.

use std::io::Write;
use std::time::Instant;

use burn::backend::Cuda;
use burn::tensor::backend::{Backend, BackendTypes};
use burn::tensor::{DType, Distribution, Tensor};
use medddpm_kernels::conv::{conv3d, conv3d_data_grad, conv3d_weight_grad, in_layout};
use medddpm_kernels::cube::conv::{set_conv_tuning, ConvTuning};
use medddpm_kernels::{Compute, Conv3dSpec, ConvEngine, Layout, Precision};

/// One convolution of the network: name, input and output channels, input side, kernel,
/// stride, padding.
struct Shape {
    name: &'static str,
    c_in: usize,
    c_out: usize,
    side: usize,
    kernel: usize,
    stride: usize,
    padding: usize,
}

/// The whole-head U-Net's convolutions that take most of a step at `size`^3 (64 channels at
/// the top two levels, the decoder's concatenated input, the downsampling, the first and
/// last convolutions).
fn shapes(size: usize) -> Vec<Shape> {
    let s = |name, c_in, c_out, side, kernel, stride, padding| Shape {
        name,
        c_in,
        c_out,
        side,
        kernel,
        stride,
        padding,
    };
    vec![
        s("64->64 3^3", 64, 64, size, 3, 1, 1),
        s("128->64 3^3", 128, 64, size, 3, 1, 1),
        s("64->64 3^3 /2", 64, 64, size, 3, 2, 1),
        s("64->64 3^3 half", 64, 64, size / 2, 3, 1, 1),
        s("128->128 3^3 quarter", 128, 128, size / 4, 3, 1, 1),
        s("3->64 3^3", 3, 64, size, 3, 1, 1),
        s("64->1 3^3", 64, 1, size, 3, 1, 1),
    ]
}

struct Options {
    out: Option<String>,
    iters: usize,
    dtype: DType,
    size: usize,
    cudnn: bool,
    only: Option<String>,
    variants: Vec<(String, ConvTuning)>,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        out: None,
        iters: 5,
        dtype: DType::BF16,
        size: 128,
        cudnn: true,
        only: None,
        variants: Vec::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--out" => o.out = Some(value()?),
            "--iters" => o.iters = value()?.parse().map_err(|e| format!("--iters: {e}"))?,
            "--size" => o.size = value()?.parse().map_err(|e| format!("--size: {e}"))?,
            "--dtype" => {
                o.dtype = match value()?.as_str() {
                    "bf16" => DType::BF16,
                    "f16" => DType::F16,
                    other => return Err(format!("--dtype {other}: bf16 or f16")),
                }
            }
            "--no-cudnn" => o.cudnn = false,
            "--only" => o.only = Some(value()?),
            "--variant" => {
                let v = value()?;
                let (name, spec) = v
                    .split_once('=')
                    .ok_or(format!("--variant {v}: NAME=SPEC"))?;
                let t = ConvTuning::parse(spec).map_err(|e| e.to_string())?;
                o.variants.push((name.to_string(), t));
            }
            "--bench" => {}
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if o.variants.is_empty() {
        let d = ConvTuning::default();
        let one = |name: &str, t: ConvTuning| (name.to_string(), t);
        o.variants = vec![
            one("default", d),
            one("stages=2", ConvTuning { stages: 2, ..d }),
            one("k_step=64", ConvTuning { k_step: 64, ..d }),
            one(
                "max_registers=0",
                ConvTuning {
                    max_registers: 0,
                    ..d
                },
            ),
            one(
                "wgrad_stages=1",
                ConvTuning {
                    wgrad_stages: 1,
                    ..d
                },
            ),
            one("wgrad_tn=16", ConvTuning { wgrad_tn: 16, ..d }),
            one(
                "ldmatrix=0",
                ConvTuning {
                    ldmatrix: false,
                    ..d
                },
            ),
            one("rotate=0", ConvTuning { rotate: false, ..d }),
        ];
    }
    Ok(o)
}

type B = Cuda;

/// The median of `iters` timed runs of `f`, in ms, after one untimed run.
fn time(iters: usize, device: &<B as BackendTypes>::Device, mut f: impl FnMut()) -> f64 {
    f();
    B::sync(device).expect("device");
    let mut ms: Vec<f64> = (0..iters.max(1))
        .map(|_| {
            let t = Instant::now();
            f();
            B::sync(device).expect("device");
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    ms[ms.len() / 2]
}

/// `[forward, data gradient, weight gradient]` ms of `s` with `engine`.
fn run(
    s: &Shape,
    o: &Options,
    engine: ConvEngine,
    device: &<B as BackendTypes>::Device,
) -> [f64; 3] {
    let precision = if o.dtype == DType::F16 {
        Precision::F16
    } else {
        Precision::Bf16
    };
    let spec = Conv3dSpec {
        stride: [s.stride; 3],
        padding: [s.padding; 3],
        compute: Compute {
            precision,
            layout: Layout::Ndhwc,
            conv_engine: engine,
            norm_engine: Default::default(),
        },
    };
    let normal = Distribution::Normal(0.0, 1.0);
    let act = |c: usize, side: usize| {
        let t = Tensor::<B, 5>::random([1, c, side, side, side], normal, device).cast(o.dtype);
        in_layout(t, Layout::Ndhwc)
    };
    let x = act(s.c_in, s.side);
    let k = s.kernel;
    let w = Tensor::<B, 5>::random([s.c_out, s.c_in, k, k, k], normal, device).cast(o.dtype);
    let out = spec.output_size([s.side; 3], [k; 3])[0];
    let dy = act(s.c_out, out);
    [
        time(o.iters, device, || {
            let _ = conv3d(x.clone(), w.clone(), None, spec);
        }),
        time(o.iters, device, || {
            let _ = conv3d_data_grad(x.clone(), w.clone(), dy.clone(), spec);
        }),
        time(o.iters, device, || {
            let _ = conv3d_weight_grad(x.clone(), w.clone(), dy.clone(), spec);
        }),
    ]
}

fn main() {
    let o = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("conv bench: {e}");
            std::process::exit(2);
        }
    };
    let device = Default::default();
    let mut cudnn = o.cudnn;
    if cudnn {
        if let Err(why) = medddpm_kernels::cudnn::init(0, None) {
            eprintln!("cuDNN unavailable ({why}): our kernels only");
            cudnn = false;
        }
    }
    // One row per shape and setting: the setting `None` is cuDNN.
    let mut rows: Vec<(&str, String, Option<ConvTuning>, [f64; 3])> = Vec::new();
    let wanted = |s: &Shape| {
        o.only
            .as_ref()
            .is_none_or(|only| s.name.contains(only.as_str()))
    };
    for s in shapes(o.size).into_iter().filter(wanted) {
        if cudnn {
            let ms = run(&s, &o, ConvEngine::Cudnn, &device);
            rows.push((s.name, "cudnn".to_string(), None, ms));
            print_row(rows.last().expect("a row"));
        }
        for (name, t) in &o.variants {
            set_conv_tuning(*t);
            let ms = run(&s, &o, ConvEngine::Cubecl, &device);
            rows.push((s.name, name.clone(), Some(*t), ms));
            print_row(rows.last().expect("a row"));
        }
    }
    let mut totals: Vec<(String, [f64; 3])> = Vec::new();
    for (_, v, _, ms) in &rows {
        match totals.iter_mut().find(|(n, _)| n == v) {
            Some((_, t)) => (0..3).for_each(|i| t[i] += ms[i]),
            None => totals.push((v.clone(), *ms)),
        }
    }
    println!("\nsum over the shapes (ms): forward / data gradient / weight gradient");
    for (v, t) in &totals {
        println!("{v:>24}: {:8.2} {:8.2} {:8.2}", t[0], t[1], t[2]);
    }
    if let Some(path) = &o.out {
        let mut text = String::new();
        for (shape, variant, tuning, ms) in &rows {
            let row = serde_json::json!({
                "shape": shape,
                "variant": variant,
                "tuning": tuning.map(|t| t.to_string()).unwrap_or_default(),
                "dtype": format!("{:?}", o.dtype),
                "size": o.size,
                "forward_ms": ms[0],
                "data_grad_ms": ms[1],
                "weight_grad_ms": ms[2],
            });
            text += &format!("{row}\n");
        }
        let write = std::fs::File::create(path).and_then(|mut f| f.write_all(text.as_bytes()));
        if let Err(e) = write {
            eprintln!("conv bench: cannot write {path}: {e}");
            std::process::exit(1);
        }
    }
}

fn print_row((shape, variant, _, ms): &(&str, String, Option<ConvTuning>, [f64; 3])) {
    println!(
        "{shape:>22} {variant:>24}: forward {:8.3} ms  data grad {:8.3} ms  weight grad {:8.3} ms",
        ms[0], ms[1], ms[2]
    );
}
