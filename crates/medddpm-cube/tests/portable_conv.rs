//! Our portable CubeCL convolutions (`medddpm_cube::conv`) on burn's wgpu backend
//! against burn's own convolution and its data gradient on the CPU (Flex), in f32:
//! `cargo test -p medddpm-cube --features wgpu --test portable_conv` (CI: lavapipe, Mesa's
//! software Vulkan driver). The U-Net's convolutions at small sizes and odd ones (3, 5, 17
//! and 33 channels, kernels 1 to 5 and non-cubic ones, strides 1 to 3, non-cubic volumes),
//! in both layouts, in f32 and, where the device has them, f16 and bf16.
//!
//! Built with `--features test-cuda` the same tests run on burn's CUDA backend instead (where
//! 16-bit operands go through the tensor-core kernels): the GPU machine runs them that way.
#![cfg(any(feature = "wgpu", feature = "test-cuda"))]

mod common;

use burn::backend::Flex;
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Tensor, TensorData, TensorPrimitive};
use common::{case, prim, zeros, Case, Fused as Gpu, GpuBool, GpuRuntime, NARROW_UNEVEN};
use medddpm_cube::conv::{conv3d_data_grad_fused, conv3d_forward_fused, CubeConvError};
use medddpm_ops::agreement::rel_l2;
use medddpm_ops::compute::Layout;
use medddpm_ops::layout::in_layout;
use medddpm_ops::reference::conv as reference;

/// The U-Net's convolutions (input, 3x3x3, downsampling, 1x1x1 skip, output) at 4^3 to 8^3,
/// then odd ones. Together they use every tile the kernels choose (1 to 4, 5 to 16, 17 to 32
/// and more output channels; 1 to 16 input channels per step).
const CASES: [Case; 13] = [
    case(1, 5, 64, [8, 8, 8], 3, 1, 1),
    case(1, 64, 64, [6, 6, 6], 3, 1, 1),
    case(1, 64, 64, [8, 8, 8], 3, 2, 1),
    case(1, 192, 128, [4, 4, 4], 1, 1, 0),
    case(1, 64, 1, [6, 6, 6], 3, 1, 1),
    case(2, 3, 5, [5, 6, 7], 3, 1, 1),
    case(1, 17, 17, [7, 5, 3], 3, 2, 1),
    case(1, 5, 3, [6, 5, 4], 1, 2, 0),
    case(1, 3, 33, [9, 4, 5], 5, 3, 2),
    case(2, 33, 20, [3, 5, 4], 3, 1, 2),
    Case::new(1, 17, 33, [5, 4, 7], [3, 1, 2], [2, 1, 3], [1, 0, 1]),
    // Up to four output channels from a channels-last input (and 64 -> 1 above): the narrow
    // forward kernel, 40 channels as 5 or 10 vectors a tap, 8 as one or two.
    case(2, 40, 4, [5, 6, 7], 3, 2, 1),
    NARROW_UNEVEN,
];

/// Normal values of `shape` (see [`common::normal`]).
fn normal(shape: [usize; 5], std: f64, seed: u64) -> TensorData {
    TensorData::new(common::normal(shape.iter().product(), std, seed), shape)
}

/// `data` rounded to `dtype` and back, on the CPU: the operands both sides see.
fn rounded(data: TensorData, dtype: DType) -> Tensor<Flex, 5> {
    Tensor::<Flex, 5>::from_data(data, &Default::default())
        .cast(dtype)
        .cast(DType::F32)
}

fn on_gpu(t: &Tensor<Flex, 5>, dtype: DType, layout: Layout) -> Tensor<Gpu, 5> {
    let t = Tensor::<Gpu, 5>::from_data(t.to_data(), &Default::default()).cast(dtype);
    in_layout(t, layout)
}

fn to_cpu(t: burn::tensor::ops::FloatTensor<Gpu>) -> Tensor<Flex, 5> {
    let t = Tensor::<Gpu, 5>::from_primitive(TensorPrimitive::Float(t)).cast(DType::F32);
    Tensor::from_data(t.into_data(), &Default::default())
}

/// `[forward, data gradient]` relative L2 errors of one case in `dtype` and `layout`.
fn errors(c: Case, dtype: DType, layout: Layout, seed: u64) -> [f64; 2] {
    let [d, h, w] = c.size;
    let x = rounded(normal([c.batch, c.c_in, d, h, w], 1.0, seed), dtype);
    let fan_in = (c.c_in * c.kernel.iter().product::<usize>()) as f64;
    let k = c.kernel;
    let weight = rounded(
        normal(
            [c.c_out, c.c_in, k[0], k[1], k[2]],
            fan_in.powf(-0.5),
            seed + 1,
        ),
        dtype,
    );
    let spec = c.spec();
    let [od, oh, ow] = c.out_size();
    let dy = rounded(normal([c.batch, c.c_out, od, oh, ow], 1.0, seed + 2), dtype);
    let want_y = reference::forward(x.clone(), weight.clone(), spec);
    let want_dx = reference::data_grad(x.clone(), weight.clone(), dy.clone(), spec);
    let w_gpu = prim(on_gpu(&weight, dtype, Layout::Ncdhw));
    let gpu_spec = c.spec_in(layout);
    let y = conv3d_forward_fused::<GpuRuntime, f32, i32, GpuBool>(
        prim(on_gpu(&x, dtype, layout)),
        w_gpu.clone(),
        &gpu_spec,
    )
    .expect("valid operands");
    let dx = conv3d_data_grad_fused::<GpuRuntime, f32, i32, GpuBool>(
        [c.batch, c.c_in, d, h, w],
        w_gpu,
        prim(on_gpu(&dy, dtype, layout)),
        &gpu_spec,
    )
    .expect("valid operands");
    [rel_l2(to_cpu(y), want_y), rel_l2(to_cpu(dx), want_dx)]
}

