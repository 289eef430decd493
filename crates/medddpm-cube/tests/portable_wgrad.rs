//! The portable (CubeCL) weight gradient on wgpu against burn's own `conv3d_weight_backward`
//! on the CPU (the crate's twin, `conv::reference::weight_grad`, computed in f64):
//! `cargo test -p medddpm-cube --features wgpu --test portable_wgrad` (CI runs it on
//! lavapipe, Mesa's software Vulkan driver).
//!
//! Shapes: the U-Net's convolutions (3x3x3 stride 1 and 2 with padding 1, 1x1x1) at small
//! sizes, and odd ones (3, 5 and 17 channels, non-cubic volumes, an uneven kernel, stride and
//! padding, a K far longer than M N so split-K carries it); channels-first and channels-last
//! activations; split-K as planned for the device, unsplit and forced into an uneven split.
//! Tolerances (relative L2 over the whole gradient): f32 1e-4 (sums over K of up to 17,280
//! terms in f32); f16 and bf16 storage 1e-3 and 8e-3, against the twin fed the same rounded
//! inputs, so they measure the f32 accumulation and the output's final rounding.
//!
//! Built with `--features test-cuda` the same tests run on burn's CUDA backend instead (where
//! 16-bit operands go through the tensor-core kernel): the GPU machine runs them that way.
#![cfg(any(feature = "wgpu", feature = "test-cuda"))]

mod common;

use burn::backend::Flex;
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Tensor, TensorData, TensorPrimitive};
use burn_cubecl::CubeBackend;
use common::{
    case, normal, prim, zeros, Case, Fused, GpuBool, GpuDevice, GpuRuntime, NARROW_UNEVEN,
};
use medddpm_cube::conv::wgrad::{
    conv3d_weight_grad, conv3d_weight_grad_fused, conv3d_weight_grad_split, plan, plan_narrow,
    plan_tensor_cores, WgradDevice, WgradError, WgradShape, CUBES_PER_UNIT, MAX_WORKSPACE_BYTES,
};
use medddpm_cube::conv::ConvTuning;
use medddpm_ops::compute::Layout;
use medddpm_ops::layout::in_layout;
use medddpm_ops::reference::conv as reference;

type Gpu = CubeBackend<GpuRuntime, f32, i32, GpuBool>;

/// The U-Net's convolutions at small sizes, then odd ones.
const CASES: [Case; 13] = [
    case(1, 16, 16, [8, 8, 8], 3, 1, 1),
    case(1, 16, 32, [8, 8, 8], 3, 2, 1),
    case(1, 32, 16, [6, 6, 6], 1, 1, 0),
    case(2, 64, 64, [4, 6, 5], 3, 1, 1),
    case(1, 3, 250, [4, 5, 3], 3, 1, 1),
    case(2, 3, 5, [7, 5, 9], 3, 1, 1),
    case(1, 17, 3, [9, 6, 7], 3, 2, 1),
    case(1, 5, 17, [5, 8, 6], 1, 2, 0),
    // K = 17,280 against M N = 15: split-K carries the work.
    case(2, 3, 5, [24, 20, 18], 1, 1, 0),
    Case::new(1, 5, 3, [11, 9, 10], [2, 3, 1], [1, 2, 3], [0, 1, 2]),
    // The last convolution's shape: one output channel (scalar `dy` loads beside vector
    // loads of `x` on tensor cores).
    case(1, 16, 1, [6, 7, 5], 3, 1, 1),
    // Up to four output channels from a channels-last input: the narrow FMA kernel, vectors
    // of channels dealt to 256 units (40 channels: 5 or 10 vectors a tap; 8: one or two).
    case(2, 40, 4, [5, 6, 7], 3, 2, 1),
    NARROW_UNEVEN,
];

/// `values` as a tensor of `dtype` and back to f32: what the kernel reads, for the twin.
fn rounded(values: Vec<f32>, shape: [usize; 5], dtype: DType) -> TensorData {
    let t = Tensor::<Flex, 5>::from_data(TensorData::new(values, shape), &Default::default());
    t.cast(dtype).cast(DType::F32).into_data()
}

