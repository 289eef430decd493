//! The data order and the loader: which examples each micro-batch trains on, and their voxels
//! read, normalised and stacked on threads of their own while the device runs the micro-batches
//! before (reading a gzipped 128^3 volume and its mask takes the host longer than a GPU's
//! micro-step, which the GPU would otherwise wait for at every step).

use std::collections::VecDeque;
use std::sync::Arc;
use std::thread::JoinHandle;

use burn::tensor::{Bytes, DType, TensorData};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use medddpm_kernels::KernelBackend;

use crate::data::{DataError, Example, NiftiDataset};

/// The data order: epoch e visits the examples in a permutation drawn from (seed, e), like the
/// reference's reshuffling `DataLoader`, but reproducible from the micro-batch counter alone.
pub(super) struct DataOrder {
    seed: u64,
    len: usize,
    epoch: Option<(usize, Vec<usize>)>,
}

impl DataOrder {
    pub fn new(seed: u64, len: usize) -> Self {
        Self {
            seed,
            len,
            epoch: None,
        }
    }

    /// The example at global position `draw` (micro-batch x batch size + index in it).
    pub fn index(&mut self, draw: usize) -> usize {
        let (epoch, pos) = (draw / self.len, draw % self.len);
        if self.epoch.as_ref().map(|(e, _)| *e) != Some(epoch) {
            let mut rng = ChaCha8Rng::seed_from_u64(self.seed ^ 0x5eed_da7a);
            rng.set_stream(epoch as u64);
            let mut perm: Vec<usize> = (0..self.len).collect();
            for i in (1..perm.len()).rev() {
                perm.swap(i, rng.random_range(0..=i));
            }
            self.epoch = Some((epoch, perm));
        }
        self.epoch.as_ref().unwrap().1[pos]
    }
}

/// A micro-batch's voxels on the host, stacked as the network's input expects them.
pub(super) struct HostBatch {
    /// Images, `[n, c_img, d, h, w]`.
    pub image: TensorData,
    /// Conditions, `[n, c_cond, d, h, w]`.
    pub cond: TensorData,
}

/// Micro-batches read ahead at most, each on a thread of its own: enough that reads slower
/// than a micro-step keep up (two or three micro-steps' time each), few enough that their
/// voxels stay small beside a data set's cache.
pub(super) const READ_AHEAD: usize = 3;

/// A micro-batch being read ahead: its global positions and the read.
struct Ahead {
    positions: Vec<usize>,
    handle: JoinHandle<Result<HostBatch, DataError>>,
}

/// Where a batch's voxels are stacked: the given parts, one after another, in memory the device
/// copies from without waiting (`KernelBackend::host_bytes`: page-locked memory on CUDA), or
/// `None` for an ordinary vector.
pub(super) type HostMemory = Arc<dyn Fn(&[&[u8]]) -> Option<Bytes> + Send + Sync>;

/// `B`'s [`KernelBackend::host_bytes`] on `device`.
pub(super) fn host_memory<B: KernelBackend>(device: &B::Device) -> HostMemory {
    let device = device.clone();
    Arc::new(move |parts| B::host_bytes(&device, parts))
}

/// The data order with the next micro-batches read ahead.
pub(super) struct Loader {
    order: DataOrder,
    dataset: Arc<NiftiDataset>,
    ahead: VecDeque<Ahead>,
    memory: HostMemory,
}

impl Loader {
    pub fn new(seed: u64, dataset: Arc<NiftiDataset>, memory: HostMemory) -> Self {
        Self {
            order: DataOrder::new(seed, dataset.len()),
            dataset,
            ahead: VecDeque::new(),
            memory,
        }
    }

    /// The examples at global `positions`.
    pub fn indices(&mut self, positions: &[usize]) -> Vec<usize> {
        positions.iter().map(|&p| self.order.index(p)).collect()
    }

    /// The voxels of the examples at global `positions`: read ahead when they are the first
    /// batch [`Loader::read_ahead`] was asked for, else read now (and the reads ahead, which
    /// were for another order, dropped).
    pub fn take(&mut self, positions: &[usize]) -> Result<HostBatch, DataError> {
        match self.ahead.pop_front() {
            Some(ahead) if ahead.positions == positions => ahead
                .handle
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            other => {
                if other.is_some() {
                    self.ahead.clear();
                }
                let indices = self.indices(positions);
                host_batch(&self.dataset, &indices, &self.memory)
            }
        }
    }

    /// Starts reading the micro-batches at `upcoming` global positions, in the order they
    /// will be taken, each on a thread of its own: those not yet being read, up to
    /// [`READ_AHEAD`] in all.
    pub fn read_ahead(&mut self, upcoming: &[Vec<usize>]) {
        for positions in upcoming.iter().take(READ_AHEAD) {
            if self.ahead.iter().any(|a| &a.positions == positions) {
                continue;
            }
            let indices = self.indices(positions);
            let dataset = Arc::clone(&self.dataset);
            let memory = Arc::clone(&self.memory);
            let handle = std::thread::Builder::new()
                .name("medddpm-loader".into())
                .spawn(move || host_batch(&dataset, &indices, &memory));
            // Without a thread (the system refused one) the batch is read when it is taken.
            let Ok(handle) = handle else { return };
            self.ahead.push_back(Ahead {
                positions: positions.clone(),
                handle,
            });
        }
    }
}

/// Reads the examples at `indices` and stacks them into `memory`.
fn host_batch(
    dataset: &NiftiDataset,
    indices: &[usize],
    memory: &HostMemory,
) -> Result<HostBatch, DataError> {
    let examples: Vec<Example> = indices
        .iter()
        .map(|&i| dataset.get(i))
        .collect::<Result<_, _>>()?;
    Ok(HostBatch {
        image: stacked_into(&examples, true, memory.as_ref()),
        cond: stacked_into(&examples, false, memory.as_ref()),
    })
}

