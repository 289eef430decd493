//! A plain RGB pixel buffer, PNG encoding and atomic file writes.

use std::path::Path;

use crate::error::{RenderError, Result};

/// An 8-bit RGB picture, rows top to bottom, 3 bytes per pixel, no padding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RgbImage {
    width: u32,
    height: u32,
    pixels: Vec<u8>,
}

impl RgbImage {
    /// A black picture.
    pub fn new(width: u32, height: u32) -> Self {
        Self {
            width,
            height,
            pixels: vec![0; width as usize * height as usize * 3],
        }
    }

    /// Wraps `pixels` (`width * height * 3` bytes, RGB, row-major).
    pub fn from_raw(width: u32, height: u32, pixels: Vec<u8>) -> Result<Self> {
        let expected = width as usize * height as usize * 3;
        if pixels.len() != expected {
            return Err(RenderError::InvalidOption(format!(
                "{width}x{height} RGB pixels need {expected} bytes, got {}",
                pixels.len()
            )));
        }
        Ok(Self {
            width,
            height,
            pixels,
        })
    }

    /// Width in pixels.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// Height in pixels.
    pub fn height(&self) -> u32 {
        self.height
    }

    /// The RGB bytes, row-major.
    pub fn pixels(&self) -> &[u8] {
        &self.pixels
    }

    /// The RGB bytes, mutable (the size cannot change).
    pub fn pixels_mut(&mut self) -> &mut [u8] {
        &mut self.pixels
    }

    /// Takes the RGB bytes out.
    pub fn into_pixels(self) -> Vec<u8> {
        self.pixels
    }

    /// Colour of pixel (x, y), x to the right, y down. Panics outside the picture.
    pub fn get(&self, x: u32, y: u32) -> [u8; 3] {
        assert!(
            x < self.width && y < self.height,
            "pixel ({x}, {y}) outside"
        );
        let o = (y as usize * self.width as usize + x as usize) * 3;
        [self.pixels[o], self.pixels[o + 1], self.pixels[o + 2]]
    }

    /// Sets pixel (x, y). Panics outside the picture.
    pub fn put(&mut self, x: u32, y: u32, rgb: [u8; 3]) {
        assert!(
            x < self.width && y < self.height,
            "pixel ({x}, {y}) outside"
        );
        let o = (y as usize * self.width as usize + x as usize) * 3;
        self.pixels[o..o + 3].copy_from_slice(&rgb);
    }

    /// Copies `src` with its top-left corner at (x, y); what falls outside is clipped.
    pub fn blit(&mut self, src: &RgbImage, x: i64, y: i64) {
        for sy in 0..src.height as i64 {
            let dy = y + sy;
            if dy < 0 || dy >= self.height as i64 {
                continue;
            }
            let x0 = x.max(0);
            let x1 = (x + src.width as i64).min(self.width as i64);
            if x0 >= x1 {
                return;
            }
            let s = ((sy * src.width as i64 + (x0 - x)) * 3) as usize;
            let d = ((dy * self.width as i64 + x0) * 3) as usize;
            let n = ((x1 - x0) * 3) as usize;
            self.pixels[d..d + n].copy_from_slice(&src.pixels[s..s + n]);
        }
    }

    /// The picture as PNG bytes (8-bit RGB).
    pub fn encode_png(&self) -> Result<Vec<u8>> {
        if self.width == 0 || self.height == 0 {
            return Err(RenderError::Empty(format!(
                "a {}x{} picture cannot be a PNG",
                self.width, self.height
            )));
        }
        let err = |e: png::EncodingError| RenderError::Encode {
            format: "PNG",
            message: e.to_string(),
        };
        let mut bytes = Vec::new();
        {
            let mut encoder = png::Encoder::new(&mut bytes, self.width, self.height);
            encoder.set_color(png::ColorType::Rgb);
            encoder.set_depth(png::BitDepth::Eight);
            let mut writer = encoder.write_header().map_err(err)?;
            writer.write_image_data(&self.pixels).map_err(err)?;
            writer.finish().map_err(err)?;
        }
        Ok(bytes)
    }
}

/// Writes `image` as a PNG file, atomically (see [`write_atomic`]).
pub fn write_png(path: impl AsRef<Path>, image: &RgbImage) -> Result<()> {
    write_atomic(path.as_ref(), &image.encode_png()?)
}

/// Writes `bytes` to `path` atomically ([`medddpm_atomic::write`]: a temporary file in
/// `path`'s directory, synced and renamed over `path`); on any failure the temporary file is
/// removed and `path` is left as it was. Errors name `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    medddpm_atomic::write(path, bytes).map_err(|source| RenderError::Io {
        path: path.to_path_buf(),
        source,
    })
}
