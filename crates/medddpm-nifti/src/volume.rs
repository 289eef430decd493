//! The in-memory volume.

use std::path::Path;

use crate::affine::{header_affine, Affine};
use crate::{DataType, Endian, NiftiError, NiftiHeader};

/// A 3-D scalar image with its voxel grid.
///
/// `data` is in file order: `i` fastest, index `i + ni * (j + nj * k)`. Read as a C-order
/// (row-major) array that is exactly shape `(nk, nj, ni)`, which is the axis order the reference
/// network uses (it feeds a NIfTI array `(i, j, k)` as `(k, j, i)`). So handing `data()` to a
/// tensor of shape [`Volume::network_shape`] needs no transpose and no copy, and a tensor of that
/// shape written back with [`Volume::with_data`] lands in the file's own voxel order.
#[derive(Debug, Clone, PartialEq)]
pub struct Volume {
    pub(crate) dims: [usize; 3],
    pub(crate) data: Vec<f32>,
    pub(crate) affine: Affine,
    pub(crate) spacing: [f64; 3],
    pub(crate) dtype: DataType,
    pub(crate) header: NiftiHeader,
    pub(crate) endian: Endian,
}

impl Volume {
    /// A float32 volume with a fresh header (sform_code 2 "aligned" when written, as nibabel
    /// does for a new image). Spacing is taken from the affine's column lengths.
    pub fn new(dims: [usize; 3], data: Vec<f32>, affine: Affine) -> Result<Self, NiftiError> {
        check_len(dims, data.len())?;
        let spacing =
            std::array::from_fn(|j| (0..3).map(|i| affine[i][j].powi(2)).sum::<f64>().sqrt());
        let mut header = NiftiHeader::default();
        for (a, s) in spacing.iter().enumerate() {
            header.pixdim[a + 1] = *s as f32;
        }
        Ok(Self {
            dims,
            data,
            affine,
            spacing,
            dtype: DataType::F32,
            header,
            endian: Endian::Little,
        })
    }

    /// Builds a volume from a parsed header and decoded data (reader's path).
    pub(crate) fn from_header(
        header: NiftiHeader,
        dims: [usize; 3],
        data: Vec<f32>,
        dtype: DataType,
        endian: Endian,
    ) -> Self {
        Self {
            dims,
            data,
            affine: header_affine(&header),
            spacing: [1, 2, 3].map(|a| header.pixdim[a] as f64),
            dtype,
            header,
            endian,
        }
    }

    /// Same grid, header and dtype, new voxel values (e.g. a generated sample on its mask's grid).
    pub fn with_data(&self, data: Vec<f32>) -> Result<Self, NiftiError> {
        check_len(self.dims, data.len())?;
        Ok(Self {
            data,
            ..self.clone_meta()
        })
    }

    /// Everything but the data, which is left empty (callers fill it).
    pub(crate) fn clone_meta(&self) -> Self {
        Self {
            dims: self.dims,
            data: Vec::new(),
            affine: self.affine,
            spacing: self.spacing,
            dtype: self.dtype,
            header: self.header.clone(),
            endian: self.endian,
        }
    }

    /// Voxel counts along the NIfTI axes (i, j, k).
    pub fn dims(&self) -> [usize; 3] {
        self.dims
    }

    /// Shape `[nk, nj, ni]` of the C-order array that [`Volume::data`] already is; the
    /// reference network's spatial axis order.
    pub fn network_shape(&self) -> [usize; 3] {
        [self.dims[2], self.dims[1], self.dims[0]]
    }

    /// Number of voxels.
    pub fn voxel_count(&self) -> usize {
        self.data.len()
    }

    /// Voxel values in file order (see the type's docs), scaling already applied.
    pub fn data(&self) -> &[f32] {
        &self.data
    }

    /// Mutable voxel values; the length cannot change, so the grid stays valid.
    pub fn data_mut(&mut self) -> &mut [f32] {
        &mut self.data
    }

    /// Takes the voxel values out.
    pub fn into_data(self) -> Vec<f32> {
        self.data
    }