/// The images (`image`) or the conditions of `examples`, stacked along a batch axis.
pub(super) fn stacked(examples: &[Example], image: bool) -> TensorData {
    stacked_into(examples, image, &|_| None)
}

/// [`stacked`], written into `memory` where it gives any.
fn stacked_into(
    examples: &[Example],
    image: bool,
    memory: &dyn Fn(&[&[u8]]) -> Option<Bytes>,
) -> TensorData {
    let [d, h, w] = examples[0].shape;
    fn voxels(e: &Example, image: bool) -> &[f32] {
        if image {
            &e.image
        } else {
            &e.cond
        }
    }
    let len: usize = examples.iter().map(|e| voxels(e, image).len()).sum();
    let shape = [examples.len(), len / (examples.len() * d * h * w), d, h, w];
    let parts: Vec<&[u8]> = examples
        .iter()
        .map(|e| bytemuck::cast_slice(voxels(e, image)))
        .collect();
    if let Some(bytes) = memory(&parts) {
        return TensorData::from_bytes(bytes, shape, DType::F32);
    }
    let mut data = Vec::with_capacity(len);
    for e in examples {
        data.extend_from_slice(voxels(e, image));
    }
    TensorData::new(data, shape)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{DataConfig, DataSource};

    fn ordinary() -> HostMemory {
        Arc::new(|_| None)
    }

    fn phantoms(dir: &std::path::Path, cache: bool) -> Arc<NiftiDataset> {
        let mut config = DataConfig::new(DataSource::Phantom {
            dir: dir.to_path_buf(),
            count: 3,
            size: [8, 8, 8],
            seed: 1,
        });
        config.cache = cache;
        Arc::new(NiftiDataset::open(&config).unwrap())
    }

    #[test]
    fn a_batch_read_ahead_equals_one_read_when_taken() {
        let dir = tempfile::tempdir().unwrap();
        for cache in [true, false] {
            let dataset = phantoms(dir.path(), cache);
            let mut loader = Loader::new(7, Arc::clone(&dataset), ordinary());
            let positions = [4, 5];
            let indices = loader.indices(&positions);
            loader.read_ahead(&[positions.to_vec(), vec![6, 7]]);
            assert_eq!(loader.ahead.len(), 2);
            loader.read_ahead(&[positions.to_vec()]);
            assert_eq!(
                loader.ahead.len(),
                2,
                "a batch being read is not read twice"
            );
            let ahead = loader.take(&positions).unwrap();
            assert_eq!(loader.ahead.len(), 1, "taken");
            let now = host_batch(&dataset, &indices, &ordinary()).unwrap();
            assert_eq!(ahead.image, now.image);
            assert_eq!(ahead.cond, now.cond);
            assert_eq!(ahead.image.shape.to_vec(), vec![2, 1, 8, 8, 8]);
            assert_eq!(ahead.cond.shape.to_vec(), vec![2, 2, 8, 8, 8]);
        }
    }

    #[test]
    fn a_batch_stacked_into_host_memory_equals_one_stacked_into_a_vector() {
        let dir = tempfile::tempdir().unwrap();
        let dataset = phantoms(dir.path(), true);
        let given = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = Arc::clone(&given);
        let memory: HostMemory = Arc::new(move |parts: &[&[u8]]| {
            let bytes = parts.concat();
            counted.fetch_add(bytes.len(), std::sync::atomic::Ordering::Relaxed);
            Some(Bytes::from_bytes_vec(bytes))
        });
        let into = host_batch(&dataset, &[2, 0], &memory).unwrap();
        let plain = host_batch(&dataset, &[2, 0], &ordinary()).unwrap();
        assert_eq!(into.image, plain.image);
        assert_eq!(into.cond, plain.cond);
        let (image, cond) = (into.image.as_bytes().len(), into.cond.as_bytes().len());
        assert_eq!(
            given.load(std::sync::atomic::Ordering::Relaxed),
            image + cond
        );
    }

    #[test]
    fn a_batch_read_ahead_for_other_examples_is_not_handed_out() {
        let dir = tempfile::tempdir().unwrap();
        let dataset = phantoms(dir.path(), true);
        let mut loader = Loader::new(0, Arc::clone(&dataset), ordinary());
        loader.read_ahead(&[vec![0], vec![1]]);
        let wanted = loader.indices(&[1]);
        assert_ne!(wanted, loader.indices(&[0]));
        let got = loader.take(&[1]).unwrap();
        assert_eq!(
            got.image,
            host_batch(&dataset, &wanted, &ordinary()).unwrap().image
        );
        assert!(
            loader.ahead.is_empty(),
            "reads for another order are dropped"
        );
    }

    #[test]
    fn a_read_error_reaches_the_step_that_takes_the_batch() {
        let dir = tempfile::tempdir().unwrap();
        let dataset = phantoms(dir.path(), false);
        let (_, images) = dataset.files(0).unwrap();
        std::fs::write(images[0], b"not a NIfTI file").unwrap();
        let mut loader = Loader::new(0, Arc::clone(&dataset), ordinary());
        let all: Vec<usize> = (0..3).collect();
        let position = all
            .iter()
            .copied()
            .find(|&p| loader.indices(&[p]) == [0])
            .unwrap();
        loader.read_ahead(&[vec![position]]);
        let err = loader
            .take(&[position])
            .err()
            .expect("the broken file is an error");
        assert!(
            err.to_string().contains(&images[0].display().to_string()),
            "{err}"
        );
    }
}
