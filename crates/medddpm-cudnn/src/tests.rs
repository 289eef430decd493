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