    /// Flat index of voxel (i, j, k).
    pub fn index(&self, i: usize, j: usize, k: usize) -> usize {
        i + self.dims[0] * (j + self.dims[1] * k)
    }

    /// Value of voxel (i, j, k); `None` outside the grid.
    pub fn get(&self, i: usize, j: usize, k: usize) -> Option<f32> {
        let [ni, nj, nk] = self.dims;
        (i < ni && j < nj && k < nk).then(|| self.data[self.index(i, j, k)])
    }

    /// Voxel (i, j, k) -> world (mm) affine.
    pub fn affine(&self) -> &Affine {
        &self.affine
    }

    /// Voxel size in mm along i, j, k (`pixdim[1..4]`).
    pub fn spacing(&self) -> [f64; 3] {
        self.spacing
    }

    /// Storage type of the file this came from (data is always held as f32).
    pub fn dtype(&self) -> DataType {
        self.dtype
    }

    /// The header as read (or the fresh one of [`Volume::new`]); grid ops do not update it,
    /// the writer rebuilds the geometric fields.
    pub fn header(&self) -> &NiftiHeader {
        &self.header
    }

    /// Byte order of the file this came from.
    pub fn endian(&self) -> Endian {
        self.endian
    }

    /// World coordinates (mm) of a voxel position given in (possibly fractional) indices.
    pub fn world(&self, ijk: [f64; 3]) -> [f64; 3] {
        let a = &self.affine;
        std::array::from_fn(|r| a[r][0] * ijk[0] + a[r][1] * ijk[1] + a[r][2] * ijk[2] + a[r][3])
    }
}

pub(crate) fn check_len(dims: [usize; 3], found: usize) -> Result<(), NiftiError> {
    let expected = dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
    match expected {
        Some(e) if e == found => Ok(()),
        _ => Err(NiftiError::DataLength {
            dims,
            expected: expected.unwrap_or(usize::MAX),
            found,
        }),
    }
}

/// Fails with [`NiftiError::GridMismatch`], naming both files and shapes, unless `a` and `b`
/// share a voxel grid ([`Volume::same_grid`]). Call before pairing a mask with its image.
pub fn ensure_same_grid(
    a_path: &Path,
    a: &Volume,
    b_path: &Path,
    b: &Volume,
) -> Result<(), NiftiError> {
    let detail = if a.dims != b.dims {
        "dimensions differ".to_string()
    } else if !a.same_grid(b) {
        format!("affines differ ({:?} vs {:?})", a.affine, b.affine)
    } else {
        return Ok(());
    };
    Err(NiftiError::GridMismatch {
        a_path: a_path.to_path_buf(),
        a_dims: a.dims,
        b_path: b_path.to_path_buf(),
        b_dims: b.dims,
        detail,
    })
}

/// A file's name as messages and titles show it (lossy UTF-8; empty for a path without one,
/// such as `..`).
pub fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The id a NIfTI file name stands for (`sample_3.nii.gz` -> `sample_3`, any case of the
/// extension); `None` for other files and hidden ones (editors' and the atomic writer's
/// temporaries start with a dot). Training pairs files, sampling names outputs and `prepare`
/// finds cases by it.
pub fn nifti_stem(path: &Path) -> Option<&str> {
    let name = path.file_name()?.to_str()?;
    if name.starts_with('.') {
        return None;
    }
    let lower = name.to_ascii_lowercase();
    let stem_len = if lower.ends_with(".nii.gz") {
        name.len() - 7
    } else if lower.ends_with(".nii") {
        name.len() - 4
    } else {
        return None;
    };
    (stem_len > 0).then(|| &name[..stem_len])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stems() {
        for (name, stem) in [
            ("a/sample_3.nii.gz", Some("sample_3")),
            ("x.NII", Some("x")),
            ("b.NII", Some("b")),
            (".x.nii.gz", None),
            (".b.nii.gz.1.2.tmp", None),
            (".hidden.nii", None),
            ("x.txt", None),
            ("readme.txt", None),
            (".nii", None),
        ] {
            assert_eq!(nifti_stem(Path::new(name)), stem, "{name}");
        }
    }
}