/// The twin in f64 on the CPU.
fn expected(c: &Case, x: &TensorData, dy: &TensorData) -> Vec<f64> {
    let cpu = Default::default();
    let x = Tensor::<Flex, 5>::from_data(x.clone(), &cpu).cast(DType::F64);
    let dy = Tensor::<Flex, 5>::from_data(dy.clone(), &cpu).cast(DType::F64);
    let [kd, kh, kw] = c.kernel;
    let w = Tensor::<Flex, 5>::zeros([c.c_out, c.c_in, kd, kh, kw], &cpu).cast(DType::F64);
    let dw = reference::weight_grad(x, w, dy, c.spec());
    dw.into_data().convert::<f64>().to_vec().unwrap()
}

/// `data` on `device` in `dtype` and `layout`'s memory order (logically `[b, c, d, h, w]`).
fn on_gpu<B: Backend>(
    data: &TensorData,
    dtype: DType,
    layout: Layout,
    device: &B::Device,
) -> Tensor<B, 5> {
    in_layout(
        Tensor::<B, 5>::from_data(data.clone(), device).cast(dtype),
        layout,
    )
}

fn rel_l2(got: &[f64], want: &[f64]) -> f64 {
    let num: f64 = got.iter().zip(want).map(|(a, b)| (a - b).powi(2)).sum();
    let den: f64 = want.iter().map(|b| b * b).sum();
    (num / den).sqrt()
}

/// The operands of `c` rounded to `dtype` (`x`, `dy`), and the twin's gradient from them.
fn operands(c: &Case, dtype: DType) -> (TensorData, TensorData, Vec<f64>) {
    let [d, h, w] = c.size;
    let [od, oh, ow] = c.out_size();
    let xs = [c.batch, c.c_in, d, h, w];
    let gs = [c.batch, c.c_out, od, oh, ow];
    let seed = (c.c_in * 131 + c.c_out * 7 + d) as u64;
    let x = rounded(normal(xs.iter().product(), 1.0, seed), xs, dtype);
    let dy = rounded(normal(gs.iter().product(), 1.0, seed + 1), gs, dtype);
    let want = expected(c, &x, &dy);
    (x, dy, want)
}

/// The relative L2 error of gradient `dw` (checked for `c`'s weight shape and `dtype`).
fn error_of<B: Backend>(c: &Case, dw: Tensor<B, 5>, dtype: DType, want: &[f64]) -> f64 {
    assert_eq!(
        dw.dims(),
        [c.c_out, c.c_in, c.kernel[0], c.kernel[1], c.kernel[2]]
    );
    assert_eq!(dw.dtype(), dtype);
    let got: Vec<f64> = dw
        .cast(DType::F32)
        .into_data()
        .convert::<f64>()
        .to_vec()
        .unwrap();
    rel_l2(&got, want)
}

/// The kernel's gradient for `c` (`slices`: forced split-K) against the twin: the relative L2
/// error.
fn error(c: &Case, dtype: DType, layout: Layout, slices: Option<usize>, device: &GpuDevice) -> f64 {
    let (x, dy, want) = operands(c, dtype);
    let xg = prim(on_gpu::<Gpu>(&x, dtype, layout, device));
    let dyg = prim(on_gpu::<Gpu>(&dy, dtype, layout, device));
    let dw = conv3d_weight_grad_split(xg, dyg, c.kernel, &c.spec(), dtype, slices)
        .unwrap_or_else(|e| panic!("{c:?}: {e}"));
    error_of(
        c,
        Tensor::<Gpu, 5>::from_primitive(TensorPrimitive::Float(dw)),
        dtype,
        &want,
    )
}

#[test]
fn f32_matches_the_twin_in_both_layouts() {
    let device = GpuDevice::default();
    let mut worst = 0.0f64;
    for layout in Layout::ALL {
        for (i, c) in CASES.iter().enumerate() {
            let e = error(c, DType::F32, layout, None, &device);
            println!("case {i} {layout} f32: rel. L2 {e:.2e}");
            assert!(e < 1e-4, "case {i} {c:?} {layout}: rel. L2 {e:.2e}");
            worst = worst.max(e);
        }
    }
    println!("f32 worst rel. L2 {worst:.2e}");
}

#[test]
fn split_k_gives_the_same_gradient_unsplit_and_split_unevenly() {
    let device = GpuDevice::default();
    for layout in Layout::ALL {
        for i in [0, 8, 11] {
            for slices in [1, 3, 7] {
                let e = error(&CASES[i], DType::F32, layout, Some(slices), &device);
                println!("case {i} {layout} {slices} slices: rel. L2 {e:.2e}");
                assert!(
                    e < 1e-4,
                    "case {i} {layout} {slices} slices: rel. L2 {e:.2e}"
                );
            }
        }
    }
}

