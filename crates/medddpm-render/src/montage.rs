//! Montages: rows of axial, coronal and sagittal panels through one point.

use medddpm_nifti::Volume;

use crate::error::{RenderError, Result};
use crate::image::RgbImage;
use crate::layout::compose;
use crate::orient::{Plane, Reoriented};
use crate::slice::{check_grid, label_of, render_panel, Scale};
use crate::window::Window;

/// One row of a montage: a volume shown as axial, coronal and sagittal panels.
#[derive(Debug, Clone)]
pub struct Row<'a> {
    /// Text above the row (e.g. "real", "synthetic 1").
    pub title: String,
    /// The image.
    pub volume: &'a Volume,
    /// Label volume on the same grid, outlined over the image.
    pub mask: Option<&'a Volume>,
    /// Intensity window of this row.
    pub window: Window,
}

impl<'a> Row<'a> {
    /// A row without mask, windowed by [`Window::auto`].
    pub fn new(title: impl Into<String>, volume: &'a Volume) -> Self {
        Self {
            title: title.into(),
            volume,
            mask: None,
            window: Window::auto(volume),
        }
    }

    /// The same row with `mask`'s outlines.
    pub fn with_mask(mut self, mask: &'a Volume) -> Self {
        self.mask = Some(mask);
        self
    }

    /// The same row with another window.
    pub fn with_window(mut self, window: Window) -> Self {
        self.window = window;
        self
    }
}

/// The point all panels of a montage pass through.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum SlicePosition {
    /// [`auto_position`] of the first row whose mask has a nonzero label, else the centre of
    /// the first row's volume.
    #[default]
    Auto,
    /// Canonical RAS index `[r, a, s]` in the first row's volume (0 = most left / posterior /
    /// inferior).
    Canonical([usize; 3]),
    /// Voxel index (i, j, k) in the first row's volume.
    Voxel([usize; 3]),
    /// World point (mm, RAS+); each row shows the voxel nearest to it (clamped to its grid).
    World([f64; 3]),
}

/// Layout options of [`montage`].
#[derive(Debug, Clone, PartialEq)]
pub struct MontageOptions {
    /// Pixel size (default: panels' longest side at least 192 px).
    pub scale: Scale,
    /// Where the three planes cross (default: the mask's centre).
    pub position: SlicePosition,
    /// Orientation letters (R/L, A/P, S/I) beside each panel's edges (default on).
    pub orientation_labels: bool,
    /// Plane names above the columns (default on).
    pub plane_titles: bool,
}

impl Default for MontageOptions {
    fn default() -> Self {
        Self {
            scale: Scale::default(),
            position: SlicePosition::Auto,
            orientation_labels: true,
            plane_titles: true,
        }
    }
}

/// Canonical index `[r, a, s]` a montage of `volume` crosses at by default: the centre
/// (rounded down) of the bounding box of `mask`'s nonzero labels, or the volume's centre
/// (`dims / 2`) if there is no mask or it is all background. Computed in canonical order, so
/// the same anatomy stored with other voxel axes gets the same point.
pub fn auto_position(volume: &Volume, mask: Option<&Volume>) -> Result<[usize; 3]> {
    if let Some(m) = mask {
        check_grid("auto position", volume, m)?;
    }
    let view = Reoriented::new(volume)?;
    Ok(auto_in(&view, mask).unwrap_or(view.dims().map(|d| d / 2)))
}

/// Centre of `mask`'s nonzero bounding box in `view`'s canonical order, if any voxel is nonzero.
fn auto_in(view: &Reoriented<'_>, mask: Option<&Volume>) -> Option<[usize; 3]> {
    let mask = mask?;
    let [ni, nj, nk] = mask.dims();
    let data = mask.data();
    let mut lo = [usize::MAX; 3];
    let mut hi = [0usize; 3];
    for k in 0..nk {
        for j in 0..nj {
            for i in 0..ni {
                if label_of(data[i + ni * (j + nj * k)]) != 0 {
                    let c = view.canonical([i, j, k]);
                    for a in 0..3 {
                        lo[a] = lo[a].min(c[a]);
                        hi[a] = hi[a].max(c[a]);
                    }
                }
            }
        }
    }
    (lo[0] != usize::MAX).then(|| std::array::from_fn(|a| (lo[a] + hi[a]) / 2))
}

