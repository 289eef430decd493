//! Figures quoted from elsewhere for comparison: the PyTorch reference's, kept in a data file
//! of this crate (`data/pytorch-h100.json`) with the document each figure comes from.

use medddpm_backend::Precision;
use medddpm_unet::Layout;
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::options::Model;
use crate::options::Workload;
use crate::record::{BenchRecord, RecordBackend, RecordStatus, Source};

/// The data file of the H100 figures.
const H100_FILE: &str = "data/pytorch-h100.json";
const H100: &str = include_str!("../data/pytorch-h100.json");

/// A set of quoted figures on one device and workload.
#[derive(Deserialize)]
struct Figures {
    device: String,
    model: Model,
    size: [usize; 3],
    batch: usize,
    message: String,
    memory_source: String,
    figures: Vec<Figure>,
}

/// One configuration's quoted figures.
#[derive(Deserialize)]
struct Figure {
    precision: Precision,
    layout: Layout,
    cudnn_benchmark: bool,
    train_step_ms: f64,
    sample_step_ms: f64,
    peak_memory_gib: f64,
    /// The document the figures are from.
    from: String,
    /// Where in it, when the document still shows them.
    #[serde(default)]
    section: Option<String>,
}

/// The PyTorch reference's figures on the GPU named `gpu` (only `h100` is known), as records
/// marked quoted.
pub fn pytorch_reference(gpu: &str) -> Result<Vec<BenchRecord>> {
    match gpu {
        "h100" => pytorch_reference_h100(),
        other => Err(Error::UnknownReference {
            name: other.to_string(),
        }),
    }
}

/// The PyTorch reference's whole-head 128^3 figures on an H100, as measured by the reference
/// code and recorded in `../shared/docs/peer-baseline.md` (mean of 8 steps, CUDA events).
pub fn pytorch_reference_h100() -> Result<Vec<BenchRecord>> {
    let figures: Figures = serde_json::from_str(H100).map_err(|source| Error::ReferenceData {
        file: H100_FILE,
        source,
    })?;
    let workload = Workload {
        model: figures.model,
        size: figures.size,
        batch: figures.batch,
        activation_checkpointing: Default::default(),
    };
    Ok(figures
        .figures
        .iter()
        .map(|f| {
            let backend = RecordBackend::PyTorch {
                cudnn_benchmark: f.cudnn_benchmark,
            };
            let mut r =
                BenchRecord::new(backend, f.precision, f.layout, workload, RecordStatus::Ok);
            r.device = figures.device.clone();
            r.source = Source::Quoted {
                from: match &f.section {
                    Some(section) => format!("{}: {section}", f.from),
                    None => f.from.clone(),
                },
            };
            r.message = Some(figures.message.clone());
            r.train_step_median_ms = Some(f.train_step_ms);
            r.sample_step_median_ms = Some(f.sample_step_ms);
            r.peak_memory_mib = Some(f.peak_memory_gib * 1024.0);
            r.memory_source = Some(figures.memory_source.clone());
            r
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The figures as they were written in code before they moved to the data file.
    fn in_code() -> Vec<(&'static str, &'static str, f64, f64, f64)> {
        vec![
            ("fp32", "ncdhw", 1236.0, 201.0, 18.9),
            ("tf32", "ncdhw", 249.0, 96.0, 18.9),
            ("tf32", "ncdhw+cudnn.benchmark", 239.0, 94.0, 18.9),
            ("fp32", "ndhwc", 1401.0, 273.0, 21.8),
            ("tf32", "ndhwc", 366.0, 145.0, 21.3),
        ]
    }

    #[test]
    fn the_data_file_parses_and_gives_the_figures_quoted_before() {
        let records = pytorch_reference_h100().unwrap();
        assert_eq!(records.len(), in_code().len());
        for (r, (precision, layout, train, sample, mem_gib)) in records.iter().zip(in_code()) {
            assert_eq!(r.backend.to_string(), "pytorch");
            assert_eq!(r.device, "NVIDIA H100 80GB HBM3 (peer-baseline.md)");
            assert_eq!(r.precision.name(), precision);
            assert_eq!(r.layout_label(), layout);
            assert_eq!(r.model, Model::WholeHead);
            assert_eq!((r.size, r.batch), ([128; 3], 1));
            assert_eq!(r.status, RecordStatus::Ok);
            assert_eq!(
                r.message.as_deref(),
                Some("measured by the PyTorch reference (peer-baseline.md), mean of 8 steps")
            );
            assert_eq!(r.train_step_median_ms, Some(train));
            assert_eq!(r.sample_step_median_ms, Some(sample));
            assert_eq!(r.peak_memory_mib, Some(mem_gib * 1024.0));
            assert_eq!(
                r.memory_source.as_deref(),
                Some("torch.cuda.max_memory_allocated")
            );
            assert!(
                matches!(&r.source, Source::Quoted { from } if from.starts_with("../shared/docs/peer-baseline.md")),
                "{:?}",
                r.source
            );
            assert!(r.is_quoted() && r.timings_verified());
        }
        assert!(matches!(
            pytorch_reference("a100"),
            Err(Error::UnknownReference { .. })
        ));
    }
}
