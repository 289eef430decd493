//! Voxel axes to canonical RAS order, and the three display planes.

use medddpm_nifti::{Affine, Volume};

use crate::error::{RenderError, Result};

/// One of the three orthogonal display planes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Plane {
    /// Perpendicular to the inferior-superior axis (a "horizontal" cut).
    #[default]
    Axial,
    /// Perpendicular to the posterior-anterior axis.
    Coronal,
    /// Perpendicular to the left-right axis.
    Sagittal,
}

impl Plane {
    /// The planes in montage column order.
    pub const ALL: [Plane; 3] = [Plane::Axial, Plane::Coronal, Plane::Sagittal];

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Plane::Axial => "axial",
            Plane::Coronal => "coronal",
            Plane::Sagittal => "sagittal",
        }
    }

    /// The canonical axis (0 = R, 1 = A, 2 = S) the plane is perpendicular to; a slice index
    /// counts along it from the left / posterior / inferior end.
    pub fn normal_axis(self) -> usize {
        match self {
            Plane::Axial => 2,
            Plane::Coronal => 1,
            Plane::Sagittal => 0,
        }
    }

    /// The canonical axes shown (horizontal, vertical). Both run against the screen: the
    /// horizontal axis's highest index (most right / anterior) is at the panel's left edge, the
    /// vertical axis's highest index (most anterior / superior) at its top.
    pub fn display_axes(self) -> (usize, usize) {
        match self {
            Plane::Axial => (0, 1),
            Plane::Coronal => (0, 2),
            Plane::Sagittal => (1, 2),
        }
    }

    /// Anatomical direction at the panel's (left, right, top, bottom) edge.
    pub fn edge_letters(self) -> [char; 4] {
        match self {
            Plane::Axial => ['R', 'L', 'A', 'P'],
            Plane::Coronal => ['R', 'L', 'S', 'I'],
            Plane::Sagittal => ['A', 'P', 'S', 'I'],
        }
    }
}

/// For each voxel axis, the world axis (0 = x, 1 = y, 2 = z) it is most aligned with and
/// whether it points to the negative side: the permutation maximising the summed absolute
/// direction cosines, so every world axis is used once.
fn orientation(affine: &Affine) -> Result<([usize; 3], [bool; 3])> {
    let degenerate = || RenderError::DegenerateAffine {
        affine: Box::new(*affine),
    };
    let mut cos = [[0.0f64; 3]; 3]; // cos[world][voxel]
    for v in 0..3 {
        let n = (0..3).map(|w| affine[w][v].powi(2)).sum::<f64>().sqrt();
        if !(n.is_finite() && n > 0.0) {
            return Err(degenerate());
        }
        for (w, row) in cos.iter_mut().enumerate() {
            row[v] = affine[w][v] / n;
        }
    }
    const PERMS: [[usize; 3]; 6] = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    let score = |p: &[usize; 3]| (0..3).map(|v| cos[p[v]][v].abs()).sum::<f64>();
    let mut best = PERMS[0];
    for p in &PERMS[1..] {
        if score(p) > score(&best) {
            best = *p;
        }
    }
    if (0..3).any(|v| cos[best[v]][v].abs() < 1e-6) {
        return Err(degenerate());
    }
    Ok((best, std::array::from_fn(|v| cos[best[v]][v] < 0.0)))
}

/// The axis codes of an affine's voxel axes, as nibabel's `aff2axcodes`: the letter each voxel
/// axis points towards, e.g. `['R', 'A', 'S']` for the identity and `['L', 'P', 'S']` for a
/// DICOM-style LPS grid.
pub fn axcodes(affine: &Affine) -> Result<[char; 3]> {
    const POS: [char; 3] = ['R', 'A', 'S'];
    const NEG: [char; 3] = ['L', 'P', 'I'];
    let (axis, flip) = orientation(affine)?;
    Ok(std::array::from_fn(|v| {
        if flip[v] {
            NEG[axis[v]]
        } else {
            POS[axis[v]]
        }
    }))
}

