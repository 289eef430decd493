//! Built-in head phantoms: the default data set when no real data is at hand.
//!
//! Each phantom is a whole-head pair in the reference layout: `mask/phantom_NNN.nii.gz`
//! (uint8 labels 0 background, 1 head, 2 tumour) and `image/phantom_NNN.nii.gz` (float32 in
//! [-1, 1], background exactly -1). The head is an ellipsoid with a darker skull shell and a
//! brighter, smoothly textured brain; the tumour is a smaller ellipsoid inside the brain with a
//! bright rim. The three label regions have clearly different mean intensities, so a tiny model
//! learns the mask -> image mapping within minutes on a CPU.
//!
//! Generation is deterministic: phantom `n` depends only on `(seed, n, size)` (its own ChaCha8
//! stream), so a larger `count` extends a set without changing the first phantoms. A
//! `phantoms.json` manifest records the parameters; a folder whose manifest matches is reused.

use std::path::{Path, PathBuf};

use medddpm_nifti::{Affine, DataType, Volume, WriteOptions};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::error::DataError;

/// The manifest recording the parameters a phantom folder was generated with.
pub const MANIFEST_FILE: &str = "phantoms.json";

/// Bumped whenever the generator's output changes, so old folders are regenerated.
const GENERATOR: &str = "medddpm-phantom-v2";

/// Field of view per axis in mm: 128 voxels give the reference's 1.5 mm spacing.
const FOV_MM: f64 = 192.0;

/// Smallest size per axis that still holds a skull, a brain and a tumour.
pub const MIN_PHANTOM_SIZE: usize = 8;

/// A generated (or reused) phantom set, readable as a whole-head layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhantomSet {
    /// The folder given to [`generate_phantoms`].
    pub dir: PathBuf,
    /// `dir/mask`.
    pub mask_dir: PathBuf,
    /// `dir/image`.
    pub image_dir: PathBuf,
    /// Mask files, in phantom order.
    pub masks: Vec<PathBuf>,
    /// Image files, in the same order.
    pub images: Vec<PathBuf>,
    /// False when an existing identical set was reused.
    pub generated: bool,
}

/// The parameters recorded next to the files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Manifest {
    generator: String,
    count: usize,
    size: [usize; 3],
    seed: u64,
}

/// Writes `count` phantoms of `size` voxels (NIfTI i, j, k) into `dir/mask` and `dir/image`,
/// unless `dir/phantoms.json` says an identical set is already there and its files exist.
/// Stale `phantom_*` files of an earlier, different set are removed.
pub fn generate_phantoms(
    dir: &Path,
    count: usize,
    size: [usize; 3],
    seed: u64,
) -> Result<PhantomSet, DataError> {
    if count == 0 {
        return Err(DataError::InvalidConfig(
            "phantom count must be at least 1".into(),
        ));
    }
    if size.iter().any(|&n| n < MIN_PHANTOM_SIZE) {
        return Err(DataError::InvalidConfig(format!(
            "phantom size {size:?} is too small (at least {MIN_PHANTOM_SIZE} per axis)"
        )));
    }
    check_fits(count, size)?;
    let manifest = Manifest {
        generator: GENERATOR.into(),
        count,
        size,
        seed,
    };
    let mask_dir = dir.join("mask");
    let image_dir = dir.join("image");
    let names: Vec<String> = (0..count)
        .map(|n| format!("phantom_{n:03}.nii.gz"))
        .collect();
    let mut set = PhantomSet {
        dir: dir.to_path_buf(),
        masks: names.iter().map(|n| mask_dir.join(n)).collect(),
        images: names.iter().map(|n| image_dir.join(n)).collect(),
        mask_dir,
        image_dir,
        generated: false,
    };
    let manifest_path = dir.join(MANIFEST_FILE);
    let existing = std::fs::read(&manifest_path)
        .ok()
        .and_then(|b| serde_json::from_slice::<Manifest>(&b).ok());
    let all_there = set.masks.iter().chain(&set.images).all(|p| p.is_file());
    if existing.as_ref() == Some(&manifest) && all_there {
        return Ok(set);
    }

    // Drop the old manifest first: a crash mid-way must not leave a matching manifest next
    // to a half-replaced set.
    remove_if_exists(&manifest_path)?;
    for d in [&set.mask_dir, &set.image_dir] {
        std::fs::create_dir_all(d).map_err(|source| DataError::Io {
            path: d.clone(),
            source,
        })?;
        remove_stale(d, &names)?;
    }
    write_all(&set, size, seed)?;
    let json = serde_json::to_vec_pretty(&manifest)
        .map_err(|e| DataError::InvalidConfig(format!("cannot encode phantom manifest: {e}")))?;
    write_atomic(&manifest_path, &json)?;
    set.generated = true;
    Ok(set)
}

