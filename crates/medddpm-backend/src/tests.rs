use super::*;
use medddpm_kernels::{CollectiveUnavailable, Launch};

/// A task that only reads where it runs: what `run_on` decided.
struct ReadEnv<T>(fn(&RunEnv) -> Result<T, Error>);

impl<T> BackendTask for ReadEnv<T> {
    type Output = T;
    type Error = Error;
    fn run<B: KernelAutodiffBackend>(self, _: B::Device, env: &RunEnv) -> Result<T, Error> {
        (self.0)(env)
    }
}

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
        ..Default::default()
    };
    let cpu = ComputeRequest {
        backend: BackendKind::Cpu,
        ..Default::default()
    };
    let s = cpu.settings_with(&file);
    assert_eq!(
        (s.precision, s.layout, s.conv_engine, s.norm_engine),
        (
            Some(Precision::Bf16),
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
    // No precision asked for anywhere: the backend that runs decides (below).
    let s = request.settings();
    assert_eq!(s.precision, None);
}

/// A precision left to the backend is decided by the backend that runs, once it is known:
/// the CPU's is FP32 (so that `auto` falling back to the CPU never inherits CUDA's TF32).
#[test]
fn a_precision_left_to_the_backend_is_the_running_backends_default() {
    let settings = ComputeSettings {
        backend: BackendKind::Cpu,
        ..Default::default()
    };
    assert_eq!(settings.precision, None);
    assert_eq!(
        run_on(&settings, ReadEnv(|env| Ok(env.precision))).unwrap(),
        Precision::Fp32
    );
}

#[test]
fn default_precision_is_tf32_only_on_cuda() {
    assert_eq!(default_precision(BackendKind::Cuda), Precision::Tf32);
    assert_eq!(default_precision(BackendKind::Cpu), Precision::Fp32);
    assert_eq!(default_precision(BackendKind::Wgpu), Precision::Fp32);
}

#[test]
fn cpu_refuses_tf32_with_a_reason() {
    let never = || ReadEnv::<()>(|_| unreachable!("must not run"));
    let settings = ComputeSettings {
        backend: BackendKind::Cpu,
        precision: Some(Precision::Tf32),
        ..Default::default()
    };
    let err = run_on(&settings, never()).unwrap_err();
    assert!(err.is_unsupported());
    let err = err.to_string();
    assert!(err.contains("tf32") && err.contains("cpu"), "{err}");

    let settings = ComputeSettings {
        backend: BackendKind::Cpu,
        conv_engine: ConvEngine::Cudnn,
        ..Default::default()
    };
    let err = run_on(&settings, never()).unwrap_err();
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
        "--conv-engine cudnn needs the cuda backend (cuDNN is NVIDIA's library); wgpu computes convolutions with CubeCL kernels, burn's or ours (use --conv-engine auto, burn or cubecl)"
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

#[test]
fn devices_and_collective_come_from_the_switches_then_the_file() {
    let file: ComputeConfig =
        serde_json::from_str(r#"{"devices": [1, 2], "collective": "nccl"}"#).unwrap();
    assert_eq!(
        (file.devices.clone(), file.collective),
        (Some(vec![1, 2]), Some(Collective::Nccl))
    );
    let s = ComputeRequest::default().settings();
    assert_eq!((s.devices, s.collective), (vec![0], Collective::Auto));
    let s = ComputeRequest::default().settings_with(&file);
    assert_eq!((s.devices, s.collective), (vec![1, 2], Collective::Nccl));
    let request = ComputeRequest {
        devices: Some(vec![3]),
        collective: Some(Collective::Host),
        ..Default::default()
    };
    let s = request.settings_with(&file);
    assert_eq!((s.devices, s.collective), (vec![3], Collective::Host));
    assert!(serde_json::from_str::<ComputeConfig>(r#"{"collective": "mpi"}"#).is_err());
}

#[test]
fn device_lists_are_checked_before_anything_starts() {
    use crate::devices::{check_count, check_devices};
    assert!(check_devices(BackendKind::Cuda, &[0, 1, 3], Launch::Auto).is_ok());
    assert!(check_devices(BackendKind::Cpu, &[0], Launch::Auto).is_ok());
    assert!(matches!(
        check_devices(BackendKind::Cuda, &[], Launch::Auto),
        Err(Error::NoDevicesListed)
    ));
    let err = check_devices(BackendKind::Cuda, &[0, 1, 0], Launch::Processes).unwrap_err();
    assert!(
        matches!(err, Error::DuplicateDevice { device: 0, .. }),
        "{err}"
    );
    assert!(!err.is_unsupported());
    assert_eq!(
        err.to_string(),
        "--devices 0,1,0 names device 0 twice: each device runs one replica"
    );
    for (backend, devices) in [
        (BackendKind::Cpu, vec![0, 1]),
        (BackendKind::Cpu, vec![1]),
        (BackendKind::Wgpu, vec![0, 1]),
    ] {
        let err = check_devices(backend, &devices, Launch::Auto).unwrap_err();
        assert!(err.is_unsupported(), "{err}");
        assert!(
            err.to_string()
                .contains("multi-device training runs on CUDA")
                && err.to_string().contains(backend.name()),
            "{err}"
        );
    }
    // A process per listed index runs on the CPU too (the multi-process path without a GPU).
    assert!(check_devices(BackendKind::Cpu, &[0, 1], Launch::Processes).is_ok());
    assert!(check_devices(BackendKind::Wgpu, &[0, 1], Launch::Processes).is_err());
    assert!(check_count(BackendKind::Cuda, &[0, 1], 2).is_ok());
    let err = check_count(BackendKind::Cuda, &[0, 2, 1], 2).unwrap_err();
    assert!(err.is_unsupported());
    assert_eq!(
        err.to_string(),
        "there is no cuda device 2: this machine has 2 (numbered from 0; nvidia-smi lists them)"
    );
}

#[test]
fn several_cuda_devices_run_a_process_each_unless_told_otherwise() {
    use crate::devices::resolve_launch;
    use BackendKind::{Cpu, Cuda};
    assert_eq!(resolve_launch(Cuda, Launch::Auto, 2), Launch::Processes);
    assert_eq!(resolve_launch(Cuda, Launch::Threads, 2), Launch::Threads);
    assert_eq!(resolve_launch(Cuda, Launch::Processes, 1), Launch::Threads);
    assert_eq!(resolve_launch(Cpu, Launch::Auto, 2), Launch::Threads);
    assert_eq!(resolve_launch(Cpu, Launch::Processes, 2), Launch::Processes);
    let file: ComputeConfig = serde_json::from_str(r#"{"launch": "threads"}"#).unwrap();
    assert_eq!(file.launch, Some(Launch::Threads));
}

#[test]
fn the_collective_resolves_to_nccl_only_on_cuda_with_several_devices() {
    use crate::devices::resolve_collective;
    let never =
        || -> Result<String, CollectiveUnavailable> { unreachable!("NCCL must not be asked") };
    let loads = || Ok("NCCL 2.21.5".to_string());
    let missing = || {
        Err(CollectiveUnavailable(
            "libnccl.so.2 was not found".to_string(),
        ))
    };
    // One device: nothing to average, unless NCCL is asked for by name (a group of one).
    for requested in [Collective::Auto, Collective::Host] {
        let r = resolve_collective(BackendKind::Cuda, requested, 1, never).unwrap();
        assert_eq!(r, (Collective::Host, None));
    }
    let r = resolve_collective(BackendKind::Cpu, Collective::Nccl, 1, never).unwrap();
    assert_eq!(r, (Collective::Host, None));
    let (c, _) = resolve_collective(BackendKind::Cuda, Collective::Nccl, 1, loads).unwrap();
    assert_eq!(c, Collective::Nccl);
    let (c, line) = resolve_collective(BackendKind::Cuda, Collective::Auto, 2, loads).unwrap();
    assert_eq!(c, Collective::Nccl);
    assert!(line.unwrap().contains("NCCL 2.21.5"));
    let (c, _) = resolve_collective(BackendKind::Cuda, Collective::Nccl, 4, loads).unwrap();
    assert_eq!(c, Collective::Nccl);
    let (c, _) = resolve_collective(BackendKind::Cuda, Collective::Host, 2, never).unwrap();
    assert_eq!(c, Collective::Host);
    // `auto` falls back to the host, saying why; `nccl` asked for by name is refused.
    let (c, line) = resolve_collective(BackendKind::Cuda, Collective::Auto, 2, missing).unwrap();
    assert_eq!(c, Collective::Host);
    assert_eq!(
        line.unwrap(),
        "gradients averaged over 2 devices: through the host (--collective auto: libnccl.so.2 was not found)"
    );
    let err = resolve_collective(BackendKind::Cuda, Collective::Nccl, 2, missing).unwrap_err();
    assert!(err.is_unsupported());
    assert!(
        matches!(&err, Error::Nccl { cause } if cause.0.contains("libnccl")),
        "{err}"
    );
}

#[test]
fn commands_of_one_device_refuse_several() {
    let settings = ComputeSettings {
        devices: vec![1, 0],
        ..Default::default()
    };
    let err = settings.one_device("sample").unwrap_err();
    assert_eq!(
        err.to_string(),
        "medddpm sample runs on one device, not --devices 1,0: only training runs one replica per device (give one index, e.g. --devices 1)"
    );
    let one = ComputeSettings {
        devices: vec![1],
        ..Default::default()
    };
    assert!(one.one_device("sample").is_ok());
}

#[test]
fn the_cpu_refuses_several_devices_and_a_task_learns_its_devices() {
    let devices = || {
        ReadEnv(|env| {
            env.one_device("test")?;
            Ok((env.devices.clone(), env.collective))
        })
    };
    let cpu = ComputeSettings {
        backend: BackendKind::Cpu,
        ..Default::default()
    };
    assert_eq!(
        run_on(&cpu, devices()).unwrap(),
        (vec![0], Collective::Host)
    );
    let two = ComputeSettings {
        devices: vec![0, 1],
        ..cpu.clone()
    };
    let err = run_on(&two, devices()).unwrap_err();
    assert!(matches!(err, Error::DevicesNeedCuda { .. }), "{err}");
    // Where `auto` landed on wgpu (no CUDA GPU), the message says why, not only "adapter".
    let wgpu = Error::DevicesNeedCuda {
        backend: BackendKind::Wgpu,
        devices: vec![0, 1],
    }
    .to_string();
    assert!(
        wgpu.contains("--devices 0,1 needs the cuda backend") && wgpu.contains("no CUDA GPU"),
        "{wgpu}"
    );
    let twice = ComputeSettings {
        devices: vec![0, 0],
        ..cpu
    };
    assert!(matches!(
        run_on(&twice, devices()).unwrap_err(),
        Error::DuplicateDevice { device: 0, .. }
    ));
}
