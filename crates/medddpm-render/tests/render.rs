//! Behaviour of the renderer through its public API: orientation, radiological display,
//! spacing, windowing, outlines, and the files written.

use std::path::Path;

use medddpm_nifti::{Affine, Volume, IDENTITY};
use medddpm_render::{
    axcodes, encode_gif, frames_gif, loss_curve_image, loss_curve_png, montage, render_slice,
    slice_sweep_gif, sweep_frames, write_png, LossCurveOptions, MontageOptions, Plane, RenderError,
    RgbImage, Row, Scale, SlicePosition, SweepOptions, Window, PALETTE,
};

/// [`render_slice`] in the unit window at one pixel per voxel.
fn unit_slice(
    v: &Volume,
    mask: Option<&Volume>,
    plane: Plane,
    index: usize,
) -> Result<RgbImage, RenderError> {
    render_slice(v, mask, plane, index, Window::UNIT, Scale::Factor(1))
}

/// A volume whose voxel (i, j, k) holds `f` of its world point (rounded to whole mm).
fn sampled(dims: [usize; 3], affine: Affine, f: impl Fn([i64; 3]) -> f32) -> Volume {
    let mut data = Vec::with_capacity(dims.iter().product());
    for k in 0..dims[2] {
        for j in 0..dims[1] {
            for i in 0..dims[0] {
                let ijk = [i as f64, j as f64, k as f64];
                let w: [i64; 3] = std::array::from_fn(|r| {
                    (affine[r][0] * ijk[0]
                        + affine[r][1] * ijk[1]
                        + affine[r][2] * ijk[2]
                        + affine[r][3])
                        .round() as i64
                });
                data.push(f(w));
            }
        }
    }
    Volume::new(dims, data, affine).unwrap()
}

fn affine(cols: [[f64; 3]; 3], origin: [f64; 3]) -> Affine {
    let mut a = IDENTITY;
    for r in 0..3 {
        for (c, col) in cols.iter().enumerate() {
            a[r][c] = col[r];
        }
        a[r][3] = origin[r];
    }
    a
}

/// Asymmetric "anatomy" on the world box x 0..12, y 0..10, z 0..8 (mm), values in [-1, 1].
fn anatomy(w: [i64; 3]) -> f32 {
    let [x, y, z] = w;
    ((x * 7 + y * 13 + z * 29 + x * y) % 23) as f32 / 11.0 - 1.0
}

/// Two labels of different shapes in the same box.
fn labels(w: [i64; 3]) -> f32 {
    let [x, y, z] = w;
    if (7..=10).contains(&x) && (2..=5).contains(&y) && (3..=6).contains(&z) {
        1.0
    } else if (1..=3).contains(&x) && (5..=8).contains(&y) && (1..=2).contains(&z) {
        2.0
    } else {
        0.0
    }
}