/// Bytes a phantom holds at once while it is made and written, counted from the code: its
/// labels and its image in f32 (8), the image encoded (4) and its gzip stream (at most about
/// the same, 4).
const BYTES_PER_VOXEL: u64 = 16;
/// Bytes the set's file list takes per phantom: two paths and a name (about 250 bytes),
/// rounded up to cover the data set's index of the same files.
const BYTES_PER_PHANTOM: u64 = 1024;

/// Refuses a set whose generation cannot fit in the memory available, before allocating any
/// of it (a phantom of 4096^3 voxels, or a hundred million of them).
fn check_fits(count: usize, size: [usize; 3]) -> Result<(), DataError> {
    let Some(available) = medddpm_nifti::available_memory() else {
        return Ok(());
    };
    let voxels = size.iter().map(|&n| n as f64).product::<f64>();
    let workers = workers(count) as f64;
    let needed =
        voxels * BYTES_PER_VOXEL as f64 * workers + count as f64 * BYTES_PER_PHANTOM as f64;
    if needed <= available as f64 {
        return Ok(());
    }
    const GIB: f64 = (1u64 << 30) as f64;
    Err(DataError::InvalidConfig(format!(
        "{count} phantoms of {size:?} voxels need about {:.1} GiB to generate ({} at a time), more than the {:.1} GiB available: ask for fewer or smaller phantoms",
        needed / GIB,
        workers,
        available as f64 / GIB
    )))
}

/// Threads making phantoms at once.
fn workers(count: usize) -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(count)
}