#[test]
fn half_precision_storage_matches_the_twin() {
    let device = GpuDevice::default();
    for (dtype, tolerance) in [(DType::F16, 1e-3), (DType::BF16, 8e-3)] {
        if !Gpu::supports_dtype(&device, dtype) {
            println!("skipped {dtype:?}: this device does not support it");
            continue;
        }
        for layout in Layout::ALL {
            // 0, 1, 3 and 10 have input channels a multiple of 8: channels-last, the
            // tensor-core kernel loads them as vectors; 11 and 12 take the narrow kernel.
            for i in [0, 1, 3, 5, 8, 10, 11, 12] {
                let e = error(&CASES[i], dtype, layout, None, &device);
                println!("case {i} {layout} {dtype:?}: rel. L2 {e:.2e}");
                assert!(
                    e < tolerance,
                    "case {i} {layout} {dtype:?}: rel. L2 {e:.2e}"
                );
            }
        }
    }
}

#[test]
fn a_mismatched_output_gradient_is_refused() {
    let c = CASES[0];
    let x = zeros::<Gpu>([1, 16, 8, 8, 8]);
    let dy = zeros::<Gpu>([1, 16, 7, 8, 8]);
    let e = conv3d_weight_grad(x, dy, c.kernel, &c.spec(), DType::F32).unwrap_err();
    assert!(matches!(e, WgradError::Shape(_)), "{e}");
}

#[test]
fn the_fusion_operation_matches_the_twin() {
    let device = GpuDevice::default();
    for layout in Layout::ALL {
        for i in [3, 6] {
            let c = &CASES[i];
            let (x, dy, want) = operands(c, DType::F32);
            let x = prim(on_gpu::<Fused>(&x, DType::F32, layout, &device));
            let dy = prim(on_gpu::<Fused>(&dy, DType::F32, layout, &device));
            let [kd, kh, kw] = c.kernel;
            let w = zeros::<Fused>([c.c_out, c.c_in, kd, kh, kw]);
            let dw =
                conv3d_weight_grad_fused::<GpuRuntime, f32, i32, GpuBool>(x, &w, dy, &c.spec())
                    .unwrap_or_else(|e| panic!("{c:?}: {e}"));
            let dw = Tensor::<Fused, 5>::from_primitive(TensorPrimitive::Float(dw));
            let e = error_of(c, dw, DType::F32, &want);
            println!("case {i} {layout} fused: rel. L2 {e:.2e}");
            assert!(e < 1e-4, "case {i} {layout} fused: rel. L2 {e:.2e}");
        }
    }
}

#[test]
fn a_weight_of_another_shape_is_refused_when_registered() {
    let c = CASES[0];
    let x = zeros::<Fused>([1, 16, 8, 8, 8]);
    let dy = zeros::<Fused>([1, 16, 8, 8, 8]);
    let w = zeros::<Fused>([16, 15, 3, 3, 3]);
    let e = conv3d_weight_grad_fused::<GpuRuntime, f32, i32, GpuBool>(x, &w, dy, &c.spec())
        .unwrap_err();
    assert!(matches!(e, WgradError::Weight { .. }), "{e}");
}

const H100: WgradDevice = WgradDevice {
    units: Some(132),
    shared_bytes: 48 << 10,
};

/// The U-Net's top level: 64 -> 64 channels, 3x3x3, one 128^3 volume.
const TOP_LEVEL: WgradShape = WgradShape {
    m: 64,
    n: 64 * 27,
    k: 128 * 128 * 128,
};

#[test]
fn split_k_fills_the_device_at_the_unets_top_level() {
    // 14 tiles of 64 x 128 without the split.
    let shape = TOP_LEVEL;
    let p = plan(shape, H100, None);
    let (tiles_n, tiles_m) = p.tiles(shape);
    assert_eq!((p.tm, p.tn, tiles_n * tiles_m), (4, 8, 14));
    assert_eq!(p.slices, 75, "{p:?}");
    assert!(p.slices * p.slice_len >= shape.k && (p.slices - 1) * p.slice_len < shape.k);
    assert!(p.slices * shape.m * shape.n * 4 <= MAX_WORKSPACE_BYTES);
    // Without an SM count (wgpu), 128 compute units are assumed.
    assert_eq!(
        plan(
            shape,
            WgradDevice {
                units: None,
                ..H100
            },
            None
        )
        .slices,
        73
    );
}

