//! Moving and scaling the tumour inside the brain: the tumour's voxels (all its labels
//! together) are resampled as one body about their centroid, by nearest neighbour, and the
//! place they left takes the brain label.

use super::config::TumourLabels;
use super::geometry::nearest;
use crate::label_of;

/// Why a tumour draw did not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Misfit {
    /// A tumour voxel would lie beyond the grid's edge.
    OffGrid,
    /// A tumour voxel would lie on background.
    OutsideBrain,
    /// No voxel is left (scaled below one voxel).
    Vanished,
}

/// A mask's tumour: where its voxels are and which label each holds.
#[derive(Debug, Clone)]
pub(crate) struct Tumour {
    /// Flat indices of the tumour's voxels.
    voxels: Vec<usize>,
    /// Bounding box, inclusive, in voxels.
    lo: [usize; 3],
    hi: [usize; 3],
    /// Centroid, in voxels.
    centre: [f64; 3],
    /// Labels inside the bounding box, i fastest; `None` where not tumour.
    local: Vec<Option<f32>>,
}

impl Tumour {
    /// The tumour of `data` (file order, `dims`), or `None` when the mask has none.
    pub fn find(data: &[f32], dims: [usize; 3], labels: &TumourLabels) -> Option<Self> {
        let [ni, nj, _] = dims;
        let is_tumour = |v: f32| label_of(v).is_some_and(|l| labels.is_tumour(l));
        let voxels: Vec<usize> = (0..data.len()).filter(|&at| is_tumour(data[at])).collect();
        if voxels.is_empty() {
            return None;
        }
        let ijk = |at: usize| [at % ni, (at / ni) % nj, at / (ni * nj)];
        let (mut lo, mut hi, mut sum) = ([usize::MAX; 3], [0; 3], [0.0; 3]);
        for &at in &voxels {
            let p = ijk(at);
            for r in 0..3 {
                lo[r] = lo[r].min(p[r]);
                hi[r] = hi[r].max(p[r]);
                sum[r] += p[r] as f64;
            }
        }
        let size: [usize; 3] = std::array::from_fn(|r| hi[r] - lo[r] + 1);
        let mut local = vec![None; size.iter().product()];
        for &at in &voxels {
            let p = ijk(at);
            local[(p[0] - lo[0]) + size[0] * ((p[1] - lo[1]) + size[1] * (p[2] - lo[2]))] =
                Some(data[at]);
        }
        let centre = sum.map(|s| s / voxels.len() as f64);
        Some(Self {
            voxels,
            lo,
            hi,
            centre,
            local,
        })
    }

    /// The tumour's label at position `u` (voxels, the original's grid), by nearest
    /// neighbour.
    fn label_at(&self, u: [f64; 3]) -> Option<f32> {
        let size: [usize; 3] = std::array::from_fn(|r| self.hi[r] - self.lo[r] + 1);
        let mut at = [0usize; 3];
        for r in 0..3 {
            at[r] = nearest(u[r] - self.lo[r] as f64, size[r])?;
        }
        self.local[at[0] + size[0] * (at[1] + size[1] * at[2])]
    }