/// Generates and writes every phantom, spreading them over the available cores (a 128^3
/// phantom costs a noticeable fraction of a second, mostly gzip).
fn write_all(set: &PhantomSet, size: [usize; 3], seed: u64) -> Result<(), DataError> {
    let count = set.masks.len();
    let workers = workers(count);
    let jobs: Vec<usize> = (0..count).collect();
    let chunk = count.div_ceil(workers);
    std::thread::scope(|s| {
        let handles: Vec<_> = jobs
            .chunks(chunk)
            .map(|part| {
                s.spawn(move || -> Result<(), DataError> {
                    for &n in part {
                        let (labels, image, affine) = phantom(size, seed, n as u64);
                        Volume::new(size, labels, affine)?
                            .write_with(&set.masks[n], WriteOptions::dtype(DataType::U8))?;
                        Volume::new(size, image, affine)?.write(&set.images[n])?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
    })
}

/// Removes `phantom_*` NIfTI files of `dir` that are not in `keep`.
fn remove_stale(dir: &Path, keep: &[String]) -> Result<(), DataError> {
    let io_err = |source| DataError::Io {
        path: dir.to_path_buf(),
        source,
    };
    for item in std::fs::read_dir(dir).map_err(io_err)? {
        let path = item.map_err(io_err)?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let ours =
            name.starts_with("phantom_") && (name.ends_with(".nii.gz") || name.ends_with(".nii"));
        if ours && !keep.iter().any(|k| k == name) {
            remove_if_exists(&path)?;
        }
    }
    Ok(())
}

fn remove_if_exists(path: &Path) -> Result<(), DataError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(DataError::Io {
            path: path.to_path_buf(),
            source: e,
        }),
        _ => Ok(()),
    }
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), DataError> {
    medddpm_atomic::write(path, bytes).map_err(|source| DataError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// RAS affine with isotropic-FOV spacing, centred on the world origin.
fn phantom_affine(size: [usize; 3]) -> Affine {
    let sp = size.map(|n| FOV_MM / n as f64);
    let o: [f64; 3] = std::array::from_fn(|a| -(size[a] as f64 - 1.0) / 2.0 * sp[a]);
    [
        [sp[0], 0.0, 0.0, o[0]],
        [0.0, sp[1], 0.0, o[1]],
        [0.0, 0.0, sp[2], o[2]],
        [0.0, 0.0, 0.0, 1.0],
    ]
}

/// One phantom: labels and image in file order, and its affine. Coordinates are normalised
/// so each axis spans [-1, 1] whatever the voxel count.
fn phantom(size: [usize; 3], seed: u64, n: u64) -> (Vec<f32>, Vec<f32>, Affine) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(n);
    let anatomy = Anatomy::draw(size, &mut rng);
    let (mut labels, mut image, tumour_voxels) = anatomy.rasterise(size, &mut rng);
    if tumour_voxels == 0 {
        // Grids too coarse for the sampled tumour: mark the voxel at its centre.
        let ijk: [usize; 3] = std::array::from_fn(|a| {
            (((anatomy.tum_c[a] + 1.0) / 2.0 * size[a] as f64 - 0.5).round())
                .clamp(0.0, size[a] as f64 - 1.0) as usize
        });
        let at = ijk[0] + size[0] * (ijk[1] + size[1] * ijk[2]);
        labels[at] = 2.0;
        image[at] = anatomy.rim_val as f32;
    }
    (labels, image, phantom_affine(size))
}

/// Standard deviation of the image noise.
const NOISE: f64 = 0.03;

/// One phantom's random anatomy, in normalised coordinates: a head ellipsoid whose outer
/// shell is skull, a textured brain, and an ellipsoidal tumour with a bright rim.
struct Anatomy {
    head_c: [f64; 3],
    head_r: [f64; 3],
    brain_edge: f64,
    skull_val: f64,
    brain_val: f64,
    /// Low-frequency texture: (amplitude, frequencies, phases) of separable sinusoid products.
    waves: Vec<(f64, [f64; 3], [f64; 3])>,
    tum_c: [f64; 3],
    tum_r: [f64; 3],
    core_val: f64,
    rim_val: f64,
}

impl Anatomy {
    /// Draws the anatomy from `rng` (the order of the draws is part of the phantom set's
    /// definition: changing it changes every phantom).
    fn draw(size: [usize; 3], rng: &mut ChaCha8Rng) -> Self {
        let mut u = |lo: f64, hi: f64| lo + (hi - lo) * rng.random::<f64>();
        let head_c: [f64; 3] = std::array::from_fn(|_| u(-0.06, 0.06));
        let head_r: [f64; 3] = std::array::from_fn(|_| u(0.72, 0.86));
        let brain_edge = 1.0 - u(0.10, 0.15); // skull shell = outer part of the head ellipsoid
        let skull_val = u(-0.55, -0.40);
        let brain_val = u(0.0, 0.12);
        // A few separable sinusoid products: cheap at 128^3.
        let waves = (0..3)
            .map(|_| {
                let amp = u(0.04, 0.08);
                let freq = std::array::from_fn(|_| u(1.0, 3.0) * std::f64::consts::PI);
                let phase = std::array::from_fn(|_| u(0.0, std::f64::consts::TAU));
                (amp, freq, phase)
            })
            .collect();
        // Tumour: at least 2.4 voxels in semi-axis (from 16 voxels per side up; at most 0.3 of
        // the span below that), so that on small grids it has an inside and not only a rim
        // (1.5 voxels gave 23-voxel tumours at 16^3, all edge), and inside the brain: offset
        // <= `max_dist` of the head radius, semi-axes <= `hi` of the [-1, 1] span, head radius
        // >= 0.72, so max_dist + hi / 0.72 <= 0.85 <= brain_edge. From 50 voxels per side up
        // this is 0.4 and [0.10, 0.24], what it always was.
        let lo: [f64; 3] = std::array::from_fn(|a| (5.0 / size[a] as f64).clamp(0.10, 0.30));
        let hi = lo.map(|l| l.max(0.20) + 0.04);
        let widest = hi.iter().cloned().fold(0.0, f64::max);
        let max_dist = (0.85 - widest / 0.72).clamp(0.0, 0.4);
        let dir: [f64; 3] = std::array::from_fn(|_| u(-1.0, 1.0));
        let norm = dir.iter().map(|d| d * d).sum::<f64>().sqrt().max(1e-9);
        let dist = u(0.0, max_dist);
        let tum_c = std::array::from_fn(|a| head_c[a] + dir[a] / norm * dist * head_r[a]);
        let tum_r = std::array::from_fn(|a| u(lo[a], hi[a]));
        let core_val = u(0.45, 0.60);
        let rim_val = u(0.85, 0.95);
        Self {
            head_c,
            head_r,
            brain_edge,
            skull_val,
            brain_val,
            waves,
            tum_c,
            tum_r,
            core_val,
            rim_val,
        }
    }

    /// The texture's per-axis factors: `tables[w][axis][x]`, the amplitude folded into axis 0.
    fn wave_tables(&self, size: [usize; 3]) -> Vec<[Vec<f64>; 3]> {
        self.waves
            .iter()
            .map(|(amp, f, p)| {
                std::array::from_fn(|a| {
                    let scale = if a == 0 { *amp } else { 1.0 };
                    (0..size[a])
                        .map(|x| scale * (f[a] * coord(size, a, x) + p[a]).sin())
                        .collect()
                })
            })
            .collect()
    }

    /// Labels and image in file order, and the number of tumour voxels; noise from `rng`.
    fn rasterise(&self, size: [usize; 3], rng: &mut ChaCha8Rng) -> (Vec<f32>, Vec<f32>, usize) {
        let (head_c, head_r, tum_c, tum_r) = (self.head_c, self.head_r, self.tum_c, self.tum_r);
        let tables = self.wave_tables(size);
        let total: usize = size.iter().product();
        let mut labels = vec![0f32; total];
        let mut image = vec![-1f32; total];
        let mut idx = 0;
        let mut tumour_voxels = 0usize;
        for k in 0..size[2] {
            let zk = coord(size, 2, k);
            let (hz, tz) = (
                ((zk - head_c[2]) / head_r[2]).powi(2),
                ((zk - tum_c[2]) / tum_r[2]).powi(2),
            );
            for j in 0..size[1] {
                let yj = coord(size, 1, j);
                let (hy, ty) = (
                    hz + ((yj - head_c[1]) / head_r[1]).powi(2),
                    tz + ((yj - tum_c[1]) / tum_r[1]).powi(2),
                );
                for i in 0..size[0] {
                    let xi = coord(size, 0, i);
                    let rh2 = hy + ((xi - head_c[0]) / head_r[0]).powi(2);
                    if rh2 > 1.0 {
                        idx += 1;
                        continue; // background: label 0, exactly -1
                    }
                    let rt2 = ty + ((xi - tum_c[0]) / tum_r[0]).powi(2);
                    let in_brain = rh2 <= self.brain_edge * self.brain_edge;
                    let base = if in_brain && rt2 <= 1.0 {
                        labels[idx] = 2.0;
                        tumour_voxels += 1;
                        // Bright rim around a darker (still bright) core.
                        if rt2 > 0.5 {
                            self.rim_val
                        } else {
                            self.core_val
                        }
                    } else {
                        labels[idx] = 1.0;
                        if in_brain {
                            let texture = tables.iter().map(|t| t[0][i] * t[1][j] * t[2][k]);
                            self.brain_val + texture.sum::<f64>()
                        } else {
                            self.skull_val
                        }
                    };
                    // Triangular noise with standard deviation NOISE.
                    let noise =
                        (rng.random::<f64>() + rng.random::<f64>() - 1.0) * NOISE * 6f64.sqrt();
                    image[idx] = (base + noise).clamp(-0.95, 1.0) as f32;
                    idx += 1;
                }
            }
        }
        (labels, image, tumour_voxels)
    }
}

/// Voxel `x` of axis `a` in normalised coordinates (voxel centres spanning [-1, 1]).
fn coord(size: [usize; 3], a: usize, x: usize) -> f64 {
    (x as f64 + 0.5) / size[a] as f64 * 2.0 - 1.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A set no machine could generate is refused before anything is allocated or written.
    #[test]
    fn sets_beyond_memory_are_refused_before_generating() {
        let tmp = tempfile::tempdir().unwrap();
        for (count, size) in [(usize::MAX / 4096, [16; 3]), (2, [1 << 20; 3])] {
            let err = generate_phantoms(tmp.path(), count, size, 0)
                .unwrap_err()
                .to_string();
            assert!(err.contains("GiB to generate"), "{err}");
        }
        assert!(std::fs::read_dir(tmp.path()).unwrap().next().is_none());
        generate_phantoms(tmp.path(), 2, [16; 3], 0).unwrap();
    }

    #[test]
    fn affine_gives_reference_spacing_at_128() {
        let a = phantom_affine([128; 3]);
        assert_eq!(a[0][0], 1.5);
        assert_eq!(a[0][3], -95.25);
    }

    #[test]
    fn tiny_grids_still_have_every_label() {
        for seed in 0..20 {
            let (labels, image, _) = phantom([8, 9, 10], seed, 0);
            for l in [0.0, 1.0, 2.0] {
                assert!(labels.contains(&l), "seed {seed}: label {l} missing");
            }
            assert!(image.iter().all(|v| (-1.0..=1.0).contains(v)));
        }
    }
}
