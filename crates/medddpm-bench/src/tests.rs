use super::*;
use medddpm_backend::{run_on, BackendKind, ComputeSettings, Precision};
use medddpm_unet::Layout;

use crate::child::SingleTask;

fn run(settings: &ComputeSettings, config: &SingleConfig) -> BenchRecord {
    run_on(settings, SingleTask { config, out: None }).unwrap()
}

fn tiny(check_only: bool) -> SingleConfig {
    SingleConfig {
        workload: Workload {
            model: Model::Tiny,
            size: [8, 8, 8],
            batch: 1,
            activation_checkpointing: Default::default(),
        },
        unet: Model::Tiny.config(),
        warmup: 1,
        steps: 2,
        lr: 1e-5,
        breakdown: true,
        check_only,
        seed: 3,
        conv_engine: Default::default(),
        norm_engine: Default::default(),
        probe_cache: None,
        locate: None,
        host_profile: None,
        cuda_graphs: false,
    }
}

#[test]
fn measures_every_precision_and_layout_the_cpu_runs() {
    for precision in [Precision::Fp32, Precision::Bf16] {
        for layout in Layout::ALL {
            let settings = ComputeSettings {
                backend: BackendKind::Cpu,
                precision: Some(precision),
                layout,
                conv_engine: Default::default(),
                norm_engine: Default::default(),
                tune_cache: None,
                show_tuning: false,
                ..Default::default()
            };
            let r = run(&settings, &tiny(false));
            assert_eq!(r.status, RecordStatus::Ok, "{r:?}");
            assert_eq!(
                (r.precision.name(), r.layout.to_string()),
                (precision.name(), layout.to_string())
            );
            assert!(r.train_step_median_ms.unwrap() > 0.0);
            // Enqueueing is part of each step, so its median is at most the step's.
            let issue = r.train_issue_median_ms.unwrap();
            assert!(
                issue > 0.0 && issue <= r.train_step_median_ms.unwrap(),
                "{r:?}"
            );
            assert!(r.sample_step_median_ms.unwrap() > 0.0);
            // Steps enqueued back to back were measured beside the synchronised ones.
            assert!(r.train_back_to_back_ms.unwrap() > 0.0, "{r:?}");
            assert!(r.sample_back_to_back_ms.unwrap() > 0.0, "{r:?}");
            assert!(r.first_train_step_s.unwrap() > 0.0);
            let err = r.agreement_rel_l2.unwrap();
            match precision {
                Precision::Fp32 => assert!(err < 1e-5, "{err}"),
                _ => assert!(err > 1e-4 && err < 1e-1, "{err}"),
            }
            for class in medddpm_unet::OpClass::ALL.map(medddpm_unet::OpClass::name) {
                assert!(r.breakdown_ms[class] > 0.0, "{class}");
            }
            // The training micro-step by phase, the convolution gradients on their own.
            for phase in [
                "forward and loss",
                "backward: convolution data gradients",
                "backward: convolution weight gradients",
                "Adam step",
            ] {
                assert!(
                    r.train_breakdown_ms[phase] > 0.0,
                    "{phase}: {:?}",
                    r.train_breakdown_ms
                );
            }
            assert_eq!(
                r.agreement_reference.as_deref(),
                Some("float64 cpu at 8x8x8")
            );
            assert!(r.peak_memory_mib.unwrap() > 0.0);
        }
    }
}

#[test]
fn more_steps_than_timesteps_is_an_error() {
    // `bench --backends cpu --steps 300 --out <out>` (the binary's tests parse the switches).
    let out = std::env::temp_dir().join(format!("medddpm-steps-{}", std::process::id()));
    let options = BenchOptions {
        backends: vec![BackendKind::Cpu],
        steps: 300,
        out: out.clone(),
        ..Default::default()
    };
    let err = crate::run_bench(options, vec!["unused".into()]).unwrap_err();
    assert!(err.to_string().contains("250 timesteps"), "{err}");
    let _ = std::fs::remove_dir_all(out);
}

#[test]
fn check_only_reports_agreement_without_timings() {
    let settings = ComputeSettings {
        backend: BackendKind::Cpu,
        ..Default::default()
    };
    let r = run(&settings, &tiny(true));
    assert_eq!(r.status, RecordStatus::Ok);
    assert!(r.train_step_median_ms.is_none() && r.breakdown_ms.is_empty());
    assert!(r.agreement_rel_l2.unwrap() < 1e-5);
}

#[test]
fn a_correct_backend_has_no_deviating_operation() {
    let config = tiny(true);
    let probe = crate::probe::Probe::new(&config.unet, config.workload.size, 3, None).unwrap();
    for layout in Layout::ALL {
        let case = crate::probe::ProbeCase {
            unet: &config.unet,
            dtype: burn::tensor::DType::F32,
            compute: medddpm_unet::Compute {
                layout,
                ..Default::default()
            },
            tolerance: 1e-4,
        };
        let located = probe
            .locate_deviation::<burn::backend::Flex>(&case, &Default::default())
            .unwrap();
        assert!(located.ops.len() > 20, "{layout}: {located:?}");
        assert_eq!(located.first_over(), None, "{layout}: {located:?}");
        assert!(located.summary().starts_with("no single operation"));
    }
}

#[test]
fn measures_a_checkpointed_training_step_and_records_the_choice() {
    let settings = ComputeSettings {
        backend: BackendKind::Cpu,
        precision: Some(Precision::Bf16),
        layout: Layout::Ndhwc,
        conv_engine: Default::default(),
        norm_engine: Default::default(),
        tune_cache: None,
        show_tuning: false,
        ..Default::default()
    };
    let mut config = tiny(false);
    config.workload.activation_checkpointing = medddpm_unet::ActivationCheckpointing::Blocks;
    let r = run(&settings, &config);
    assert_eq!(r.status, RecordStatus::Ok, "{r:?}");
    assert!(r.train_step_median_ms.unwrap() > 0.0);
    assert!(r.train_breakdown_ms["backward: convolution weight gradients"] > 0.0);
    // The choice is written (only when not `none`) and read back.
    let text = serde_json::to_string(&r).unwrap();
    assert!(
        text.contains("\"activation_checkpointing\":\"blocks\""),
        "{text}"
    );
    let back: BenchRecord = serde_json::from_str(&text).unwrap();
    assert_eq!(back.activation_checkpointing, r.activation_checkpointing);
    assert_eq!(back.workload(), r.workload());
    let plain = serde_json::to_string(&run(&settings, &tiny(false))).unwrap();
    assert!(!plain.contains("activation_checkpointing"), "{plain}");
}