/// Every case in both layouts: the worst errors, and the cases over `tolerance`.
fn check_all(dtype: DType, cases: &[Case], tolerance: f64) {
    let mut worst = [0.0f64; 2];
    let mut bad = Vec::new();
    for layout in Layout::ALL {
        for (i, &c) in cases.iter().enumerate() {
            let e = errors(c, dtype, layout, 10 * i as u64);
            for (what, (e, worst)) in ["forward", "data gradient"]
                .iter()
                .zip(e.iter().zip(&mut worst))
            {
                *worst = worst.max(*e);
                if e.is_nan() || *e >= tolerance {
                    bad.push(format!("{dtype:?} {layout} {c:?} {what}: {e:.2e}"));
                }
            }
        }
    }
    println!(
        "{dtype:?}: worst rel. L2 forward {:.2e}, data gradient {:.2e}",
        worst[0], worst[1]
    );
    assert!(bad.is_empty(), "over {tolerance:e}: {bad:#?}");
}

/// f32 against f32: only the order of the sums differs (the reference sums in its own order).
#[test]
fn f32_convolutions_match_burns_on_the_cpu() {
    check_all(DType::F32, &CASES, 1e-5);
}

/// 16-bit operands (both sides see the same rounded values), f32 sums, the result rounded to
/// the dtype's 11 or 8 significant bits: about 3e-4 and 2e-3 relative.
#[test]
fn sixteen_bit_convolutions_match_burns_on_the_cpu() {
    for (dtype, tolerance) in [(DType::F16, 2e-3), (DType::BF16, 1e-2)] {
        if !<Gpu as Backend>::supports_dtype(&Default::default(), dtype) {
            println!("{dtype:?} skipped: the device does not support it");
            continue;
        }
        // Channel counts a multiple of 8 (vector loads and stores on tensor cores), of 4 (20
        // output channels), odd ones (scalar), one to three output channels from odd input
        // channels (16-channel blocks, mostly padding) and one to four from a channels-last
        // input of 8 or more (the narrow kernel).
        let cases = [
            CASES[0], CASES[1], CASES[2], CASES[4], CASES[6], CASES[7], CASES[9], CASES[10],
            CASES[11], CASES[12],
        ];
        check_all(dtype, &cases, tolerance);
    }
}

/// Channels-last results are the permuted view of a contiguous channels-last buffer, and the
/// plain CubeCL entry points give what the fused ones give.
#[test]
fn results_come_back_in_the_layout_asked_for() {
    use burn_cubecl::CubeBackend;
    use medddpm_cube::conv::{conv3d_data_grad, conv3d_forward};
    type Cube = CubeBackend<GpuRuntime, f32, i32, GpuBool>;
    let x = Tensor::<Cube, 5>::from_data(normal([1, 6, 4, 5, 3], 1.0, 3), &Default::default());
    let w = Tensor::<Cube, 5>::from_data(normal([4, 6, 3, 3, 3], 0.1, 4), &Default::default());
    for layout in Layout::ALL {
        let xl = prim(in_layout(x.clone(), layout));
        let spec = case(1, 6, 4, [4, 5, 3], 3, 2, 1).spec_in(layout);
        let y = conv3d_forward(xl, prim(w.clone()), &spec).unwrap();
        let dx = conv3d_data_grad([1, 6, 4, 5, 3], prim(w.clone()), y.clone(), &spec).unwrap();
        assert_eq!(y.meta.shape().to_vec(), vec![1, 4, 2, 3, 2]);
        assert_eq!(dx.meta.shape().to_vec(), vec![1, 6, 4, 5, 3]);
        let channel_stride = |t: &burn_cubecl::tensor::CubeTensor<GpuRuntime>| t.meta.strides()[1];
        match layout {
            Layout::Ncdhw => {
                assert!(y.is_contiguous() && dx.is_contiguous());
            }
            Layout::Ndhwc => {
                assert_eq!((channel_stride(&y), channel_stride(&dx)), (1, 1));
                assert_eq!(y.meta.strides()[4], 4, "[b, d, h, w, c] buffer");
            }
        }
    }
}

#[test]
fn mismatched_operands_are_errors() {
    let spec = |p| case(1, 4, 2, [4; 3], 3, 1, p).spec();
    let forward =
        |x, w, padding| conv3d_forward_fused::<GpuRuntime, f32, i32, GpuBool>(x, w, &spec(padding));
    let w = zeros::<Gpu>([2, 4, 3, 3, 3]);
    let e = forward(zeros::<Gpu>([1, 3, 4, 4, 4]), w.clone(), 1);
    assert!(matches!(e, Err(CubeConvError::Channels { .. })), "{e:?}");
    let dy = zeros::<Gpu>([1, 2, 3, 4, 4]);
    let e = conv3d_data_grad_fused::<GpuRuntime, f32, i32, GpuBool>(
        [1, 4, 4, 4, 4],
        w.clone(),
        dy,
        &spec(1),
    );
    assert!(matches!(e, Err(CubeConvError::GradShape { .. })), "{e:?}");
    let e = forward(zeros::<Gpu>([1, 4, 2, 2, 2]), w, 0);
    assert!(matches!(e, Err(CubeConvError::Window { .. })), "{e:?}");
}
