use super::*;

#[test]
fn names_round_trip() {
    for p in Precision::ALL {
        assert_eq!(p.name().parse::<Precision>().unwrap(), p);
    }
    for e in ConvEngine::ALL {
        assert_eq!(e.name().parse::<ConvEngine>().unwrap(), e);
    }
    assert!("fp16".parse::<Precision>().is_err());
    assert_eq!("CUDA".parse::<BackendKind>().unwrap(), BackendKind::Cuda);
    for b in BackendKind::ALL {
        assert_eq!(b.name().parse::<BackendKind>().unwrap(), b);
    }
}

/// What `--backend cpu` alone asks for (the command line's switches are parsed in the binary:
/// its `compute_args` tests run the same checks through clap).
#[test]
fn switches_win_over_the_experiment_file() {
    let file = ComputeConfig {
        precision: Some(Precision::Bf16),
        layout: Some(Layout::Ndhwc),
        conv_engine: Some(ConvEngine::Cubecl),
        norm_engine: Some(NormEngine::Ops),
    };
    let cpu = ComputeRequest {
        backend: BackendKind::Cpu,
        ..Default::default()
    };
    let s = cpu.settings_with(&file);
    assert_eq!(
        (s.precision, s.layout, s.conv_engine, s.norm_engine),
        (
            Precision::Bf16,
            Layout::Ndhwc,
            ConvEngine::Cubecl,
            NormEngine::Ops
        )
    );
    let request = ComputeRequest {
        layout: Some(Layout::Ncdhw),
        conv_engine: Some(ConvEngine::Auto),
        ..cpu
    };
    let s = request.settings_with(&file);
    assert_eq!((s.layout, s.conv_engine), (Layout::Ncdhw, ConvEngine::Auto));
    let s = request.settings();
    assert_eq!(s.precision, Precision::Fp32);
}

#[test]
fn default_precision_is_tf32_only_on_cuda() {
    assert_eq!(default_precision(BackendKind::Cuda), Precision::Tf32);
    assert_eq!(default_precision(BackendKind::Cpu), Precision::Fp32);
    assert_eq!(default_precision(BackendKind::Wgpu), Precision::Fp32);
}

#[test]
fn cpu_refuses_tf32_with_a_reason() {
    struct Never;
    impl BackendTask for Never {
        type Output = ();
        type Error = Error;
        fn run<B: KernelAutodiffBackend>(self, _: B::Device, _: &RunEnv) -> Result<(), Error> {
            unreachable!("must not run")
        }
    }
    let settings = ComputeSettings {
        backend: BackendKind::Cpu,
        precision: Precision::Tf32,
        ..Default::default()
    };
    let err = run_on(&settings, Never).unwrap_err();
    assert!(err.is_unsupported());
    let err = err.to_string();
    assert!(err.contains("tf32") && err.contains("cpu"), "{err}");

    let settings = ComputeSettings {
        backend: BackendKind::Cpu,
        conv_engine: ConvEngine::Cudnn,
        ..Default::default()
    };
    let err = run_on(&settings, Never).unwrap_err();
    assert!(err.is_unsupported());
    assert!(err.to_string().contains("cudnn"), "{err}");
}

/// The refusals read as they did when they were free text.
#[test]
fn refusals_name_the_backend_and_what_to_do() {
    let tf32 = Error::PrecisionUnsupported {
        backend: BackendKind::Cpu,
        precision: Precision::Tf32,
        on_device: false,
        reason:
            "TF32 is a GPU tensor-core format; the CPU computes in IEEE f32 (use --precision fp32)",
    };
    assert_eq!(
        tf32.to_string(),
        "--precision tf32 is not supported on the cpu backend: TF32 is a GPU tensor-core format; the CPU computes in IEEE f32 (use --precision fp32)"
    );
    let bf16 = Error::PrecisionUnsupported {
        backend: BackendKind::Wgpu,
        precision: Precision::Bf16,
        on_device: true,
        reason: "it has no bf16 tensors",
    };
    assert_eq!(
        bf16.to_string(),
        "--precision bf16 is not supported on the wgpu backend with this device: it has no bf16 tensors"
    );
    assert_eq!(
        Error::CudnnNeedsCuda { backend: BackendKind::Wgpu }.to_string(),
        "--conv-engine cudnn needs the cuda backend (cuDNN is NVIDIA's library); wgpu computes convolutions with burn's CubeCL kernels (use --conv-engine auto or cubecl)"
    );
    assert_eq!(
        Error::NotCompiledIn { backend: BackendKind::Wgpu }.to_string(),
        "the wgpu backend is not compiled into this binary: rebuild with `cargo build --release -p medddpm --features wgpu`"
    );
    let no_device = Error::NoDevice {
        backend: BackendKind::Cuda,
        cause: "no driver".into(),
    };
    assert!(no_device.is_unsupported());
    assert!(no_device
        .to_string()
        .starts_with("the cuda backend found no usable GPU device (no driver); check that"));
}