/// Canonical index of the crossing point in every row's own grid.
fn positions(
    rows: &[Row<'_>],
    views: &[Reoriented<'_>],
    pos: SlicePosition,
) -> Result<Vec<[usize; 3]>> {
    let inside = |what: &str, idx: [usize; 3], dims: [usize; 3]| {
        if (0..3).all(|a| idx[a] < dims[a]) {
            Ok(())
        } else {
            Err(RenderError::InvalidOption(format!(
                "{what} {idx:?} is outside the first row's volume ({dims:?})"
            )))
        }
    };
    let (src, at) = match pos {
        SlicePosition::World(p) => {
            return views.iter().map(|v| v.canonical_of_world(p)).collect();
        }
        SlicePosition::Canonical(c) => {
            inside("canonical index", c, views[0].dims())?;
            (0, c)
        }
        SlicePosition::Voxel(v) => {
            inside("voxel", v, rows[0].volume.dims())?;
            (0, views[0].canonical(v))
        }
        SlicePosition::Auto => rows
            .iter()
            .zip(views)
            .enumerate()
            .find_map(|(r, (row, view))| auto_in(view, row.mask).map(|c| (r, c)))
            .unwrap_or((0, views[0].dims().map(|d| d / 2))),
    };
    let world = rows[src]
        .volume
        .world(views[src].voxel(at).map(|x| x as f64));
    views
        .iter()
        .map(|v| {
            if v.same_grid(&views[src]) {
                Ok(at)
            } else {
                v.canonical_of_world(world)
            }
        })
        .collect()
}

/// A picture of `rows`, one above the other (so real and synthetic volumes compare down the
/// columns), each row three panels left to right: axial, coronal, sagittal, all through the
/// same point ([`MontageOptions::position`]), with the row's title above it. Black background,
/// white text; panels follow the crate's radiological conventions and share one pixel size.
pub fn montage(rows: &[Row<'_>], opts: &MontageOptions) -> Result<RgbImage> {
    if rows.is_empty() {
        return Err(RenderError::Empty(
            "a montage needs at least one row".into(),
        ));
    }
    for row in rows {
        if row.volume.voxel_count() == 0 {
            return Err(RenderError::Empty(format!(
                "{}: the volume has no voxels",
                row.title
            )));
        }
        if let Some(m) = row.mask {
            check_grid(&row.title, row.volume, m)?;
        }
    }
    let views = rows
        .iter()
        .map(|r| Reoriented::new(r.volume))
        .collect::<Result<Vec<_>>>()?;
    let masks = rows
        .iter()
        .map(|r| r.mask.map(Reoriented::new).transpose())
        .collect::<Result<Vec<_>>>()?;
    let mm = opts.scale.mm_per_px(&views.iter().collect::<Vec<_>>())?;
    let at = positions(rows, &views, opts.position)?;
    let mut panels = Vec::with_capacity(rows.len());
    for (r, row) in rows.iter().enumerate() {
        let range = row.window.resolve(row.volume)?;
        let mut three = Vec::with_capacity(3);
        for plane in Plane::ALL {
            three.push(render_panel(
                &views[r],
                masks[r].as_ref(),
                plane,
                at[r][plane.normal_axis()],
                range,
                mm,
            )?);
        }
        panels.push(three);
    }
    let titles: Vec<String> = rows.iter().map(|r| r.title.clone()).collect();
    compose(
        &panels,
        &Plane::ALL,
        &titles,
        opts.plane_titles,
        opts.orientation_labels,
    )
}
