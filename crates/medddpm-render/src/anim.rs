//! Animated GIFs: slice sweeps and any sequence of frames (e.g. a denoising trajectory).

use std::collections::HashMap;
use std::path::Path;

use medddpm_nifti::Volume;

use crate::error::{RenderError, Result};
use crate::image::{write_atomic, RgbImage};
use crate::layout::compose;
use crate::orient::Plane;
use crate::slice::{render_panel, reoriented, Scale};
use crate::window::Window;

/// Options of [`slice_sweep_gif`] / [`sweep_frames`].
#[derive(Debug, Clone, PartialEq)]
pub struct SweepOptions {
    /// Pixel size (default: longest panel side at least 192 px).
    pub scale: Scale,
    /// Time each slice is shown, in milliseconds (default 80: 12.5 frames per second).
    pub delay_ms: u32,
    /// Orientation letters around the panel (default on).
    pub orientation_labels: bool,
    /// A caption such as "axial 12/64" above the panel (default on).
    pub caption: bool,
}

impl Default for SweepOptions {
    fn default() -> Self {
        Self {
            scale: Scale::default(),
            delay_ms: 80,
            orientation_labels: true,
            caption: true,
        }
    }
}

/// One frame per slice of `plane`, in canonical order (left to right for sagittal, posterior to
/// anterior for coronal, inferior to superior for axial), each the slice with `mask`'s outlines
/// in the crate's radiological display. The window is resolved once over the whole volume.
pub fn sweep_frames(
    volume: &Volume,
    mask: Option<&Volume>,
    plane: Plane,
    window: Window,
    opts: &SweepOptions,
) -> Result<Vec<RgbImage>> {
    let (view, mview) = reoriented("slice sweep", volume, mask)?;
    let mm = opts.scale.mm_per_px(&[&view])?;
    let range = window.resolve(volume)?;
    let n = view.dims()[plane.normal_axis()];
    (0..n)
        .map(|index| {
            let panel = render_panel(&view, mview.as_ref(), plane, index, range, mm)?;
            let caption = if opts.caption {
                format!("{} {}/{n}", plane.name(), index + 1)
            } else {
                String::new()
            };
            compose(
                &[vec![panel]],
                &[plane],
                &[caption],
                false,
                opts.orientation_labels,
            )
        })
        .collect()
}

/// Writes a looping GIF sweeping through every slice of `plane` (see [`sweep_frames`]),
/// atomically.
pub fn slice_sweep_gif(
    volume: &Volume,
    mask: Option<&Volume>,
    plane: Plane,
    window: Window,
    path: impl AsRef<Path>,
    opts: &SweepOptions,
) -> Result<()> {
    let frames = sweep_frames(volume, mask, plane, window, opts)?;
    frames_gif(&frames, opts.delay_ms, path)
}

/// Writes `frames` (all of one size) as a looping GIF, atomically; see [`encode_gif`].
pub fn frames_gif(frames: &[RgbImage], delay_ms: u32, path: impl AsRef<Path>) -> Result<()> {
    write_atomic(path.as_ref(), &encode_gif(frames, delay_ms)?)
}