/// The split rounds down: the cubes fill whole waves of the device's SMs, and one slice more
/// would pass them (the top level's 76 slices of 14 tiles once left 8 cubes a wave of their
/// own).
#[test]
fn split_k_fills_whole_waves() {
    let places = 132 * CUBES_PER_UNIT;
    let decoder = WgradShape {
        n: 128 * 27,
        ..TOP_LEVEL
    };
    let second = WgradShape {
        k: 64 * 64 * 64,
        ..TOP_LEVEL
    };
    for shape in [TOP_LEVEL, decoder, second] {
        let p = plan(shape, H100, None);
        let (tiles_n, tiles_m) = p.tiles(shape);
        let tiles = tiles_n * tiles_m;
        assert!(tiles * p.slices <= places, "{shape:?}: {p:?}");
        assert!(tiles * (p.slices + 1) > places, "{shape:?}: {p:?}");
    }
}

/// The last convolution (one output channel): one tile of all 1728 columns, K cut into as
/// many slices as the device has cube places (1056 asked; 1049 after rounding the slice
/// length to 16 positions).
#[test]
fn the_narrow_kernel_splits_k_over_every_cube_place() {
    let last = WgradShape { m: 1, ..TOP_LEVEL };
    let p = plan_narrow(last, H100, None, 8, &ConvTuning::default());
    assert_eq!(p.tiles(last), (1, 1), "{p:?}");
    assert_eq!(p.slices, 1049, "{p:?}");
    assert!(p.slices * p.slice_len >= last.k && (p.slices - 1) * p.slice_len < last.k);
}

#[test]
fn short_or_wide_products_are_split_less() {
    // The deepest level: 256 channels at 8^3, K = 512, no slice under 256 positions.
    let deep = WgradShape {
        m: 256,
        n: 256 * 27,
        k: 512,
    };
    assert_eq!(plan(deep, H100, None).slices, 2);
    // 128 channels at 32^3: the workspace cap (64 MiB) bounds the split.
    let wide = WgradShape {
        m: 128,
        n: 128 * 27,
        k: 32 * 32 * 32,
    };
    let p = plan(wide, H100, None);
    assert_eq!(p.slices, 37, "{p:?}");
    assert_eq!(plan(wide, H100, Some(1)).slices, 1);
}

#[test]
fn tiles_shrink_to_the_devices_shared_memory() {
    let shape = WgradShape {
        m: 128,
        n: 3456,
        k: 4096,
    };
    assert_eq!(
        (plan(shape, H100, None).tm, plan(shape, H100, None).tn),
        (8, 8)
    );
    let small = WgradDevice {
        units: Some(8),
        shared_bytes: 16 << 10,
    };
    let p = plan(shape, small, None);
    assert_eq!((p.tm, p.tn), (4, 8));
}

#[test]
fn tensor_core_tiles_widen_and_deepen_where_shared_memory_allows() {
    let top = TOP_LEVEL;
    let deep = ConvTuning {
        wgrad_stages: 2,
        wgrad_tn: 16,
        ..ConvTuning::default()
    };
    let big = WgradDevice {
        units: Some(132),
        shared_bytes: 227 << 10,
    };
    let p = plan_tensor_cores(top, big, None, &deep);
    assert_eq!((p.tm, p.tn, p.stages), (4, 16, 2), "{p:?}");
    assert_eq!(p.tiles(top), (7, 1));
    // Vulkan's 48 KiB hold one stage of 128-column tiles only.
    let p = plan_tensor_cores(top, H100, None, &deep);
    assert_eq!((p.tm, p.tn, p.stages), (4, 8, 1), "{p:?}");
    // 128 output channels keep 128-column tiles.
    let wide = WgradShape { m: 128, ..top };
    assert_eq!(plan_tensor_cores(wide, big, None, &deep).tn, 8);
    // The defaults: the FMA plan's tiles and split, in two stages where they fit.
    let p = plan_tensor_cores(top, big, None, &ConvTuning::default());
    let q = plan(top, big, None);
    assert_eq!((p.tm, p.tn, p.stages, p.slices), (q.tm, q.tn, 2, q.slices));
    let p = plan_tensor_cores(top, H100, None, &ConvTuning::default());
    assert_eq!((p.tm, p.tn, p.stages, p.slices), (q.tm, q.tn, 1, q.slices));
}
