//! One slice as a picture: resampling to square pixels, windowing and mask outlines.

use medddpm_nifti::Volume;

use crate::error::{RenderError, Result};
use crate::image::RgbImage;
use crate::orient::{Plane, Reoriented};
use crate::window::{Window, WindowRange};

/// Outline colours of labels 1, 2, 3, ...: green, red, yellow, cyan, magenta, orange, blue,
/// pink; label `L` uses entry `(L - 1) mod 8` (Euclidean remainder, also for negative labels).
pub const PALETTE: [[u8; 3]; 8] = [
    [0, 230, 0],
    [255, 40, 40],
    [255, 230, 0],
    [0, 230, 230],
    [255, 0, 255],
    [255, 140, 0],
    [60, 120, 255],
    [255, 150, 200],
];

/// Outline colour of `label`; `None` for the background label 0.
pub fn label_colour(label: i64) -> Option<[u8; 3]> {
    (label != 0).then(|| PALETTE[(label - 1).rem_euclid(PALETTE.len() as i64) as usize])
}

/// The label of a mask value: the value rounded to the nearest integer; non-finite is 0.
pub(crate) fn label_of(v: f32) -> i64 {
    if v.is_finite() {
        v.round() as i64
    } else {
        0
    }
}

/// Longest panel side allowed, in pixels.
const MAX_SIDE: f64 = 16384.0;

/// Pixel size of a picture. All panels of one picture share it, so they keep their physical
/// proportions relative to each other.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scale {
    /// The finest voxel size enlarged by the smallest integer factor that makes the longest
    /// panel side at least `min_panel_px` pixels (at least factor 1).
    Auto {
        /// Minimum length of the longest panel side, in pixels.
        min_panel_px: u32,
    },
    /// The finest voxel size (mm) divided by this integer: `Factor(1)` shows the finest voxel
    /// axis at one pixel per voxel.
    Factor(u32),
    /// Pixels per millimetre.
    PixelsPerMm(f64),
}

impl Default for Scale {
    /// `Auto { min_panel_px: 192 }`: a 32³ volume becomes 192-pixel panels.
    fn default() -> Self {
        Scale::Auto { min_panel_px: 192 }
    }
}