/// `frames` (all of one size, at most 65535 pixels a side) as an endlessly looping GIF, each
/// frame shown `delay_ms` (rounded to GIF's 10 ms unit, at least 20 ms, since browsers slow
/// faster frames down).
///
/// Each frame gets its own palette: the exact colours when there are at most 256 (grey slices
/// with a few outline colours usually fit); else grey levels are reduced to 128 (outline
/// colours kept exact); else NeuQuant quantisation.
pub fn encode_gif(frames: &[RgbImage], delay_ms: u32) -> Result<Vec<u8>> {
    let first = frames
        .first()
        .ok_or_else(|| RenderError::Empty("a GIF needs at least one frame".into()))?;
    let (w, h) = (first.width(), first.height());
    if let Some((index, f)) = frames
        .iter()
        .enumerate()
        .find(|(_, f)| (f.width(), f.height()) != (w, h))
    {
        return Err(RenderError::FrameSize {
            index,
            expected: (w, h),
            found: (f.width(), f.height()),
        });
    }
    if w == 0 || h == 0 {
        return Err(RenderError::Empty(format!(
            "{w}x{h} frames cannot be a GIF"
        )));
    }
    if w > u16::MAX as u32 || h > u16::MAX as u32 {
        return Err(RenderError::TooLarge {
            width: w as u64,
            height: h as u64,
            limit: "GIF frames are at most 65535 pixels a side",
        });
    }
    let err = |e: gif::EncodingError| RenderError::Encode {
        format: "GIF",
        message: e.to_string(),
    };
    let delay = (delay_ms.saturating_add(5) / 10).clamp(2, u16::MAX as u32) as u16;
    let mut bytes = Vec::new();
    {
        let mut encoder = gif::Encoder::new(&mut bytes, w as u16, h as u16, &[]).map_err(err)?;
        encoder.set_repeat(gif::Repeat::Infinite).map_err(err)?;
        for f in frames {
            let mut frame = index_frame(f);
            frame.delay = delay;
            encoder.write_frame(&frame).map_err(err)?;
        }
    }
    Ok(bytes)
}

/// One frame with its local palette (see [`encode_gif`]).
fn index_frame(img: &RgbImage) -> gif::Frame<'static> {
    let (w, h) = (img.width() as u16, img.height() as u16);
    let px = img.pixels();
    let exact = palette_of(px, |c| c).or_else(|| {
        palette_of(px, |c| {
            if c[0] == c[1] && c[1] == c[2] {
                let g = ((c[0] as u32 >> 1) * 255 + 63) / 127;
                [g as u8; 3]
            } else {
                c
            }
        })
    });
    match exact {
        Some((indices, palette)) => gif::Frame::from_palette_pixels(w, h, indices, palette, None),
        None => gif::Frame::from_rgb_speed(w, h, px, 10),
    }
}

/// Indexed pixels and palette of `px` after `reduce`, or `None` with more than 256 colours.
fn palette_of(px: &[u8], reduce: impl Fn([u8; 3]) -> [u8; 3]) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut grey: [Option<u8>; 256] = [None; 256];
    let mut colours: HashMap<[u8; 3], u8> = HashMap::new();
    let mut palette = Vec::new();
    let mut indices = Vec::with_capacity(px.len() / 3);
    for c in px.chunks_exact(3) {
        let c = reduce([c[0], c[1], c[2]]);
        let is_grey = c[0] == c[1] && c[1] == c[2];
        let known = if is_grey {
            grey[c[0] as usize]
        } else {
            colours.get(&c).copied()
        };
        let i = match known {
            Some(i) => i,
            None => {
                let n = palette.len() / 3;
                if n == 256 {
                    return None;
                }
                palette.extend_from_slice(&c);
                if is_grey {
                    grey[c[0] as usize] = Some(n as u8);
                } else {
                    colours.insert(c, n as u8);
                }
                n as u8
            }
        };
        indices.push(i);
    }
    Some((indices, palette))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn palettes_are_exact_when_they_fit() {
        let px = [0, 0, 0, 255, 0, 0, 0, 0, 0, 7, 7, 7];
        let (idx, pal) = palette_of(&px, |c| c).unwrap();
        assert_eq!(idx, vec![0, 1, 0, 2]);
        assert_eq!(pal, vec![0, 0, 0, 255, 0, 0, 7, 7, 7]);
        // 256 greys and one colour: exact fails, the reduced greys fit.
        let mut many: Vec<u8> = (0..=255u8).flat_map(|g| [g, g, g]).collect();
        many.extend([0, 200, 0]);
        assert!(palette_of(&many, |c| c).is_none());
        let img = RgbImage::from_raw(257, 1, many).unwrap();
        let frame = index_frame(&img);
        assert_eq!(frame.palette.as_ref().unwrap().len(), 129 * 3);
    }
}