/// A read-only view of a volume in canonical RAS index order.
///
/// Canonical index `[r, a, s]` grows towards the subject's right, anterior and superior; index
/// 0 is the most left / posterior / inferior voxel. Built from the affine's closest canonical
/// orientation, so no voxel is resampled.
#[derive(Debug, Clone)]
pub struct Reoriented<'a> {
    volume: &'a Volume,
    /// Voxel axis shown along canonical axis c.
    src_axis: [usize; 3],
    /// Whether canonical index runs against that voxel axis.
    reversed: [bool; 3],
    dims: [usize; 3],
    spacing: [f64; 3],
}

impl<'a> Reoriented<'a> {
    /// The canonical view of `volume`; fails if its affine has no orientation.
    pub fn new(volume: &'a Volume) -> Result<Self> {
        let affine = volume.affine();
        let (axis, flip) = orientation(affine)?;
        let mut src_axis = [0; 3];
        let mut reversed = [false; 3];
        for v in 0..3 {
            src_axis[axis[v]] = v;
            reversed[axis[v]] = flip[v];
        }
        let vd = volume.dims();
        let col_len = |v: usize| (0..3).map(|w| affine[w][v].powi(2)).sum::<f64>().sqrt();
        Ok(Self {
            volume,
            src_axis,
            reversed,
            dims: src_axis.map(|v| vd[v]),
            spacing: src_axis.map(col_len),
        })
    }

