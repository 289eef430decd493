//! Pictures of MRI volumes without Python: slices in canonical RAS order shown in the
//! radiological convention, mask outlines, multi-row montages (real and synthetic side by side),
//! animated GIFs (slice sweeps, denoising trajectories) and loss curves.
//!
//! # Conventions
//!
//! * **World axes.** The affine of a [`Volume`](medddpm_nifti::Volume) maps voxel indices to NIfTI world coordinates,
//!   which are RAS+ (nifti1.h: "+x = Right, +y = Anterior, +z = Superior"): x grows towards the
//!   subject's **right** side, y towards the front (anterior), z towards the top of the head
//!   (superior). So in MNI space the left hemisphere has negative x.
//! * **Orientation.** [`Reoriented`] finds, for each voxel axis, the world axis its direction is
//!   most aligned with and the sign (like nibabel's `io_orientation` / `aff2axcodes`), and
//!   reads the volume in canonical RAS index order: canonical index 0 along each axis is the
//!   most left / posterior / inferior voxel. Oblique affines are shown as their closest
//!   canonical orientation (no resampling off the voxel grid, as nibabel's
//!   `as_closest_canonical`). So the same anatomy stored with flipped or permuted voxel axes
//!   renders to the same pixels.
//! * **Display (radiological).** Axial (perpendicular to S): the subject's right on the viewer's
//!   left, anterior up. Coronal (perpendicular to A): right on the viewer's left, superior up.
//!   Sagittal (perpendicular to R): **anterior on the viewer's left**, superior up (as ITK-SNAP
//!   and FSLeyes show it). Panels of a montage carry the orientation letters at their edges.
//! * **Spacing.** Each slice is resampled to square pixels by **nearest neighbour** (each output
//!   pixel takes the voxel that contains its centre), using the voxel sizes of the affine (its
//!   column lengths), so a 1x1x3 mm volume keeps its physical proportions. All panels of one
//!   picture share one pixel size ([`Scale`]); by default the finest voxel size is enlarged by
//!   an integer factor until the longest panel side is at least 192 pixels.
//! * **Windowing.** [`Window::Fixed`] maps `lo` to black and `hi` to white, linearly, clamping
//!   outside. [`Window::Percentile`] takes the `lo`-th and `hi`-th percentiles (0-100, linear
//!   interpolation between order statistics, as NumPy's default) of the finite **nonzero**
//!   voxels of the whole volume (all finite voxels if none is nonzero). [`Window::auto`] is
//!   `Fixed(-1, 1)` for volumes whose finite values all lie in [-1, 1] (network-space images,
//!   so real and synthetic panels share one window), else `Percentile(0.5, 99.5)`. Non-finite
//!   voxels are black.
//! * **Masks.** Labels are the voxel values rounded to the nearest integer. Each nonzero label's
//!   boundary in the displayed (resampled) slice, a pixel of label L with a 4-neighbour of
//!   another label (outside the panel counts as label 0), is drawn one pixel wide in the colour
//!   [`label_colour`]: 1 green, 2 red, 3 yellow, 4 cyan, 5 magenta, 6 orange, 7 blue, 8 pink,
//!   then repeating.
//! * **Files.** Every writer encodes in memory, writes a temporary file in the target's
//!   directory, syncs it and renames it over the target, so no half-written file is ever seen.
//!
//! # Example
//! ```no_run
//! use medddpm_nifti::Volume;
//! use medddpm_render::{montage, write_png, MontageOptions, Row, Window};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let real = Volume::read("real.nii.gz")?;
//! let fake = Volume::read("sample_0.nii.gz")?;
//! let mask = Volume::read("mask.nii.gz")?;
//! let rows = [
//!     Row::new("real", &real).with_mask(&mask).with_window(Window::UNIT),
//!     Row::new("synthetic 0", &fake).with_mask(&mask).with_window(Window::UNIT),
//! ];
//! let picture = montage(&rows, &MontageOptions::default())?;
//! write_png("compare.png", &picture)?;
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]

mod anim;
mod chart;
mod error;
mod image;
mod layout;
mod montage;
mod orient;
mod slice;
mod text;
mod window;

pub use anim::{encode_gif, frames_gif, slice_sweep_gif, sweep_frames, SweepOptions};
pub use chart::{loss_curve_image, loss_curve_png, LossCurveOptions};
pub use error::{RenderError, Result};
pub use image::{write_atomic, write_png, RgbImage};
pub use montage::{auto_position, montage, MontageOptions, Row, SlicePosition};
pub use orient::{axcodes, Plane, Reoriented};
pub use slice::{label_colour, render_slice, Scale, PALETTE};
pub use text::{ensure_font, font};
pub use window::{Window, WindowRange};
