//! The training run a device count measures: the chosen network on phantom heads of the
//! benchmark's size, in the data layout the network takes (whole-head pairs, or the BraTS
//! layout for the BraTS network's four modalities and four label channels).

use std::path::{Path, PathBuf};

use medddpm_nifti::{DataType, Volume, WriteOptions};
use medddpm_train::data::{DataConfig, DataSource};
use medddpm_train::phantom::generate_phantoms;
use medddpm_train::ExperimentConfig;

use super::ScalingOptions;
use crate::error::Error;
use crate::Model;

/// Phantoms per data set: the runs are short, so a handful suffices.
const PHANTOMS: usize = 4;

/// The experiment for `devices` devices: one micro-batch per device and step, the EMA every
/// 10 steps, one checkpoint at the end.
pub(super) fn experiment(o: &ScalingOptions, devices: usize) -> Result<ExperimentConfig, Error> {
    let w = &o.workload;
    let mut config = ExperimentConfig {
        // The released network whatever the size, as the single-configuration bench runs it.
        model: w.model.config(),
        data: data(o)?,
        ..Default::default()
    };
    let t = &mut config.train;
    t.steps = 1 + o.warmup + o.steps;
    t.save_every = t.steps;
    t.samples_per_checkpoint = 0;
    t.batch_size = w.batch;
    t.grad_accum = devices;
    t.seed = o.seed;
    t.activation_checkpointing = w.activation_checkpointing;
    Ok(config)
}

/// The data set in `o.out`, generated once (reused by every device count and by later runs
/// with the same size and seed).
fn data(o: &ScalingOptions) -> Result<DataConfig, Error> {
    // `size` is the network's (d, h, w); NIfTI files run (i, j, k) = (w, h, d).
    let [d, h, w] = o.workload.size;
    let nifti = [w, h, d];
    let tag = o.workload.size.map(|n| n.to_string()).join("x");
    let phantoms = o.out.join(format!("scaling-phantoms-{tag}"));
    match o.workload.model {
        Model::Brats => {
            let root = o.out.join(format!("scaling-brats-{tag}"));
            brats_layout(&phantoms, &root, nifti, o.seed)?;
            let mut config = DataConfig::new(DataSource::Brats { root });
            config.grid = nifti;
            Ok(config)
        }
        _ => Ok(DataConfig::new(DataSource::Phantom {
            dir: phantoms,
            count: PHANTOMS,
            size: nifti,
            seed: o.seed,
        })),
    }
}

/// The BraTS modalities the data source reads, in its order.
const MODALITIES: [&str; 4] = ["t1", "t1ce", "t2", "flair"];

/// Writes phantom heads in the BraTS layout (`root/{t1,t1ce,t2,flair,seg}/<case>_<m>.nii.gz`):
/// the head is the brain label (4), the tumour the enhancing rim (3) where the phantom is at
/// least as bright as the tumour's mean and the core (1) elsewhere; the four modalities are
/// contrasts of the phantom image (T2 and FLAIR invert the head), background -1. Only the
/// shapes matter to the throughput measured; the contrasts keep the task a plausible one.
fn brats_layout(phantoms: &Path, root: &Path, nifti: [usize; 3], seed: u64) -> Result<(), Error> {
    let set = generate_phantoms(phantoms, PHANTOMS, nifti, seed)
        .map_err(|e| Error::Scaling(format!("phantoms in {}: {e}", phantoms.display())))?;
    for (n, (mask, image)) in set.masks.iter().zip(&set.images).enumerate() {
        let case = format!("phantom_{n:03}");
        let path = |m: &str| root.join(m).join(format!("{case}_{m}.nii.gz"));
        if std::iter::once("seg")
            .chain(MODALITIES)
            .all(|m| path(m).is_file())
            && !set.generated
        {
            continue;
        }
        let read = |p: &PathBuf| {
            Volume::read(p).map_err(|e| Error::Scaling(format!("{}: {e}", p.display())))
        };
        let (mask, image) = (read(mask)?, read(image)?);
        let (seg, modalities) = brats_case(mask.data(), image.data());
        for m in std::iter::once("seg").chain(MODALITIES) {
            let dir = root.join(m);
            std::fs::create_dir_all(&dir)
                .map_err(|e| Error::Scaling(format!("{}: {e}", dir.display())))?;
        }
        let write = |m: &str, data: Vec<f32>, dtype: DataType| {
            let p = path(m);
            mask.with_data(data)
                .and_then(|v| v.write_with(&p, WriteOptions::dtype(dtype)))
                .map_err(|e| Error::Scaling(format!("{}: {e}", p.display())))
        };
        write("seg", seg, DataType::U8)?;
        for (m, data) in MODALITIES.iter().zip(modalities) {
            write(m, data, DataType::F32)?;
        }
    }
    Ok(())
}

