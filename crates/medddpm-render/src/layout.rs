//! Panels on a black canvas: the grid of a montage or a sweep frame, with row titles, plane
//! names and orientation letters.

use crate::error::{RenderError, Result};
use crate::image::RgbImage;
use crate::orient::Plane;
use crate::text::{draw_labels, Anchor, Label};

const PAD: u32 = 8;
const HEADER_H: u32 = 24;
const TITLE_H: u32 = 26;
const LETTER_MARGIN: u32 = 16;
const PLAIN_MARGIN: u32 = 4;
/// Extra space between the columns, beyond the panels' margins.
const COLUMN_GAP: u32 = 8;
const WHITE: [u8; 3] = [255, 255, 255];
const LETTER_GREY: [u8; 3] = [190, 190, 190];

/// Lays out `panels[row][column]` (column `c` showing `planes[c]`) on black, with row titles
/// above the rows, optional plane names above the columns and orientation letters around each
/// panel. Panels are centred in their cells.
pub(crate) fn compose(
    panels: &[Vec<RgbImage>],
    planes: &[Plane],
    titles: &[String],
    plane_titles: bool,
    letters: bool,
) -> Result<RgbImage> {
    let grid = Grid::new(panels, planes.len(), titles, plane_titles, letters)?;
    let m = grid.margin;
    let mut img = RgbImage::new(grid.width, grid.height);
    let mut labels = Vec::new();
    if plane_titles {
        labels.extend(planes.iter().enumerate().map(|(c, plane)| Label {
            text: plane.name().to_string(),
            x: (grid.col_x[c] + m + grid.col_w[c] / 2) as i32,
            y: (PAD + HEADER_H / 2) as i32,
            size: 16,
            colour: WHITE,
            anchor: Anchor::Centre,
        }));
    }
    let mut y = PAD + grid.header;
    for (r, row) in panels.iter().enumerate() {
        if grid.title_h > 0 {
            labels.push(Label {
                text: titles[r].clone(),
                x: (PAD + m) as i32,
                y: (y + grid.title_h / 2) as i32,
                size: 18,
                colour: WHITE,
                anchor: Anchor::Left,
            });
        }
        let top = y + grid.title_h + m;
        for (c, panel) in row.iter().enumerate() {
            let px = grid.col_x[c] + m + (grid.col_w[c] - panel.width()) / 2;
            let py = top + (grid.row_h[r] - panel.height()) / 2;
            img.blit(panel, px as i64, py as i64);
            if letters {
                labels.extend(edge_letters(planes[c], panel, (px, py), m));
            }
        }
        y = top + grid.row_h[r] + m;
    }
    draw_labels(&mut img, &labels)?;
    Ok(img)
}

/// The geometry of a [`compose`]d picture.
struct Grid {
    /// Space around each panel (room for the orientation letters when they are drawn).
    margin: u32,
    /// Height of the plane names' band (0 without them).
    header: u32,
    /// Height of each row's title band (0 when every title is empty).
    title_h: u32,
    /// Width of the widest panel of each column.
    col_w: Vec<u32>,
    /// Left edge of each column's cell.
    col_x: Vec<u32>,
    /// Height of the tallest panel of each row.
    row_h: Vec<u32>,
    width: u32,
    height: u32,
}

impl Grid {
    /// The grid of `panels` in `columns` columns; a picture over 2^28 pixels is an error.
    fn new(
        panels: &[Vec<RgbImage>],
        columns: usize,
        titles: &[String],
        plane_titles: bool,
        letters: bool,
    ) -> Result<Self> {
        let m = if letters { LETTER_MARGIN } else { PLAIN_MARGIN };
        let header = if plane_titles { HEADER_H } else { 0 };
        let title_h = if titles.iter().any(|t| !t.is_empty()) {
            TITLE_H
        } else {
            0
        };
        let col_w: Vec<u32> = (0..columns)
            .map(|c| panels.iter().map(|r| r[c].width()).max().unwrap_or(0))
            .collect();
        let row_h: Vec<u32> = panels
            .iter()
            .map(|r| r.iter().map(RgbImage::height).max().unwrap_or(0))
            .collect();
        let width = 2 * PAD as u64
            + col_w.iter().map(|w| (w + 2 * m) as u64).sum::<u64>()
            + COLUMN_GAP as u64 * (col_w.len() as u64).saturating_sub(1);
        let height = 2 * PAD as u64
            + header as u64
            + row_h
                .iter()
                .map(|h| (h + title_h + 2 * m) as u64)
                .sum::<u64>();
        if width * height > 1 << 28 || width > u32::MAX as u64 || height > u32::MAX as u64 {
            return Err(RenderError::TooLarge {
                width,
                height,
                limit: "2^28 pixels",
            });
        }
        let col_x: Vec<u32> = col_w
            .iter()
            .scan(PAD, |x, w| {
                let this = *x;
                *x += w + 2 * m + COLUMN_GAP;
                Some(this)
            })
            .collect();
        Ok(Self {
            margin: m,
            header,
            title_h,
            col_w,
            col_x,
            row_h,
            width: width as u32,
            height: height as u32,
        })
    }
}

/// The orientation letters of `plane` beside the four edges of `panel`, whose top-left corner
/// is at `(px, py)`, centred in the margin `m`: left, right, top, bottom.
fn edge_letters(plane: Plane, panel: &RgbImage, (px, py): (u32, u32), m: u32) -> [Label; 4] {
    let [left, right, up, down] = plane.edge_letters();
    let (cx, cy) = (px + panel.width() / 2, py + panel.height() / 2);
    let half = m / 2;
    [
        (left, px - half, cy),
        (right, px + panel.width() + half, cy),
        (up, cx, py - half),
        (down, cx, py + panel.height() + half),
    ]
    .map(|(ch, x, y)| Label {
        text: ch.to_string(),
        x: x as i32,
        y: y as i32,
        size: 12,
        colour: LETTER_GREY,
        anchor: Anchor::Centre,
    })
}
