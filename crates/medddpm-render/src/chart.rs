//! The loss-versus-step chart.

use std::ops::Range;
use std::path::Path;

use plotters::coord::ranged1d::{
    AsRangedCoord, DefaultFormatting, KeyPointHint, Ranged, ValueFormatter,
};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::error::{RenderError, Result};
use crate::image::{write_atomic, RgbImage};
use crate::text::{ensure_font, font};

/// Options of [`loss_curve_png`].
#[derive(Debug, Clone, PartialEq)]
pub struct LossCurveOptions {
    /// Width in pixels (at least 200; default 1000).
    pub width: u32,
    /// Height in pixels (at least 150; default 600).
    pub height: u32,
    /// Chart title (default "Training loss").
    pub title: String,
}

impl Default for LossCurveOptions {
    fn default() -> Self {
        Self {
            width: 1000,
            height: 600,
            title: "Training loss".into(),
        }
    }
}

const RAW: RGBColor = RGBColor(160, 190, 225);
const AVERAGE: RGBColor = RGBColor(200, 30, 30);

/// The chart of [`loss_curve_png`] as a picture.
pub fn loss_curve_image(points: &[(u64, f64)], opts: &LossCurveOptions) -> Result<RgbImage> {
    check_size(opts)?;
    let pts = finite_points(points)?;
    let skipped = points.len() - pts.len();
    let (y_lo, y_hi) = pts
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| {
            (lo.min(p.1), hi.max(p.1))
        });
    let log = y_lo > 0.0 && y_hi / y_lo > 10.0;
    let chart = Chart::new(title_noting_skipped(&opts.title, skipped), pts);

    ensure_font()?;
    let mut img = RgbImage::new(opts.width, opts.height);
    {
        let size = (opts.width, opts.height);
        let root = BitMapBackend::with_buffer(img.pixels_mut(), size).into_drawing_area();
        if log {
            let axis = LogAxis {
                lo: y_lo / 1.25,
                hi: y_hi * 1.25,
            };
            chart.draw(&root, axis, "loss (log scale)")?;
        } else {
            let pad = if y_hi > y_lo {
                (y_hi - y_lo) * 0.05
            } else {
                (y_hi.abs() * 0.1).max(1e-6)
            };
            chart.draw(&root, y_lo - pad..y_hi + pad, "loss")?;
        }
        root.present().map_err(draw_err)?;
    }
    Ok(img)
}

/// Refuses a chart smaller than 200x150 or larger than 2^26 pixels.
fn check_size(opts: &LossCurveOptions) -> Result<()> {
    if opts.width < 200 || opts.height < 150 {
        return Err(RenderError::InvalidOption(format!(
            "a loss chart of {}x{} pixels is too small (at least 200x150)",
            opts.width, opts.height
        )));
    }
    if opts.width as u64 * opts.height as u64 > 1 << 26 {
        return Err(RenderError::TooLarge {
            width: opts.width as u64,
            height: opts.height as u64,
            limit: "2^26 pixels for a chart",
        });
    }
    Ok(())
}

/// The points with a finite loss, sorted by step; an error when there is none.
fn finite_points(points: &[(u64, f64)]) -> Result<Vec<(f64, f64)>> {
    let mut pts: Vec<(f64, f64)> = points
        .iter()
        .filter(|(_, l)| l.is_finite())
        .map(|&(s, l)| (s as f64, l))
        .collect();
    if pts.is_empty() {
        return Err(RenderError::Empty(format!(
            "no finite loss value among {} points",
            points.len()
        )));
    }
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok(pts)
}

/// `title`, with the number of skipped non-finite points when there are any.
fn title_noting_skipped(title: &str, skipped: usize) -> String {
    let mut title = title.to_string();
    if skipped > 0 {
        title.push_str(&format!(
            " ({skipped} non-finite point{} skipped)",
            if skipped == 1 { "" } else { "s" }
        ));
    }
    title
}