    /// `data` with the tumour shifted by `shift` voxels and scaled by `scale` about its
    /// centroid: every new tumour voxel must lie on the grid and on brain (a brain or tumour
    /// label of `data`); the old tumour's place takes `labels.fill()`.
    pub fn place(
        &self,
        data: &[f32],
        dims: [usize; 3],
        labels: &TumourLabels,
        shift: [i64; 3],
        scale: f64,
    ) -> Result<Vec<f32>, Misfit> {
        let g = self.centre;
        let to = |r: usize, x: f64| g[r] + shift[r] as f64 + scale * (x - g[r]);
        let from: [i64; 3] = std::array::from_fn(|r| to(r, self.lo[r] as f64 - 0.5).floor() as i64);
        let until: [i64; 3] = std::array::from_fn(|r| to(r, self.hi[r] as f64 + 0.5).ceil() as i64);
        let [ni, nj, nk] = dims.map(|n| n as i64);
        let mut placed = Vec::new();
        for k in from[2]..=until[2] {
            for j in from[1]..=until[1] {
                for i in from[0]..=until[0] {
                    let v = [i, j, k];
                    let u = std::array::from_fn(|r| {
                        g[r] + (v[r] as f64 - g[r] - shift[r] as f64) / scale
                    });
                    let Some(label) = self.label_at(u) else {
                        continue;
                    };
                    if !(0..ni).contains(&i) || !(0..nj).contains(&j) || !(0..nk).contains(&k) {
                        return Err(Misfit::OffGrid);
                    }
                    let at = (i + ni * (j + nj * k)) as usize;
                    if !label_of(data[at]).is_some_and(|l| labels.is_brain(l)) {
                        return Err(Misfit::OutsideBrain);
                    }
                    placed.push((at, label));
                }
            }
        }
        if placed.is_empty() {
            return Err(Misfit::Vanished);
        }
        let mut out = data.to_vec();
        for &at in &self.voxels {
            out[at] = labels.fill() as f32;
        }
        for (at, label) in placed {
            out[at] = label;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 12^3 whole-head-like mask: head (1) in the box 2..=9, a 2x2x2 tumour (2) with a
    /// corner of label 3 at 4..=5.
    fn head() -> (Vec<f32>, [usize; 3]) {
        let dims = [12, 12, 12];
        let mut data = vec![0.0; 1728];
        for k in 0..12 {
            for j in 0..12 {
                for i in 0..12 {
                    let inside = |x: usize| (2..=9).contains(&x);
                    let tumour = |x: usize| (4..=5).contains(&x);
                    data[i + 12 * (j + 12 * k)] = match () {
                        _ if tumour(i) && tumour(j) && tumour(k) => 2.0,
                        _ if inside(i) && inside(j) && inside(k) => 1.0,
                        _ => 0.0,
                    };
                }
            }
        }
        data[4 + 12 * (4 + 12 * 4)] = 3.0;
        (data, dims)
    }

    fn labels() -> TumourLabels {
        TumourLabels {
            tumour: vec![2, 3],
            brain: vec![1],
        }
    }

    fn count(data: &[f32], v: f32) -> usize {
        data.iter().filter(|&&x| x == v).count()
    }

    #[test]
    fn a_shift_moves_every_label_and_fills_the_old_place() {
        let (data, dims) = head();
        let t = Tumour::find(&data, dims, &labels()).unwrap();
        assert_eq!(t.voxels.len(), 8);
        let out = t.place(&data, dims, &labels(), [2, -1, 3], 1.0).unwrap();
        assert_eq!((count(&out, 2.0), count(&out, 3.0)), (7, 1));
        assert_eq!(out[6 + 12 * (3 + 12 * 7)], 3.0);
        assert_eq!(out[4 + 12 * (4 + 12 * 4)], 1.0);
        // The head keeps its outline: background untouched.
        assert_eq!(count(&out, 0.0), count(&data, 0.0));
    }

    #[test]
    fn no_shift_and_unit_scale_change_nothing() {
        let (data, dims) = head();
        let t = Tumour::find(&data, dims, &labels()).unwrap();
        assert_eq!(t.place(&data, dims, &labels(), [0; 3], 1.0).unwrap(), data);
    }

    #[test]
    fn draws_leaving_the_brain_or_the_grid_do_not_fit() {
        let (data, dims) = head();
        let t = Tumour::find(&data, dims, &labels()).unwrap();
        // 5 voxels right: the tumour's far side at i = 10, which is background.
        let misfit = t.place(&data, dims, &labels(), [5, 0, 0], 1.0);
        assert_eq!(misfit, Err(Misfit::OutsideBrain));
        let misfit = t.place(&data, dims, &labels(), [-5, 0, 0], 1.0);
        assert_eq!(misfit, Err(Misfit::OffGrid));
        // Four voxels fit from 4..=5 to 8..=9 (the head's last row).
        assert!(t.place(&data, dims, &labels(), [4, 0, 0], 1.0).is_ok());
    }

    #[test]
    fn scaling_grows_the_tumour_about_its_centre() {
        let (data, dims) = head();
        let t = Tumour::find(&data, dims, &labels()).unwrap();
        let out = t.place(&data, dims, &labels(), [0; 3], 2.0).unwrap();
        // 2x2x2 voxels scaled by 2 about 4.5 cover 3..=6 on each axis.
        assert_eq!(count(&out, 2.0) + count(&out, 3.0), 64);
        assert_eq!(out[3 + 12 * (3 + 12 * 3)], 3.0);
        assert_eq!(out[6 + 12 * (6 + 12 * 6)], 2.0);
        let misfit = t.place(&data, dims, &labels(), [0; 3], 0.2);
        assert_eq!(misfit, Err(Misfit::Vanished));
    }
}