impl Scale {
    /// Millimetres per pixel for pictures of `views`.
    pub(crate) fn mm_per_px(&self, views: &[&Reoriented<'_>]) -> Result<f64> {
        let finest = views
            .iter()
            .flat_map(|v| v.spacing())
            .fold(f64::INFINITY, f64::min);
        let longest_mm = views
            .iter()
            .flat_map(|v| {
                let (d, s) = (v.dims(), v.spacing());
                (0..3).map(move |c| d[c] as f64 * s[c])
            })
            .fold(0.0, f64::max);
        if !(finest.is_finite() && finest > 0.0) {
            return Err(RenderError::Empty(
                "no volume to size the picture by".into(),
            ));
        }
        let mm = match *self {
            Scale::Factor(0) => {
                return Err(RenderError::InvalidOption("scale factor 0".into()));
            }
            Scale::Factor(k) => finest / k as f64,
            Scale::PixelsPerMm(p) if p.is_finite() && p > 0.0 => 1.0 / p,
            Scale::PixelsPerMm(p) => {
                return Err(RenderError::InvalidOption(format!(
                    "{p} pixels per mm (must be positive)"
                )));
            }
            Scale::Auto { min_panel_px } => {
                let base_px = (longest_mm / finest).max(1.0);
                let k = (min_panel_px as f64 / base_px).ceil().max(1.0);
                finest / k
            }
        };
        let side = longest_mm / mm;
        if side > MAX_SIDE {
            return Err(RenderError::TooLarge {
                width: side.round() as u64,
                height: side.round() as u64,
                limit: "16384 pixels per panel side",
            });
        }
        Ok(mm)
    }
}

/// Fails unless `mask` is on `volume`'s grid: same dims, affines equal within 1e-3 mm.
pub(crate) fn check_grid(what: &str, volume: &Volume, mask: &Volume) -> Result<()> {
    let detail = if volume.dims() != mask.dims() {
        String::new()
    } else {
        let (a, b) = (volume.affine(), mask.affine());
        let close = a
            .iter()
            .flatten()
            .zip(b.iter().flatten())
            .all(|(x, y)| (x - y).abs() <= 1e-3 * x.abs().max(1.0));
        if close {
            return Ok(());
        }
        format!(": affines differ ({a:?} vs {b:?})")
    };
    Err(RenderError::GridMismatch {
        what: what.to_string(),
        volume_dims: volume.dims(),
        mask_dims: mask.dims(),
        detail,
    })
}

/// Canonical index, along each displayed axis, of every column and row of a panel.
pub(crate) struct PanelGeometry {
    pub columns: Vec<usize>,
    pub rows: Vec<usize>,
}

/// Nearest-neighbour map from `n` voxels of `spacing` mm to pixels of `mm_per_px`, reversed
/// (pixel 0 shows the highest index).
fn axis_map(n: usize, spacing: f64, mm_per_px: f64) -> Vec<usize> {
    let px = ((n as f64 * spacing / mm_per_px).round() as usize).max(1);
    (0..px)
        .map(|p| {
            let idx = (((p as f64 + 0.5) * n as f64 / px as f64).floor() as usize).min(n - 1);
            n - 1 - idx
        })
        .collect()
}

impl PanelGeometry {
    pub(crate) fn new(view: &Reoriented<'_>, plane: Plane, mm_per_px: f64) -> Self {
        let (h, v) = plane.display_axes();
        let (d, s) = (view.dims(), view.spacing());
        Self {
            columns: axis_map(d[h], s[h], mm_per_px),
            rows: axis_map(d[v], s[v], mm_per_px),
        }
    }
}

/// Draws slice `index` (along `plane`'s normal, canonical order) of `view`, windowed by
/// `range`, with the outline of `mask`'s labels.
pub(crate) fn render_panel(
    view: &Reoriented<'_>,
    mask: Option<&Reoriented<'_>>,
    plane: Plane,
    index: usize,
    range: WindowRange,
    mm_per_px: f64,
) -> Result<RgbImage> {
    let normal = plane.normal_axis();
    let n = view.dims()[normal];
    if index >= n {
        return Err(RenderError::InvalidOption(format!(
            "{} slice {index} is outside the volume ({n} slices)",
            plane.name()
        )));
    }
    let (ha, va) = plane.display_axes();
    let geom = PanelGeometry::new(view, plane, mm_per_px);
    let (w, h) = (geom.columns.len(), geom.rows.len());
    let at = |col: usize, row: usize| {
        let mut c = [0; 3];
        c[normal] = index;
        c[ha] = geom.columns[col];
        c[va] = geom.rows[row];
        c
    };
    let mut img = RgbImage::new(w as u32, h as u32);
    let data = view.volume().data();
    let px = img.pixels_mut();
    for row in 0..h {
        for col in 0..w {
            let g = range.map(data[view.flat(at(col, row))]);
            let o = (row * w + col) * 3;
            px[o..o + 3].copy_from_slice(&[g, g, g]);
        }
    }
    if let Some(mask) = mask {
        let mdata = mask.volume().data();
        let labels: Vec<i64> = (0..h)
            .flat_map(|row| (0..w).map(move |col| (col, row)))
            .map(|(col, row)| label_of(mdata[mask.flat(at(col, row))]))
            .collect();
        draw_outline(&mut img, &labels);
    }
    Ok(img)
}

/// Colours every pixel of a nonzero label that has a 4-neighbour of another label (outside the
/// picture counts as label 0).
pub(crate) fn draw_outline(img: &mut RgbImage, labels: &[i64]) {
    let (w, h) = (img.width() as usize, img.height() as usize);
    debug_assert_eq!(labels.len(), w * h);
    let lab = |x: isize, y: isize| {
        if x < 0 || y < 0 || x >= w as isize || y >= h as isize {
            0
        } else {
            labels[y as usize * w + x as usize]
        }
    };
    for y in 0..h as isize {
        for x in 0..w as isize {
            let l = lab(x, y);
            let Some(colour) = label_colour(l) else {
                continue;
            };
            let edge = [(-1, 0), (1, 0), (0, -1), (0, 1)]
                .iter()
                .any(|(dx, dy)| lab(x + dx, y + dy) != l);
            if edge {
                img.put(x as u32, y as u32, colour);
            }
        }
    }
}

/// `volume` and its `mask` in display order, refused when the volume is empty or the mask
/// is on another grid (`what` names the picture in that error).
pub(crate) fn reoriented<'a>(
    what: &str,
    volume: &'a Volume,
    mask: Option<&'a Volume>,
) -> Result<(Reoriented<'a>, Option<Reoriented<'a>>)> {
    if volume.voxel_count() == 0 {
        return Err(RenderError::Empty("the volume has no voxels".into()));
    }
    if let Some(m) = mask {
        check_grid(what, volume, m)?;
    }
    Ok((
        Reoriented::new(volume)?,
        mask.map(Reoriented::new).transpose()?,
    ))
}

/// One slice of `volume` as a picture in the radiological convention (see the crate docs),
/// with `mask`'s label outlines. `index` counts along the plane's normal in canonical order:
/// from the most inferior (axial), posterior (coronal) or left (sagittal) slice. The window is
/// resolved over the whole volume; the pixel size follows `scale` for this volume alone.
pub fn render_slice(
    volume: &Volume,
    mask: Option<&Volume>,
    plane: Plane,
    index: usize,
    window: Window,
    scale: Scale,
) -> Result<RgbImage> {
    let (view, mview) = reoriented("slice", volume, mask)?;
    let mm = scale.mm_per_px(&[&view])?;
    let range = window.resolve(volume)?;
    render_panel(&view, mview.as_ref(), plane, index, range, mm)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_map_is_reversed_nearest_neighbour() {
        assert_eq!(axis_map(4, 1.0, 1.0), vec![3, 2, 1, 0]);
        assert_eq!(axis_map(2, 1.0, 0.5), vec![1, 1, 0, 0]);
        assert_eq!(axis_map(2, 3.0, 1.0), vec![1, 1, 1, 0, 0, 0]);
    }

    #[test]
    fn palette_order() {
        assert_eq!(label_colour(0), None);
        assert_eq!(label_colour(1), Some(PALETTE[0]));
        assert_eq!(label_colour(2), Some([255, 40, 40]));
        assert_eq!(label_colour(9), Some(PALETTE[0]));
        assert_eq!(label_colour(-1), Some(PALETTE[6]));
        assert_eq!(label_of(1.6), 2);
        assert_eq!(label_of(f32::NAN), 0);
    }
}