/// Writes a PNG line chart of loss against step, atomically: the raw per-step loss in a light
/// colour, and its trailing moving average over `max(1, n / 20)` points (`n` finite points,
/// the window stated in the legend) in a strong one. The y axis is logarithmic when all losses
/// are positive and span more than a decade, else linear. Non-finite losses are skipped and
/// their count is noted in the title; with no finite loss the call fails with
/// [`RenderError::Empty`]. Points are sorted by step; a single point is drawn as a dot.
pub fn loss_curve_png(
    points: &[(u64, f64)],
    path: impl AsRef<Path>,
    opts: &LossCurveOptions,
) -> Result<()> {
    write_atomic(
        path.as_ref(),
        &loss_curve_image(points, opts)?.encode_png()?,
    )
}

/// Trailing mean of the last `w` losses at each point.
fn moving_average(pts: &[(f64, f64)], w: usize) -> Vec<(f64, f64)> {
    let mut sum = 0.0;
    pts.iter()
        .enumerate()
        .map(|(i, &(x, y))| {
            sum += y;
            if i >= w {
                sum -= pts[i - w].1;
            }
            (x, sum / (i + 1).min(w) as f64)
        })
        .collect()
}

fn draw_err<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> RenderError {
    RenderError::Draw {
        what: "loss chart",
        message: e.to_string(),
    }
}

/// Compact tick text: three significant digits, scientific outside [1e-3, 1e5).
fn tick(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if !(1e-3..1e5).contains(&a) {
        format!("{v:.1e}")
    } else {
        let decimals = (2 - a.log10().floor() as i32).max(0) as usize;
        let s = format!("{v:.decimals$}");
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    }
}

/// A logarithmic axis over `lo..hi` (both positive) with ticks at 1, 2, 5 x 10^k (fewer when
/// crowded) and light lines at 1..9 x 10^k. (plotters' own `log_scale` repeats the decade
/// ticks and crowds the light lines.)
struct LogAxis {
    lo: f64,
    hi: f64,
}

impl LogAxis {
    /// `m * 10^e` for every multiplier `m` and every `step`-th decade `e`, inside the range.
    fn points(&self, multipliers: &[f64], step: usize) -> Vec<f64> {
        let e0 = self.lo.log10().floor() as i32;
        let e1 = self.hi.log10().ceil() as i32;
        (e0..=e1)
            .step_by(step)
            .flat_map(|e| multipliers.iter().map(move |m| m * 10f64.powi(e)))
            .filter(|v| (self.lo..=self.hi).contains(v))
            .collect()
    }
}

impl Ranged for LogAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let t = (value.max(f64::MIN_POSITIVE).ln() - self.lo.ln()) / (self.hi.ln() - self.lo.ln());
        limit.0 + (t * (limit.1 - limit.0) as f64).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        let max = hint.max_num_points().max(1);
        if hint.weight().allow_light_points() {
            let all = self.points(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0], 1);
            return if all.len() <= max { all } else { Vec::new() };
        }
        for multipliers in [&[1.0, 2.0, 5.0][..], &[1.0, 3.0], &[1.0]] {
            let pts = self.points(multipliers, 1);
            if pts.len() <= max {
                return pts;
            }
        }
        let mut step = 2;
        loop {
            let pts = self.points(&[1.0], step);
            if pts.len() <= max {
                return pts;
            }
            step *= 2;
        }
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

struct Chart {
    title: String,
    raw: Vec<(f64, f64)>,
    average: Vec<(f64, f64)>,
    window: usize,
    x_range: Range<f64>,
    /// At most one x tick per whole step, so step labels are integers.
    x_labels: usize,
}

impl Chart {
    /// The chart of `raw` (finite, sorted by step, at least one point) with its trailing
    /// moving average over `max(1, n / 20)` points.
    fn new(title: String, raw: Vec<(f64, f64)>) -> Self {
        let n = raw.len();
        let window = (n / 20).max(1);
        let average = moving_average(&raw, window);
        let (x_lo, x_hi) = (raw[0].0, raw[n - 1].0);
        let x_range = if x_hi > x_lo {
            x_lo..x_hi
        } else {
            (x_lo - 1.0).max(0.0)..x_hi + 1.0
        };
        Self {
            title,
            raw,
            average,
            window,
            x_labels: ((x_range.end - x_range.start) as usize + 1).clamp(2, 10),
            x_range,
        }
    }