/// The same world box as three grids: identity (RAS), flipped along i (LAS), and permuted with
/// a flip (voxel axes P, S, R).
fn grids() -> Vec<([usize; 3], Affine)> {
    vec![
        ([12, 10, 8], IDENTITY),
        (
            [12, 10, 8],
            affine(
                [[-1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
                [11.0, 0.0, 0.0],
            ),
        ),
        (
            [10, 8, 12],
            affine(
                [[0.0, -1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]],
                [0.0, 9.0, 0.0],
            ),
        ),
    ]
}

fn is_colour(p: [u8; 3]) -> bool {
    p[0] != p[1] || p[1] != p[2]
}

fn decode_png(path: &Path) -> (u32, u32, Vec<u8>) {
    let file = std::io::BufReader::new(std::fs::File::open(path).unwrap());
    let mut reader = png::Decoder::new(file).read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgb);
    buf.truncate(info.buffer_size());
    (info.width, info.height, buf)
}

#[test]
fn same_anatomy_on_flipped_and_permuted_grids_renders_identically() {
    let codes: Vec<[char; 3]> = grids().iter().map(|g| axcodes(&g.1).unwrap()).collect();
    assert_eq!(
        codes,
        vec![['R', 'A', 'S'], ['L', 'A', 'S'], ['P', 'S', 'R']]
    );
    let dir = tempfile::tempdir().unwrap();
    let mut pictures = Vec::new();
    let mut files = Vec::new();
    for (n, (dims, a)) in grids().into_iter().enumerate() {
        let image = sampled(dims, a, anatomy);
        let mask = sampled(dims, a, labels);
        let rows = [Row::new("scan", &image)
            .with_mask(&mask)
            .with_window(Window::UNIT)];
        let picture = montage(&rows, &MontageOptions::default()).unwrap();
        let path = dir.path().join(format!("grid{n}.png"));
        write_png(&path, &picture).unwrap();
        files.push(decode_png(&path));
        // A slice sweep along each plane matches too.
        for plane in Plane::ALL {
            let frames = sweep_frames(
                &image,
                Some(&mask),
                plane,
                Window::UNIT,
                &SweepOptions::default(),
            )
            .unwrap();
            pictures.push((n, plane, frames));
        }
        pictures.push((n, Plane::Axial, vec![picture]));
    }
    assert!(files.windows(2).all(|w| w[0] == w[1]), "PNG pixels differ");
    // The montage shows both labels' outlines.
    let (_, _, px) = &files[0];
    let has = |c: [u8; 3]| px.chunks_exact(3).any(|p| p == c);
    assert!(has(PALETTE[0]) && has(PALETTE[1]));
    let per_grid = pictures.len() / 3;
    for k in 0..per_grid {
        assert_eq!(
            pictures[k].2,
            pictures[per_grid + k].2,
            "{:?}",
            pictures[k].1
        );
        assert_eq!(
            pictures[k].2,
            pictures[2 * per_grid + k].2,
            "{:?}",
            pictures[k].1
        );
    }
}

#[test]
fn rows_on_different_grids_cross_at_the_same_world_point() {
    let g = grids();
    let (a, b) = (&g[0], &g[2]);
    let image_a = sampled(a.0, a.1, anatomy);
    let mask_a = sampled(a.0, a.1, labels);
    let image_b = sampled(b.0, b.1, anatomy);
    let rows = [
        Row::new("same", &image_a)
            .with_mask(&mask_a)
            .with_window(Window::UNIT),
        Row::new("same", &image_b).with_window(Window::UNIT),
    ];
    let opts = MontageOptions {
        orientation_labels: false,
        ..MontageOptions::default()
    };
    let two = montage(&rows, &opts).unwrap();
    // Row B has no mask: compare against row A without its mask (the crossing point still
    // comes from A's mask, the first row with one).
    let one = montage(
        &[Row::new("same", &image_b).with_window(Window::UNIT)],
        &MontageOptions {
            position: SlicePosition::Canonical(
                medddpm_render::auto_position(&image_a, Some(&mask_a)).unwrap(),
            ),
            ..opts.clone()
        },
    )
    .unwrap();
    // The montage of B alone (header + one row) equals the bottom row block of the pair.
    let w = two.width() as usize * 3;
    let header = 8 + 24; // padding + plane titles
    let block = (one.height() as usize - 2 * 8 - 24) * w;
    let top = |img: &RgbImage, from: usize| img.pixels()[from..from + block].to_vec();
    assert_eq!(one.width(), two.width());
    assert_eq!(
        top(&one, header * w),
        top(&two, header * w + block),
        "row B crosses elsewhere"
    );
}

/// A 20³ identity-affine volume (voxel = world mm, RAS) of -1 with a +1 blob of 3³ voxels
/// centred at `c`.
fn blob(c: [usize; 3], a: Affine) -> Volume {
    sampled([20, 20, 20], a, |w| {
        let inside = (0..3).all(|r| {
            let v = if a[r][r] < 0.0 { -w[r] } else { w[r] };
            (v - c[r] as i64).abs() <= 1
        });
        if inside {
            1.0
        } else {
            -1.0
        }
    })
}

/// Bounding box (x0, x1, y0, y1) of white pixels.
fn bright_box(img: &RgbImage) -> (u32, u32, u32, u32) {
    let mut b = (u32::MAX, 0, u32::MAX, 0);
    for y in 0..img.height() {
        for x in 0..img.width() {
            if img.get(x, y)[0] > 200 {
                b = (b.0.min(x), b.1.max(x), b.2.min(y), b.3.max(y));
            }
        }
    }
    assert!(b.0 != u32::MAX, "no bright pixel");
    b
}

#[test]
fn radiological_display() {
    let ax = unit_slice(&blob([16, 10, 10], IDENTITY), None, Plane::Axial, 10).unwrap();
    assert_eq!((ax.width(), ax.height()), (20, 20));
    // (blob centre, panel, whether the blob shows in the top half rather than on the left).
    let cases = [
        // +x is the subject's right: a right-sided blob is on the viewer's left in axial and
        // coronal panels.
        ("right", [16, 10, 10], Plane::Axial, false),
        ("right", [16, 10, 10], Plane::Coronal, false),
        // Anterior is up on axial panels and to the left on sagittal ones.
        ("anterior", [10, 16, 10], Plane::Axial, true),
        ("anterior", [10, 16, 10], Plane::Sagittal, false),
        // Superior is up on coronal and sagittal panels.
        ("superior", [10, 10, 16], Plane::Coronal, true),
        ("superior", [10, 10, 16], Plane::Sagittal, true),
    ];
    for (what, centre, plane, up) in cases {
        let b = bright_box(&unit_slice(&blob(centre, IDENTITY), None, plane, 10).unwrap());
        let (edge, side) = if up { (b.3, "top half") } else { (b.1, "left") };
        assert!(
            edge < 10,
            "{what} blob not on the {side} of the {plane:?} panel: {b:?}"
        );
    }
    // An LPS grid (as DICOM stores it): voxel i grows towards the subject's left (x = -i), so
    // a blob at small i is on the right, and still shows on the viewer's left.
    let mut lps = IDENTITY;
    lps[0][0] = -1.0;
    lps[1][1] = -1.0;
    assert_eq!(axcodes(&lps).unwrap(), ['L', 'P', 'S']);
    let right_lps = blob([3, 10, 10], lps); // x = -3 in a grid spanning x = -19..=0
    let b = bright_box(&unit_slice(&right_lps, None, Plane::Axial, 10).unwrap());
    assert!(b.1 < 10, "LPS: right blob not on the left: {b:?}");
    // Slices count from the inferior end: the blob at k = 16 shows in axial slice 16 only.
    let top = blob([10, 10, 16], IDENTITY);
    let slice16 = unit_slice(&top, None, Plane::Axial, 16).unwrap();
    assert!(slice16.pixels().contains(&255));
    let slice3 = unit_slice(&top, None, Plane::Axial, 3).unwrap();
    assert!(!slice3.pixels().contains(&255));
}

#[test]
fn fixed_window_maps_unit_range_to_black_and_white() {
    let v = Volume::new([2, 1, 1], vec![-1.0, 1.0], IDENTITY).unwrap();
    let img = unit_slice(&v, None, Plane::Axial, 0).unwrap();
    // Radiological: voxel i = 1 (more right) is on the left.
    assert_eq!(img.pixels(), &[255, 255, 255, 0, 0, 0]);
    // A percentile window over a ramp of nonzero values 1..=100 (plus background zeros).
    let mut data: Vec<f32> = (1..=100).map(|v| v as f32).collect();
    data.extend([0.0; 28]);
    let ramp = Volume::new([128, 1, 1], data, IDENTITY).unwrap();
    let win = Window::Percentile { lo: 0.0, hi: 100.0 };
    let range = win.resolve(&ramp).unwrap();
    assert_eq!((range.lo, range.hi), (1.0, 100.0));
    let img = render_slice(&ramp, None, Plane::Axial, 0, win, Scale::Factor(1)).unwrap();
    let grey = |i: usize| img.get(127 - i as u32, 0)[0]; // column of voxel i
    assert_eq!((grey(0), grey(99), grey(100)), (0, 255, 0));
    assert_eq!(grey(50), (50.0f64 / 99.0 * 255.0).round() as u8);
}

#[test]
fn outline_marks_only_the_boundary() {
    let dims = [16, 16, 16];
    let image = Volume::new(dims, vec![0.0; 4096], IDENTITY).unwrap();
    // Label 1: a cube over voxels 2..=6; label 2: a cube over 9..=13.
    let mask = sampled(dims, IDENTITY, |w| {
        let inside = |lo: i64, hi: i64| w.iter().all(|&c| (lo..=hi).contains(&c));
        if inside(2, 6) {
            1.0
        } else if inside(9, 13) {
            2.0
        } else {
            0.0
        }
    });
    let f = 2; // pixels per voxel
    for (slice, label, lo, hi) in [(4, 1usize, 2u32, 6u32), (11, 2, 9, 13)] {
        let img = render_slice(
            &image,
            Some(&mask),
            Plane::Axial,
            slice,
            Window::UNIT,
            Scale::Factor(f),
        )
        .unwrap();
        assert_eq!((img.width(), img.height()), (32, 32));
        // Voxel index v covers display pixels (15 - v) * f .. (15 - v) * f + f - 1.
        let (p0, p1) = ((15 - hi) * f, (15 - lo) * f + f - 1);
        let mut boundary = 0;
        for y in 0..32 {
            for x in 0..32 {
                let inside = (p0..=p1).contains(&x) && (p0..=p1).contains(&y);
                let edge = inside && (x == p0 || x == p1 || y == p0 || y == p1);
                let px = img.get(x, y);
                if edge {
                    assert_eq!(px, PALETTE[label - 1], "({x}, {y}) should be outline");
                    boundary += 1;
                } else {
                    assert_eq!(px, [128; 3], "({x}, {y}) should stay grey");
                }
            }
        }
        assert_eq!(boundary, 4 * (p1 - p0));
    }
    // A slice missing the cubes has no colour at all.
    let img = unit_slice(&image, Some(&mask), Plane::Axial, 0).unwrap();
    assert!(!img
        .pixels()
        .chunks_exact(3)
        .any(|p| is_colour([p[0], p[1], p[2]])));
}

#[test]
fn anisotropic_voxels_keep_their_physical_proportions() {
    let mut a = IDENTITY;
    a[2][2] = 2.0; // 1 x 1 x 2 mm
    let v = sampled([16, 16, 8], a, |w| if w[2] >= 14 { 1.0 } else { -1.0 });
    let size = |plane, scale| {
        let img = render_slice(&v, None, plane, 3, Window::UNIT, scale).unwrap();
        (img.width(), img.height())
    };
    // 16 x 16 x 16 mm: every panel is square.
    for plane in Plane::ALL {
        assert_eq!(size(plane, Scale::Factor(1)), (16, 16), "{plane:?}");
        assert_eq!(size(plane, Scale::Factor(3)), (48, 48), "{plane:?}");
    }
    assert_eq!(size(Plane::Coronal, Scale::PixelsPerMm(0.5)), (8, 8));
    // The top slice (k = 7, z = 14 mm) fills the top two pixel rows of the coronal panel.
    let img = unit_slice(&v, None, Plane::Coronal, 8).unwrap();
    for y in 0..16 {
        assert_eq!(img.get(5, y)[0], if y < 2 { 255 } else { 0 }, "row {y}");
    }
    // Default scale: a 32³ volume is not a thumbnail.
    let small = Volume::new([32, 32, 32], vec![0.0; 32 * 32 * 32], IDENTITY).unwrap();
    let img = render_slice(
        &small,
        None,
        Plane::Axial,
        0,
        Window::UNIT,
        Scale::default(),
    )
    .unwrap();
    assert_eq!((img.width(), img.height()), (192, 192));
    let picture = montage(&[Row::new("x", &small)], &MontageOptions::default()).unwrap();
    assert!(picture.width() >= 3 * 192 && picture.height() >= 192);
}

#[test]
fn gifs_decode_with_the_expected_frames() {
    let dir = tempfile::tempdir().unwrap();
    let g = &grids()[2];
    let image = sampled(g.0, g.1, anatomy);
    let mask = sampled(g.0, g.1, labels);
    let path = dir.path().join("sweep.gif");
    let opts = SweepOptions::default();
    slice_sweep_gif(
        &image,
        Some(&mask),
        Plane::Axial,
        Window::UNIT,
        &path,
        &opts,
    )
    .unwrap();
    let frames = sweep_frames(&image, Some(&mask), Plane::Axial, Window::UNIT, &opts).unwrap();
    assert_eq!(frames.len(), 8); // 8 mm of S extent, one frame per axial slice
    let decoded = decode_gif(&path);
    assert_eq!(decoded.len(), 8);
    for (f, (w, h, delay, rgba)) in frames.iter().zip(&decoded) {
        assert_eq!((*w as u32, *h as u32), (f.width(), f.height()));
        assert_eq!(*delay, 8); // 80 ms = 12.5 frames per second
        let rgb: Vec<u8> = rgba
            .chunks_exact(4)
            .flat_map(|p| [p[0], p[1], p[2]])
            .collect();
        // Grey slices with outlines fit a 256-colour palette, or the grey levels were
        // reduced by at most one step of 2.
        assert!(rgb
            .iter()
            .zip(f.pixels())
            .all(|(a, b)| (*a as i32 - *b as i32).abs() <= 2));
    }
    // Generic frames: exact colours, loop forever.
    let frames: Vec<RgbImage> = (0..3u8)
        .map(|n| {
            let mut img = RgbImage::new(40, 30);
            img.put(n as u32, 0, [255, 0, 0]);
            img.put(39, 29, [0, 0, 200 + n]);
            img
        })
        .collect();
    let path = dir.path().join("trajectory.gif");
    frames_gif(&frames, 250, &path).unwrap();
    let decoded = decode_gif(&path);
    assert_eq!(decoded.len(), 3);
    for (f, (w, h, delay, rgba)) in frames.iter().zip(&decoded) {
        assert_eq!((*w, *h, *delay), (40, 30, 25));
        let rgb: Vec<u8> = rgba
            .chunks_exact(4)
            .flat_map(|p| [p[0], p[1], p[2]])
            .collect();
        assert_eq!(rgb, f.pixels());
    }
    let mut options = gif::DecodeOptions::new();
    options.set_color_output(gif::ColorOutput::RGBA);
    let decoder = options
        .read_info(std::io::BufReader::new(std::fs::File::open(&path).unwrap()))
        .unwrap();
    assert_eq!(decoder.repeat(), gif::Repeat::Infinite);
    // Frames of different sizes are refused, naming the first odd one.
    let mut odd = frames.clone();
    odd.push(RgbImage::new(41, 30));
    match encode_gif(&odd, 100) {
        Err(RenderError::FrameSize {
            index,
            expected,
            found,
        }) => assert_eq!((index, expected, found), (3, (40, 30), (41, 30))),
        other => panic!("{other:?}"),
    }
    assert!(matches!(encode_gif(&[], 100), Err(RenderError::Empty(_))));
}

/// (width, height, delay in cs, RGBA pixels) of each frame.
fn decode_gif(path: &Path) -> Vec<(u16, u16, u16, Vec<u8>)> {
    let mut options = gif::DecodeOptions::new();
    options.set_color_output(gif::ColorOutput::RGBA);
    let mut decoder = options
        .read_info(std::io::BufReader::new(std::fs::File::open(path).unwrap()))
        .unwrap();
    let mut out = Vec::new();
    while let Some(f) = decoder.read_next_frame().unwrap() {
        out.push((f.width, f.height, f.delay, f.buffer.to_vec()));
    }
    out
}

#[test]
fn png_round_trip_and_atomic_writes() {
    let dir = tempfile::tempdir().unwrap();
    let mut img = RgbImage::new(7, 5);
    img.put(6, 4, [1, 2, 3]);
    img.put(0, 0, [250, 128, 0]);
    let path = dir.path().join("x.png");
    write_png(&path, &img).unwrap();
    write_png(&path, &img).unwrap(); // overwriting is fine
    let (w, h, px) = decode_png(&path);
    assert_eq!((w, h), (7, 5));
    assert_eq!(px, img.pixels());
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        names,
        vec![std::ffi::OsString::from("x.png")],
        "temp file left"
    );

    let missing = dir.path().join("no-such-dir").join("y.png");
    let err = write_png(&missing, &img).unwrap_err();
    assert!(matches!(&err, RenderError::Io { path, .. } if path == &missing));
    assert!(
        err.to_string().contains(&missing.display().to_string()),
        "{err}"
    );
    assert!(!missing.exists());
}

