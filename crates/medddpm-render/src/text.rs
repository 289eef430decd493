//! Text on pictures, with the embedded font (DejaVu Sans, see `assets/DejaVuSans-LICENSE.txt`),
//! so rendering needs no system fonts or fontconfig.

use std::sync::OnceLock;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::FontStyle;

use crate::error::{RenderError, Result};
use crate::image::RgbImage;

/// DejaVu Sans, subset to Latin, Greek, punctuation and common symbols.
static FONT: &[u8] = include_bytes!("../assets/DejaVuSans-subset.ttf");
/// The family plotters asks for by default, so chart axes use the embedded font too.
const FAMILY: &str = "sans-serif";

/// Registers the embedded font, once per process (also for other plotters charts, such as
/// the bench's).
pub fn ensure_font() -> Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED
        .get_or_init(|| plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_ok());
    if ok {
        Ok(())
    } else {
        Err(RenderError::Draw {
            what: "text",
            message: "the embedded font could not be parsed".into(),
        })
    }
}

/// Text style in the embedded font. Keep sizes even: plotters' ab_glyph renderer places each
/// glyph at `size / 2 + top` truncated to an integer, which shifts glyphs at odd sizes.
pub fn font(size: u32) -> TextStyle<'static> {
    TextStyle::from((FAMILY, size).into_font())
}

/// Horizontal anchor of a [`Label`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum Anchor {
    /// (x, y) is the left end, vertically centred.
    Left,
    /// (x, y) is the centre.
    Centre,
}

/// A line of text to draw.
#[derive(Debug, Clone)]
pub(crate) struct Label {
    pub text: String,
    pub x: i32,
    pub y: i32,
    pub size: u32,
    pub colour: [u8; 3],
    pub anchor: Anchor,
}

/// Draws `labels` onto `img` (anti-aliased over what is there; clipped at the edges).
pub(crate) fn draw_labels(img: &mut RgbImage, labels: &[Label]) -> Result<()> {
    if labels.is_empty() {
        return Ok(());
    }
    ensure_font()?;
    let err = |e: DrawingAreaErrorKind<_>| RenderError::Draw {
        what: "text",
        message: e.to_string(),
    };
    let size = (img.width(), img.height());
    let root = BitMapBackend::with_buffer(img.pixels_mut(), size).into_drawing_area();
    for l in labels {
        let h = match l.anchor {
            Anchor::Left => HPos::Left,
            Anchor::Centre => HPos::Center,
        };
        let [r, g, b] = l.colour;
        let colour = RGBColor(r, g, b);
        let style = font(l.size).color(&colour).pos(Pos::new(h, VPos::Center));
        root.draw(&Text::new(l.text.as_str(), (l.x, l.y), style))
            .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}
