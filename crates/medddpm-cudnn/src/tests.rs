//! The parts of the engine that need no GPU: how devices share algorithm choices and plans.

use std::sync::Arc;

use super::algorithms::{AlgoTable, Choice};
use super::devices::table_for;
use super::library::GpuModel;

fn model(name: &str) -> GpuModel {
    GpuModel {
        name: name.to_string(),
        capability: (9, 0),
    }
}

fn choice(algo: u32) -> Choice {
    Choice {
        algo,
        workspace: 1 << 20,
        ms: 0.5,
    }
}

/// A fresh folder under the system's temporary one.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("medddpm-cudnn-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_first_choice_of_a_shape_stands_and_is_kept_in_the_file() {
    let dir = scratch("first");
    let file = dir.join("cudnn-algorithms.json");
    let table = AlgoTable::open(model("NVIDIA H100"), Some(file.clone()));
    assert_eq!((table.len(), table.get("fwd").is_none()), (0, true));
    assert_eq!(table.insert("fwd", choice(1)).algo, 1);
    // A second device that searched the same shape meanwhile gets the first device's choice.
    assert_eq!(table.insert("fwd", choice(6)).algo, 1);
    let reopened = AlgoTable::open(model("NVIDIA H100"), Some(file));
    assert_eq!(reopened.get("fwd").map(|c| c.algo), Some(1));
    assert_eq!(reopened.len(), 1);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn devices_of_one_model_share_a_table_and_the_file_stays_with_the_first_model() {
    let dir = scratch("models");
    let h100 = table_for(model("H100 (test)"), Some(&dir));
    let second_h100 = table_for(model("H100 (test)"), Some(&dir));
    assert!(Arc::ptr_eq(&h100, &second_h100));
    assert_eq!(h100.file, Some(dir.join("cudnn-algorithms.json")));
    let a100 = table_for(model("A100 (test)"), Some(&dir));
    assert!(!Arc::ptr_eq(&h100, &a100));
    assert_eq!(a100.file, None);
    h100.insert("fwd", choice(2));
    assert_eq!((second_h100.len(), a100.len()), (1, 0));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_shape_is_searched_once_and_its_plan_kept_beside_the_algorithms() {
    use super::graph::PlanChoice;
    let dir = scratch("plans");
    let table = AlgoTable::open(
        model("NVIDIA H100"),
        Some(dir.join("cudnn-algorithms.json")),
    );
    assert_eq!(table.plans.file, Some(dir.join("cudnn-plans.json")));
    // The first call of a shape is told to search it; the calls meanwhile stay legacy.
    assert_eq!(table.plans.claim("fwd"), None);
    assert_eq!(table.plans.claim("fwd"), Some(None));
    let plan = PlanChoice {
        engine: 22,
        knobs: vec![(1, 4), (3, 0)],
        workspace: 4096,
        ms: 0.25,
        proposed_ms: Some(0.5),
    };
    table.plans.settle("fwd", Some(plan.clone()));
    assert_eq!(table.plans.claim("fwd"), Some(Some(plan.clone())));
    // A shape without a usable plan is not written: a later run searches it again.
    assert_eq!(table.plans.claim("bwd-data"), None);
    table.plans.settle("bwd-data", None);
    let reopened = AlgoTable::open(
        model("NVIDIA H100"),
        Some(dir.join("cudnn-algorithms.json")),
    );
    assert_eq!(reopened.plans.claim("fwd"), Some(Some(plan)));
    assert_eq!(reopened.plans.claim("bwd-data"), None);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn an_engine_error_reads_as_where_then_what_then_the_status() {
    use crate::error::{check, EngineError};
    use cudarc::cudnn::sys::cudnnStatus_t;
    assert!(check(cudnnStatus_t::CUDNN_STATUS_SUCCESS, "forward").is_ok());
    let refused = check(cudnnStatus_t::CUDNN_STATUS_BAD_PARAM, "forward")
        .unwrap_err()
        .context("fwd 512->256 8^3");
    assert_eq!(
        refused.to_string(),
        "fwd 512->256 8^3: forward: CUDNN_STATUS_BAD_PARAM"
    );
    let cublas = EngineError::Cublas {
        what: "cublasCreate",
        status: 1,
    };
    assert_eq!(
        cublas.context("cuBLAS on CUDA device 1").to_string(),
        "cuBLAS on CUDA device 1: cublasCreate failed with cuBLAS status 1"
    );
}

#[test]
fn tf32_plans_keep_f32_inputs_and_sums_and_fp32_plans_keep_off_tensor_cores() {
    use super::graph::allowed;
    use crate::compute::Precision;
    use cudarc::cudnn::sys::cudnnBackendNumericalNote_t as N;
    let notes = |n: &[N]| n.iter().map(|n| *n as u32).collect::<Vec<_>>();
    let tensor_cores = notes(&[N::CUDNN_NUMERICAL_NOTE_TENSOR_CORE]);
    let down_convert = notes(&[
        N::CUDNN_NUMERICAL_NOTE_TENSOR_CORE,
        N::CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS,
    ]);
    let reduced = notes(&[N::CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION]);
    let nondeterministic = notes(&[N::CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC]);
    assert!(allowed(Precision::Tf32, Some(&tensor_cores)));
    assert!(allowed(Precision::Tf32, Some(&[])));
    assert!(!allowed(Precision::Tf32, Some(&down_convert)));
    assert!(!allowed(Precision::Tf32, Some(&reduced)));
    assert!(!allowed(Precision::Fp32, Some(&tensor_cores)));
    assert!(allowed(Precision::Fp32, Some(&nondeterministic)));
    assert!(allowed(Precision::Bf16, Some(&down_convert)));
    // Notes this cuDNN did not give: only 16-bit precisions take the engine.
    assert!(allowed(Precision::Bf16, None));
    assert!(allowed(Precision::F16, None));
    assert!(!allowed(Precision::Tf32, None));
    assert!(!allowed(Precision::Fp32, None));
}

#[test]
fn knob_variants_change_one_knob_at_a_time_within_its_range() {
    use super::graph::{knob_variants, KnobRange};
    let range = |ty, min, max, stride| KnobRange {
        ty,
        min,
        max,
        stride,
    };
    // Split-K 1..=4 and a tile knob 0..=2; the configuration has split-K 1, tile 2.
    let ranges = [range(0, 1, 4, 1), range(2, 0, 2, 1)];
    let variants = knob_variants(&[(0, 1), (2, 2)], &ranges, 32);
    assert_eq!(
        variants,
        vec![
            vec![(0, 2), (2, 2)],
            vec![(0, 3), (2, 2)],
            vec![(0, 4), (2, 2)],
            vec![(0, 1), (2, 0)],
            vec![(0, 1), (2, 1)],
        ]
    );
    // A long range is tried at its powers of two (on its stride's grid); the limit holds.
    let wide = [range(0, 0, 1000, 2)];
    let values: Vec<i64> = knob_variants(&[(0, 0)], &wide, 32)
        .into_iter()
        .map(|k| k[0].1)
        .collect();
    assert_eq!(values, vec![2, 4, 8, 16, 32, 64, 128, 256, 512]);
    assert_eq!(knob_variants(&[(0, 0)], &wide, 3).len(), 3);
    // A knob the engine does not describe, or an empty range, is left alone.
    assert!(knob_variants(&[(5, 1)], &ranges, 32).is_empty());
    assert!(knob_variants(&[(0, 1)], &[range(0, 3, 1, 1)], 32).is_empty());
}