#[test]
fn mask_on_another_grid_is_refused_naming_both_dims() {
    let image = Volume::new([4, 4, 4], vec![0.0; 64], IDENTITY).unwrap();
    let mask = Volume::new([4, 4, 2], vec![0.0; 32], IDENTITY).unwrap();
    let rows = [Row::new("real", &image).with_mask(&mask)];
    let err = montage(&rows, &MontageOptions::default()).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("real") && text.contains("[4, 4, 4]") && text.contains("[4, 4, 2]"),
        "{text}"
    );
    let mut moved = IDENTITY;
    moved[0][3] = 5.0;
    let shifted = Volume::new([4, 4, 4], vec![0.0; 64], moved).unwrap();
    let err = unit_slice(&image, Some(&shifted), Plane::Axial, 0).unwrap_err();
    assert!(err.to_string().contains("affines differ"), "{err}");
    assert!(matches!(
        montage(&[], &MontageOptions::default()),
        Err(RenderError::Empty(_))
    ));
    assert!(matches!(
        unit_slice(&image, None, Plane::Axial, 4),
        Err(RenderError::InvalidOption(_))
    ));
}

#[test]
fn loss_curves() {
    let dir = tempfile::tempdir().unwrap();
    let opts = LossCurveOptions {
        width: 640,
        height: 400,
        ..LossCurveOptions::default()
    };
    // Over two decades (log axis), with a NaN and an infinity skipped.
    let mut points: Vec<(u64, f64)> = (0..300)
        .map(|s| {
            (
                s,
                1.0 / (1.0 + s as f64 / 3.0) * (1.0 + 0.2 * ((s * 7) % 5) as f64),
            )
        })
        .collect();
    points[17].1 = f64::NAN;
    points[40].1 = f64::INFINITY;
    let path = dir.path().join("loss.png");
    loss_curve_png(&points, &path, &opts).unwrap();
    let (w, h, px) = decode_png(&path);
    assert_eq!((w, h), (640, 400));
    // Both series are drawn (raw light blue, moving average red).
    assert!(px.chunks_exact(3).any(|p| p == [160, 190, 225]));
    assert!(px.chunks_exact(3).any(|p| p == [200, 30, 30]));
    // Linear range, and a single point.
    let flat: Vec<(u64, f64)> = (0..10).map(|s| (s, 0.5 + s as f64 * 0.01)).collect();
    assert_eq!(loss_curve_image(&flat, &opts).unwrap().width(), 640);
    let one = loss_curve_image(&[(5, 0.3)], &opts).unwrap();
    assert_eq!((one.width(), one.height()), (640, 400));
    assert!(matches!(
        loss_curve_image(&[(1, f64::NAN)], &opts),
        Err(RenderError::Empty(_))
    ));
    assert!(matches!(
        loss_curve_image(&[], &opts),
        Err(RenderError::Empty(_))
    ));
}