/// One case's BraTS labels and four modalities from a whole-head phantom's labels (0
/// background, 1 head, 2 tumour) and image (in [-1, 1], background -1).
fn brats_case(labels: &[f32], image: &[f32]) -> (Vec<f32>, [Vec<f32>; 4]) {
    let tumour: Vec<f32> = labels
        .iter()
        .zip(image)
        .filter(|(&l, _)| l == 2.0)
        .map(|(_, &v)| v)
        .collect();
    let rim = tumour.iter().sum::<f32>() / tumour.len().max(1) as f32;
    let seg = labels
        .iter()
        .zip(image)
        .map(|(&l, &v)| match l as u8 {
            0 => 0.0,
            2 if v >= rim => 3.0,
            2 => 1.0,
            _ => 4.0,
        })
        .collect();
    let contrast = |f: fn(f32) -> f32| {
        labels
            .iter()
            .zip(image)
            .map(|(&l, &v)| {
                if l == 0.0 {
                    -1.0
                } else {
                    f(v).clamp(-1.0, 1.0)
                }
            })
            .collect::<Vec<f32>>()
    };
    let modalities = [
        contrast(|v| v),
        contrast(|v| 0.8 * v + 0.2),
        contrast(|v| -0.9 * v),
        contrast(|v| 0.5 - 0.6 * v),
    ];
    (seg, modalities)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Workload;
    use medddpm_train::data::NiftiDataset;

    #[test]
    fn brats_case_labels_and_contrasts() {
        let labels = [0.0, 1.0, 2.0, 2.0];
        let image = [-1.0, 0.1, 0.9, 0.3];
        let (seg, m) = brats_case(&labels, &image);
        assert_eq!(seg, vec![0.0, 4.0, 3.0, 1.0]);
        for v in &m {
            assert_eq!(v[0], -1.0);
            assert!(v.iter().all(|x| (-1.0..=1.0).contains(x)));
        }
        assert!((m[2][1] + 0.09).abs() < 1e-6);
    }

    #[test]
    fn brats_layout_is_read_by_the_brats_source() {
        let dir = tempfile::tempdir().unwrap();
        let o = ScalingOptions {
            workload: Workload {
                model: Model::Brats,
                size: [8, 12, 10],
                batch: 1,
                activation_checkpointing: Default::default(),
            },
            warmup: 0,
            steps: 1,
            out: dir.path().to_path_buf(),
            seed: 3,
            host_profile: false,
            timeout_s: 60,
        };
        let config = experiment(&o, 2).unwrap();
        assert_eq!(config.data.grid, [10, 12, 8]);
        let set = NiftiDataset::open(&config.data).unwrap();
        assert_eq!(set.len(), PHANTOMS);
        assert_eq!((set.image_channels(), set.cond_channels()), (4, 4));
        assert_eq!(set.shape(), [8, 12, 10]);
        let example = set.get(0).unwrap();
        assert_eq!(example.image.len(), 4 * 8 * 12 * 10);
        let seg = set.mask_volume(0).unwrap();
        assert!(seg.data().contains(&4.0));
        let (mask, _) = set.files(0).unwrap();
        let mask = mask.to_path_buf();
        // A second call reuses the files.
        let before = std::fs::metadata(&mask).unwrap().modified().unwrap();
        experiment(&o, 1).unwrap();
        let after = std::fs::metadata(&mask).unwrap().modified().unwrap();
        assert_eq!(before, after);
    }
}