    fn draw<Y>(
        &self,
        root: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
        y: Y,
        y_desc: &str,
    ) -> Result<()>
    where
        Y: AsRangedCoord<Value = f64>,
        Y::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        root.fill(&WHITE).map_err(draw_err)?;
        let mut chart = ChartBuilder::on(root)
            .caption(&self.title, font(22))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(72)
            .build_cartesian_2d::<RangedCoordf64, Y::CoordDescType>(
                self.x_range.clone().into(),
                y.into(),
            )
            .map_err(draw_err)?;
        chart
            .configure_mesh()
            .x_desc("step")
            .y_desc(y_desc)
            .x_labels(self.x_labels)
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| tick(*v))
            .label_style(font(14))
            .axis_desc_style(font(16))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(draw_err)?;
        draw_line(
            &mut chart,
            &self.raw,
            RAW.stroke_width(1),
            "loss per step".into(),
        )?;
        if self.raw.len() == 1 {
            chart
                .draw_series(std::iter::once(Circle::new(
                    self.raw[0],
                    4,
                    AVERAGE.filled(),
                )))
                .map_err(draw_err)?;
        }
        let average = format!(
            "moving average ({} point{})",
            self.window,
            if self.window == 1 { "" } else { "s" }
        );
        draw_line(&mut chart, &self.average, AVERAGE.stroke_width(2), average)?;
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(120, 120, 120))
            .label_font(font(14))
            .draw()
            .map_err(draw_err)?;
        Ok(())
    }
}

/// One line of the chart, and its entry in the legend (drawn 2 px wide whatever `style`'s
/// width, so that the thin raw line stays visible there).
fn draw_line<'a, CT: CoordTranslate<From = (f64, f64)>>(
    chart: &mut ChartContext<'a, BitMapBackend<'a>, CT>,
    points: &[(f64, f64)],
    style: ShapeStyle,
    label: String,
) -> Result<()> {
    let legend = ShapeStyle {
        stroke_width: 2,
        ..style
    };
    chart
        .draw_series(std::iter::once(PathElement::new(points.to_vec(), style)))
        .map_err(draw_err)?
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], legend));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moving_average_is_trailing() {
        let pts: Vec<(f64, f64)> = [1.0, 3.0, 5.0, 7.0]
            .iter()
            .enumerate()
            .map(|(i, &y)| (i as f64, y))
            .collect();
        let avg: Vec<f64> = moving_average(&pts, 2).iter().map(|p| p.1).collect();
        assert_eq!(avg, vec![1.0, 2.0, 4.0, 6.0]);
    }

    #[test]
    fn ticks_are_short() {
        let cases = [
            (0.0, "0"),
            (0.05, "0.05"),
            (0.1234, "0.123"),
            (12.0, "12"),
            (2e-5, "2.0e-5"),
        ];
        for (v, want) in cases {
            assert_eq!(tick(v), want, "{v}");
        }
    }

    #[test]
    fn log_axis_ticks() {
        use plotters::coord::ranged1d::BoldPoints;
        let axis = LogAxis { lo: 0.008, hi: 0.7 };
        let bold = axis.key_points(BoldPoints(20));
        let text: Vec<String> = bold.iter().map(|v| tick(*v)).collect();
        assert_eq!(text, ["0.01", "0.02", "0.05", "0.1", "0.2", "0.5"]);
        assert_eq!(axis.key_points(BoldPoints(3)).len(), 2); // 0.01, 0.1
        let wide = LogAxis { lo: 1e-9, hi: 1.0 };
        assert!(wide.key_points(BoldPoints(4)).len() <= 4);
        assert_eq!(axis.map(&0.008, (0, 100)), 0);
        assert_eq!(axis.map(&0.7, (0, 100)), 100);
    }
}
