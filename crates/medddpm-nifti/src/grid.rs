//! Operations that change the voxel grid while keeping world coordinates right.

use crate::affine::{index_map, matmul};
use crate::{NiftiError, Volume};

/// How [`Volume::resize`] samples between voxel centres.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Interpolation {
    /// Trilinear: for intensities (torchio's default for `ScalarImage`).
    #[default]
    Linear,
    /// Nearest neighbour: for label maps, so no fractional labels appear.
    Nearest,
}

/// Voxels removed (positive) or added (negative) at the start of an axis going from `n` to
/// `target`: centred, the odd voxel at the start, as torchio `CropOrPad` does (155 -> 144
/// removes 6 then 5; the BraTS sample affines' offsets depend on it).
fn start_shift(n: usize, target: usize) -> isize {
    let diff = n as isize - target as isize;
    if diff >= 0 {
        (diff + 1) / 2
    } else {
        -((-diff + 1) / 2)
    }
}

fn check_target(dims: [usize; 3]) -> Result<(), NiftiError> {
    if dims.contains(&0) {
        return Err(NiftiError::EmptyGrid { dims });
    }
    Ok(())
}

impl Volume {
    /// Centre-crops and/or pads each axis to `target`, padding with `fill`. The affine's origin
    /// moves by the voxels removed/added at the start, so every kept voxel keeps its world
    /// position.
    pub fn crop_or_pad(&self, target: [usize; 3], fill: f32) -> Result<Volume, NiftiError> {
        check_target(target)?;
        let shift: [isize; 3] = std::array::from_fn(|a| start_shift(self.dims[a], target[a]));
        let [ni, nj, nk] = self.dims.map(|d| d as isize);
        let [ti, tj, tk] = target;
        let mut data = vec![fill; ti * tj * tk];
        for k in 0..tk {
            let sk = k as isize + shift[2];
            if sk < 0 || sk >= nk {
                continue;
            }
            for j in 0..tj {
                let sj = j as isize + shift[1];
                if sj < 0 || sj >= nj {
                    continue;
                }
                // Contiguous run along i that overlaps the source.
                let i0 = (-shift[0]).max(0);
                let i1 = (ni - shift[0]).min(ti as isize);
                if i0 >= i1 {
                    continue;
                }
                let dst = ti * (j + tj * k);
                let src = ((sj + nj * sk) * ni) as usize;
                let (i0, i1) = (i0 as usize, i1 as usize);
                let s0 = (i0 as isize + shift[0]) as usize;
                data[dst + i0..dst + i1]
                    .copy_from_slice(&self.data[src + s0..src + s0 + (i1 - i0)]);
            }
        }
        let m = index_map([1.0; 3], shift.map(|s| s as f64));
        Ok(Volume {
            dims: target,
            data,
            affine: matmul(&self.affine, &m),
            ..self.clone_meta()
        })
    }

    /// Resamples onto a `target` grid covering the same field of view, as torchio `Resize`
    /// (ITK) does: new spacing = old * n_old / n_new, and the outer voxel corners stay put, so
    /// new voxel `x` samples old continuous index `(x + 0.5) * n_old / n_new - 0.5`. Positions
    /// within half a voxel outside the old grid take the edge value (ITK clamps there too).
    pub fn resize(&self, target: [usize; 3], interp: Interpolation) -> Result<Volume, NiftiError> {
        check_target(target)?;
        let scale: [f64; 3] = std::array::from_fn(|a| self.dims[a] as f64 / target[a] as f64);
        let offset = scale.map(|s| 0.5 * s - 0.5);
        // Per axis: for each new index, the two old indices and the weight of the second.
        let taps: Vec<Vec<(usize, usize, f32)>> = (0..3)
            .map(|a| {
                let last = (self.dims[a] - 1) as f64;
                (0..target[a])
                    .map(|x| {
                        let pos = (x as f64 * scale[a] + offset[a]).clamp(0.0, last);
                        match interp {
                            Interpolation::Nearest => {
                                let i = (pos + 0.5).floor().min(last) as usize;
                                (i, i, 0.0)
                            }
                            Interpolation::Linear => {
                                let i0 = pos.floor() as usize;
                                let i1 = (i0 + 1).min(last as usize);
                                (i0, i1, (pos - i0 as f64) as f32)
                            }
                        }
                    })
                    .collect()
            })
            .collect();
        let [ni, nj, _] = self.dims;
        let at = |i: usize, j: usize, k: usize| self.data[i + ni * (j + nj * k)];
        let mut data = Vec::with_capacity(target.iter().product());
        for &(k0, k1, wk) in &taps[2] {
            for &(j0, j1, wj) in &taps[1] {
                for &(i0, i1, wi) in &taps[0] {
                    let lerp = |a: f32, b: f32, w: f32| if w == 0.0 { a } else { a + (b - a) * w };
                    let plane = |k| {
                        let r0 = lerp(at(i0, j0, k), at(i1, j0, k), wi);
                        let r1 = lerp(at(i0, j1, k), at(i1, j1, k), wi);
                        lerp(r0, r1, wj)
                    };
                    let v = if wk == 0.0 {
                        plane(k0)
                    } else {
                        lerp(plane(k0), plane(k1), wk)
                    };
                    data.push(v);
                }
            }
        }
        let m = index_map(scale, offset);
        Ok(Volume {
            dims: target,
            data,
            affine: matmul(&self.affine, &m),
            spacing: std::array::from_fn(|a| self.spacing[a] * scale[a]),
            ..self.clone_meta()
        })
    }