    /// The volume viewed.
    pub fn volume(&self) -> &'a Volume {
        self.volume
    }

    /// Voxel counts along R, A, S.
    pub fn dims(&self) -> [usize; 3] {
        self.dims
    }

    /// Voxel sizes (mm, the affine's column lengths) along R, A, S.
    pub fn spacing(&self) -> [f64; 3] {
        self.spacing
    }

    /// The voxel axes' codes, as [`axcodes`].
    pub fn axcodes(&self) -> [char; 3] {
        let mut codes = ['?'; 3];
        for c in 0..3 {
            codes[self.src_axis[c]] = match (c, self.reversed[c]) {
                (0, false) => 'R',
                (0, true) => 'L',
                (1, false) => 'A',
                (1, true) => 'P',
                (_, false) => 'S',
                (_, true) => 'I',
            };
        }
        codes
    }

    /// Voxel index (i, j, k) of canonical index `[r, a, s]` (which must be inside).
    pub fn voxel(&self, canonical: [usize; 3]) -> [usize; 3] {
        let mut ijk = [0; 3];
        for c in 0..3 {
            ijk[self.src_axis[c]] = if self.reversed[c] {
                self.dims[c] - 1 - canonical[c]
            } else {
                canonical[c]
            };
        }
        ijk
    }

    /// Canonical index of voxel (i, j, k) (which must be inside).
    pub fn canonical(&self, voxel: [usize; 3]) -> [usize; 3] {
        std::array::from_fn(|c| {
            let v = voxel[self.src_axis[c]];
            if self.reversed[c] {
                self.dims[c] - 1 - v
            } else {
                v
            }
        })
    }

    /// Flat index into [`Volume::data`] of canonical index `[r, a, s]`.
    pub fn flat(&self, canonical: [usize; 3]) -> usize {
        let [i, j, k] = self.voxel(canonical);
        self.volume.index(i, j, k)
    }

    /// Value at canonical index `[r, a, s]` (which must be inside).
    pub fn get(&self, canonical: [usize; 3]) -> f32 {
        self.volume.data()[self.flat(canonical)]
    }

    /// Whether `other` views the same voxel grid (same dims and affine).
    pub(crate) fn same_grid(&self, other: &Reoriented<'_>) -> bool {
        self.volume.dims() == other.volume.dims() && self.volume.affine() == other.volume.affine()
    }

    /// Canonical index of the voxel nearest to world point `p` (mm), clamped into the grid.
    pub(crate) fn canonical_of_world(&self, p: [f64; 3]) -> Result<[usize; 3]> {
        let a = self.volume.affine();
        let m = [
            [a[0][0], a[0][1], a[0][2]],
            [a[1][0], a[1][1], a[1][2]],
            [a[2][0], a[2][1], a[2][2]],
        ];
        let det = m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
            - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
            + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
        if !(det.is_finite() && det != 0.0) {
            return Err(RenderError::DegenerateAffine {
                affine: Box::new(*a),
            });
        }
        let d = [p[0] - a[0][3], p[1] - a[1][3], p[2] - a[2][3]];
        // Cramer's rule: ijk = m^-1 d.
        let solve = |col: usize| {
            let mut mm = m;
            for r in 0..3 {
                mm[r][col] = d[r];
            }
            (mm[0][0] * (mm[1][1] * mm[2][2] - mm[1][2] * mm[2][1])
                - mm[0][1] * (mm[1][0] * mm[2][2] - mm[1][2] * mm[2][0])
                + mm[0][2] * (mm[1][0] * mm[2][1] - mm[1][1] * mm[2][0]))
                / det
        };
        let dims = self.volume.dims();
        let ijk: [usize; 3] = std::array::from_fn(|v| {
            let x = solve(v).round();
            if x.is_nan() || x < 0.0 {
                0
            } else {
                (x as usize).min(dims[v] - 1)
            }
        });
        Ok(self.canonical(ijk))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use medddpm_nifti::IDENTITY;

    #[test]
    fn axcodes_of_common_affines() {
        assert_eq!(axcodes(&IDENTITY).unwrap(), ['R', 'A', 'S']);
        let mut lps = IDENTITY;
        lps[0][0] = -0.9;
        lps[1][1] = -0.9;
        assert_eq!(axcodes(&lps).unwrap(), ['L', 'P', 'S']);
        // Voxel axis i along -z, j along +x, k along -y (a coronal-slab acquisition), slightly
        // oblique.
        let a = [
            [0.0, 1.0, 0.1, 0.0],
            [0.05, 0.0, -3.0, 0.0],
            [-2.0, 0.1, 0.0, 0.0],
            [0.0, 0.0, 0.0, 1.0],
        ];
        assert_eq!(axcodes(&a).unwrap(), ['I', 'R', 'P']);
    }

    #[test]
    fn degenerate_affines_are_refused() {
        let mut a = IDENTITY;
        a[1][1] = 0.0;
        assert!(matches!(
            axcodes(&a),
            Err(RenderError::DegenerateAffine { .. })
        ));
        let mut b = IDENTITY;
        b[0][1] = 1.0;
        b[1][1] = 0.0; // columns 0 and 1 both along x
        assert!(axcodes(&b).is_err());
    }

    #[test]
    fn canonical_and_voxel_indices_are_inverse() {
        let a = [
            [0.0, -2.0, 0.0, 10.0],
            [0.0, 0.0, 1.0, 0.0],
            [-1.5, 0.0, 0.0, 5.0],
            [0.0, 0.0, 0.0, 1.0],
        ];
        let dims = [3, 4, 5];
        let v = Volume::new(dims, vec![0.0; 60], a).unwrap();
        let r = Reoriented::new(&v).unwrap();
        assert_eq!(r.axcodes(), ['I', 'L', 'A']);
        assert_eq!(r.dims(), [4, 5, 3]);
        assert_eq!(r.spacing(), [2.0, 1.0, 1.5]);
        for i in 0..3 {
            for j in 0..4 {
                for k in 0..5 {
                    let c = r.canonical([i, j, k]);
                    assert_eq!(r.voxel(c), [i, j, k]);
                    // Canonical order follows world order.
                    let w = v.world([i as f64, j as f64, k as f64]);
                    assert_eq!(r.canonical_of_world(w).unwrap(), c);
                }
            }
        }
        // Right-most voxel = smallest j (x = 10 - 2j).
        assert_eq!(r.voxel([3, 0, 0])[1], 0);
    }
}