    /// Whether `other` has the same dims and an affine equal within 1e-4 (float32 headers
    /// round differently across writers, so exact equality would reject true matches).
    pub fn same_grid(&self, other: &Volume) -> bool {
        self.dims == other.dims
            && self
                .affine
                .iter()
                .flatten()
                .zip(other.affine.iter().flatten())
                .all(|(a, b)| (a - b).abs() <= 1e-4)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::affine::IDENTITY;

    fn ramp(dims: [usize; 3]) -> Volume {
        let n = dims.iter().product::<usize>();
        Volume::new(dims, (0..n).map(|x| x as f32).collect(), IDENTITY).unwrap()
    }

    #[test]
    fn start_shift_matches_torchio() {
        assert_eq!(start_shift(155, 144), 6);
        assert_eq!(start_shift(240, 192), 24);
        assert_eq!(start_shift(144, 155), -6);
        assert_eq!(start_shift(5, 5), 0);
    }

    #[test]
    fn crop_keeps_world_positions() {
        let mut v = ramp([5, 4, 3]);
        v.affine[0][0] = -1.0;
        v.affine[0][3] = 10.0;
        let c = v.crop_or_pad([2, 4, 3], 0.0).unwrap();
        // 5 -> 2 removes 2 at the start, 1 at the end.
        assert_eq!(c.get(0, 1, 2), v.get(2, 1, 2));
        assert_eq!(c.world([0.0, 1.0, 2.0]), v.world([2.0, 1.0, 2.0]));
        assert_eq!(c.affine[0][3], 8.0);
    }

    #[test]
    fn pad_fills_and_keeps_world_positions() {
        let v = ramp([2, 2, 1]);
        let p = v.crop_or_pad([5, 2, 2], -1.0).unwrap();
        // 2 -> 5 adds 2 at the start, 1 at the end; 1 -> 2 adds 1 at the start.
        assert_eq!(p.dims(), [5, 2, 2]);
        assert_eq!(p.get(2, 1, 1), v.get(0, 1, 0));
        assert_eq!(p.get(3, 0, 1), v.get(1, 0, 0));
        assert_eq!(p.get(0, 0, 1), Some(-1.0));
        assert_eq!(p.get(2, 0, 0), Some(-1.0));
        assert_eq!(p.world([2.0, 1.0, 1.0]), v.world([0.0, 1.0, 0.0]));
    }

    #[test]
    fn crop_then_pad_restores_the_centre() {
        let v = ramp([6, 5, 4]);
        let back = v
            .crop_or_pad([3, 3, 3], 0.0)
            .unwrap()
            .crop_or_pad([6, 5, 4], 0.0)
            .unwrap();
        assert_eq!(back.affine(), v.affine());
        assert_eq!(back.get(2, 2, 2), v.get(2, 2, 2));
    }

    #[test]
    fn resize_downsample_averages_pairs_and_keeps_extent() {
        // Along i: 4 -> 2, new voxels sit at old 0.5 and 2.5.
        let v = Volume::new([4, 1, 1], vec![0.0, 2.0, 4.0, 6.0], IDENTITY).unwrap();
        let r = v.resize([2, 1, 1], Interpolation::Linear).unwrap();
        assert_eq!(r.data(), &[1.0, 5.0]);
        assert_eq!(r.spacing(), [2.0, 1.0, 1.0]);
        // Corner -0.5 maps to the same world point on both grids.
        assert_eq!(r.world([-0.5, 0.0, 0.0]), v.world([-0.5, 0.0, 0.0]));
        assert_eq!(r.world([1.5, 0.0, 0.0]), v.world([3.5, 0.0, 0.0]));
    }

    #[test]
    fn resize_upsample_linear_and_nearest() {
        let v = Volume::new([2, 1, 1], vec![0.0, 4.0], IDENTITY).unwrap();
        // 2 -> 4: positions -0.25 (clamped to 0), 0.25, 0.75, 1.25 (clamped to 1).
        let l = v.resize([4, 1, 1], Interpolation::Linear).unwrap();
        assert_eq!(l.data(), &[0.0, 1.0, 3.0, 4.0]);
        let n = v.resize([4, 1, 1], Interpolation::Nearest).unwrap();
        assert_eq!(n.data(), &[0.0, 0.0, 4.0, 4.0]);
        assert_eq!(n.affine()[0][0], 0.5);
        assert_eq!(n.affine()[0][3], -0.25);
    }

    #[test]
    fn resize_trilinear_is_exact_on_linear_fields() {
        let dims = [6, 5, 4];
        let mut v = ramp(dims);
        for k in 0..4 {
            for j in 0..5 {
                for i in 0..6 {
                    let idx = v.index(i, j, k);
                    v.data_mut()[idx] = (i + 10 * j + 100 * k) as f32;
                }
            }
        }
        let r = v.resize([3, 5, 2], Interpolation::Linear).unwrap();
        // i: 6 -> 3 samples 0.5, 2.5, 4.5; k: 4 -> 2 samples 0.5, 2.5.
        assert_eq!(r.get(1, 3, 1), Some(2.5 + 30.0 + 250.0));
        assert_eq!(r.get(0, 0, 0), Some(0.5 + 50.0));
    }

    #[test]
    fn same_grid_tolerates_float_noise_only() {
        let a = ramp([2, 2, 2]);
        let mut b = a.clone();
        b.affine[1][3] += 5e-5;
        assert!(a.same_grid(&b));
        b.affine[1][3] += 1e-3;
        assert!(!a.same_grid(&b));
        assert!(!a.same_grid(&ramp([2, 2, 3])));
    }

    #[test]
    fn empty_target_is_an_error() {
        let v = ramp([2, 2, 2]);
        assert!(matches!(
            v.crop_or_pad([0, 2, 2], 0.0),
            Err(NiftiError::EmptyGrid { .. })
        ));
        assert!(matches!(
            v.resize([2, 0, 2], Interpolation::Linear),
            Err(NiftiError::EmptyGrid { .. })
        ));
    }
}
