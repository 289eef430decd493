//! The PNG chart: the median step times of every configuration measured, and the forward pass
//! by operation class, as horizontal bars. Drawn with plotters' bitmap backend and the
//! embedded font; encoded by `png` and written atomically.

use std::path::Path;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::cells::fmt_ms;
use super::{breakdown_classes, config_label, is_reference, uniform_workload, workload};
use crate::error::{ChartError, Error, FileAction, Result};
use crate::record::BenchRecord;

/// Width of the chart, pixels.
pub(super) const WIDTH: u32 = 1200;
const TRAIN_COLOUR: RGBColor = RGBColor(31, 119, 180);
const SAMPLE_COLOUR: RGBColor = RGBColor(255, 127, 14);
const REF_TRAIN_COLOUR: RGBColor = RGBColor(80, 80, 80);
const REF_SAMPLE_COLOUR: RGBColor = RGBColor(170, 170, 170);
const CLASS_COLOURS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// Text style in the embedded font. Keep sizes even: plotters' ab_glyph renderer places each
/// glyph at `size / 2 + top` truncated to an integer, which lifts small glyphs such as `.` by
/// a pixel at odd sizes.
fn font(size: u32) -> TextStyle<'static> {
    medddpm_render::font(size).color(&BLACK)
}

/// Records the timing chart shows: measured ones, and PyTorch reference rows.
pub(super) fn plotted(records: &[BenchRecord]) -> Vec<&BenchRecord> {
    records
        .iter()
        .filter(|r| r.timings_verified() || is_reference(r))
        .filter(|r| r.train_step_median_ms.is_some() || r.sample_step_median_ms.is_some())
        .collect()
}

fn chart_label(r: &BenchRecord, uniform: bool) -> String {
    let mut s = config_label(r);
    if is_reference(r) {
        s.push_str(" (ref.)");
    }
    if !uniform {
        s = format!("{s}, {}", workload(r));
    }
    s
}

/// Axis tick text for a millisecond axis of extent `max`.
fn tick(v: f64, max: f64) -> String {
    if max >= 20.0 {
        format!("{v:.0}")
    } else if max >= 2.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

/// The axes of a panel: milliseconds across, one row per configuration.
type Bars<'c, 'a> = ChartContext<'c, BitMapBackend<'a>, Cartesian2d<RangedCoordf64, RowAxis>>;

/// A category axis of `n` rows centred on 0, 1, ... n-1, continuous in between so bars can sit
/// at fractional offsets inside a row. (plotters' `with_key_points` would do, but its mesh
/// needs a value formatter that combinator lacks.)
struct RowAxis(usize);

impl Ranged for RowAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let t = (value + 0.5) / self.0 as f64;
        limit.0 + (t * (limit.1 - limit.0) as f64).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            (0..self.0).map(|i| i as f64).collect()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        -0.5..self.0 as f64 - 0.5
    }
}

/// Row `i` of `n` (top to bottom) is centred on y = n - 1 - i; integer key points carry the
/// labels.
fn row_y(i: usize, n: usize) -> f64 {
    (n - 1 - i) as f64
}

/// A one-line legend of colour swatches, drawn in its own strip so it never hides a bar.
fn draw_legend(area: &Area, entries: &[(String, RGBColor)], x0: i32) -> Result<(), ChartError> {
    let style = font(16).pos(Pos::new(HPos::Left, VPos::Center));
    let (_, h) = area.dim_in_pixel();
    let y = h as i32 / 2;
    let mut x = x0;
    for (label, colour) in entries {
        area.draw(&Rectangle::new(
            [(x, y - 7), (x + 14, y + 7)],
            colour.filled(),
        ))?;
        area.draw(&Text::new(label.clone(), (x + 20, y), style.clone()))?;
        let (w, _) = area.estimate_text_size(label, &style)?;
        x += 20 + w as i32 + 28;
    }
    Ok(())
}

fn label_width(area: &Area, labels: &[String], style: &TextStyle) -> Result<u32, ChartError> {
    let mut max = 0;
    for l in labels {
        max = max.max(area.estimate_text_size(l, style)?.0);
    }
    Ok(max)
}

const TIMING_ROW: u32 = 56;
const BREAKDOWN_ROW: u32 = 34;
/// Caption, legend strip and x axis around a panel's rows.
const PANEL_EXTRA: u32 = 150;

/// Draws a panel's caption; returns the area below it.
fn draw_caption<'a>(area: &Area<'a>, caption: &str) -> Result<Area<'a>, ChartError> {
    let (caption_area, rest) = area.split_vertically(36);
    caption_area.draw(&Text::new(
        caption.to_string(),
        (12, 18),
        font(20).pos(Pos::new(HPos::Left, VPos::Center)),
    ))?;
    Ok(rest)
}

/// The axes of a panel in `chart_area`: x from 0 to `x_max` ms described by `x_desc`, one row
/// per label, the labels in a margin `label_w` wide.
fn draw_axes<'c, 'a>(
    chart_area: &'c Area<'a>,
    labels: &[String],
    label_w: u32,
    x_max: f64,
    x_desc: &str,
) -> Result<Bars<'c, 'a>, ChartError> {
    let n = labels.len();
    let y_label = |y: &f64| -> String {
        let k = y.round();
        if (0.0..n as f64).contains(&k) {
            labels[n - 1 - k as usize].clone()
        } else {
            String::new()
        }
    };
    let x_tick = |v: &f64| tick(*v, x_max);
    let mut chart = ChartBuilder::on(chart_area)
        .margin_left(10)
        .margin_right(30)
        .margin_top(5)
        .x_label_area_size(50)
        .y_label_area_size(label_w + 15)
        .build_cartesian_2d(0.0..x_max, RowAxis(n))?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_label_formatter(&y_label)
        .x_label_formatter(&x_tick)
        .label_style(font(16))
        .axis_desc_style(font(16))
        .x_desc(x_desc)
        .draw()?;
    Ok(chart)
}

/// The legend of the timing panel: burn's colours and the reference's, where present.
fn timing_legend(rows: &[&BenchRecord]) -> Vec<(String, RGBColor)> {
    let any_ref = rows.iter().any(|r| is_reference(r));
    let any_burn = rows.iter().any(|r| !is_reference(r));
    let mut legend = Vec::new();
    if any_burn {
        legend.push(("training micro-step".to_string(), TRAIN_COLOUR));
        legend.push(("sampling step".to_string(), SAMPLE_COLOUR));
    }
    if any_ref {
        legend.push((
            "training micro-step (PyTorch ref.)".to_string(),
            REF_TRAIN_COLOUR,
        ));
        legend.push((
            "sampling step (PyTorch ref.)".to_string(),
            REF_SAMPLE_COLOUR,
        ));
    }
    legend
}

/// Grouped horizontal bars: per configuration, the training micro-step above the sampling step.
fn draw_timings(area: &Area, rows: &[&BenchRecord], uniform: bool) -> Result<(), ChartError> {
    let rest = draw_caption(area, "Median step time (lower is better)")?;
    if rows.is_empty() {
        rest.draw(&Text::new(
            "No configuration was measured (all failed, unsupported or disagreeing).",
            (12, 30),
            font(16).pos(Pos::new(HPos::Left, VPos::Center)),
        ))?;
        return Ok(());
    }
    let (legend_area, chart_area) = rest.split_vertically(30);
    let labels: Vec<String> = rows.iter().map(|r| chart_label(r, uniform)).collect();
    let label_w = label_width(area, &labels, &font(16))?;
    draw_legend(&legend_area, &timing_legend(rows), label_w as i32 + 30)?;

    let max = rows
        .iter()
        .flat_map(|r| [r.train_step_median_ms, r.sample_step_median_ms])
        .flatten()
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    let x_max = if max > 0.0 { max * 1.18 } else { 1.0 };
    let desc = "milliseconds (median of synchronised steps)";
    let mut chart = draw_axes(&chart_area, &labels, label_w, x_max, desc)?;
    for (i, r) in rows.iter().enumerate() {
        draw_timing_bars(&mut chart, r, row_y(i, rows.len()))?;
    }
    Ok(())
}

/// One configuration's two bars, centred on `y`, each with its value.
fn draw_timing_bars(chart: &mut Bars, r: &BenchRecord, y: f64) -> Result<(), ChartError> {
    let value_style = font(14).pos(Pos::new(HPos::Left, VPos::Center));
    let (train_c, sample_c) = if is_reference(r) {
        (REF_TRAIN_COLOUR, REF_SAMPLE_COLOUR)
    } else {
        (TRAIN_COLOUR, SAMPLE_COLOUR)
    };
    let bars = [
        (r.train_step_median_ms, train_c, y + 0.03, y + 0.4),
        (r.sample_step_median_ms, sample_c, y - 0.4, y - 0.03),
    ];
    for (v, colour, y0, y1) in bars {
        let Some(v) = v.filter(|v| v.is_finite()) else {
            continue;
        };
        chart.draw_series(std::iter::once(Rectangle::new(
            [(0.0, y0), (v, y1)],
            colour.filled(),
        )))?;
        chart.draw_series(std::iter::once(Text::new(
            format!(" {}", fmt_ms(v)),
            (v, 0.5 * (y0 + y1)),
            value_style.clone(),
        )))?;
    }
    Ok(())
}

/// Stacked horizontal bars of the forward pass split by operation class.
fn draw_breakdown(area: &Area, rows: &[&BenchRecord], uniform: bool) -> Result<(), ChartError> {
    let rest = draw_caption(
        area,
        "Forward pass by operation class (each operation synchronised)",
    )?;
    let (legend_area, chart_area) = rest.split_vertically(30);
    let classes = breakdown_classes(rows.iter().copied());
    let colour = |i: usize| CLASS_COLOURS[i % CLASS_COLOURS.len()];
    let labels: Vec<String> = rows.iter().map(|r| chart_label(r, uniform)).collect();
    let label_w = label_width(area, &labels, &font(16))?;
    let legend: Vec<(String, RGBColor)> = classes
        .iter()
        .enumerate()
        .map(|(i, c)| (c.clone(), colour(i)))
        .collect();
    draw_legend(&legend_area, &legend, label_w as i32 + 30)?;

    let sums: Vec<f64> = rows
        .iter()
        .map(|r| r.breakdown_ms.values().filter(|v| v.is_finite()).sum())
        .collect();
    let max = sums.iter().copied().fold(0.0f64, f64::max);
    let x_max = if max > 0.0 { max * 1.15 } else { 1.0 };
    let desc = "milliseconds per forward pass";
    let mut chart = draw_axes(&chart_area, &labels, label_w, x_max, desc)?;
    let value_style = font(14).pos(Pos::new(HPos::Left, VPos::Center));
    for (i, r) in rows.iter().enumerate() {
        let y = row_y(i, rows.len());
        let mut x = 0.0;
        for (k, c) in classes.iter().enumerate() {
            let Some(&v) = r.breakdown_ms.get(c).filter(|v| v.is_finite()) else {
                continue;
            };
            chart.draw_series(std::iter::once(Rectangle::new(
                [(x, y - 0.35), (x + v, y + 0.35)],
                colour(k).filled(),
            )))?;
            x += v;
        }
        chart.draw_series(std::iter::once(Text::new(
            format!(" {} ms", fmt_ms(sums[i])),
            (x, y),
            value_style.clone(),
        )))?;
    }
    Ok(())
}

/// Draws the benchmark chart as a PNG: grouped bars of the median training micro-step and
/// sampling step per configuration (Ok rows, plus PyTorch reference rows in grey), and, when
/// an Ok row has a forward breakdown, a second panel of stacked bars by operation class.
///
/// Needs no system fonts (the font is embedded). The file is written to a temporary name beside
/// `path` and renamed, so a reader never sees a half-written image.
pub fn write_png_chart(records: &[BenchRecord], path: &Path, title: &str) -> Result<()> {
    medddpm_render::ensure_font().map_err(ChartError::Render)?;
    let (pixels, height) = draw(records, title)?;
    let png_bytes = medddpm_render::RgbImage::from_raw(WIDTH, height, pixels)
        .and_then(|image| image.encode_png())
        .map_err(ChartError::Render)?;
    medddpm_atomic::write(path, &png_bytes).map_err(Error::io(FileAction::Write, path))
}

/// The chart's RGB pixels and its height.
fn draw(records: &[BenchRecord], title: &str) -> Result<(Vec<u8>, u32), ChartError> {
    let rows = plotted(records);
    let breakdown_rows: Vec<&BenchRecord> = records
        .iter()
        .filter(|r| r.timings_verified() && !r.breakdown_ms.is_empty())
        .collect();
    // Labels only need to tell apart the rows drawn, not the failed ones.
    let uniform = uniform_workload(
        records
            .iter()
            .filter(|r| r.timings_verified() || is_reference(r)),
    );

    let title_h = 50;
    let timing_h = if rows.is_empty() {
        90
    } else {
        PANEL_EXTRA + TIMING_ROW * rows.len() as u32
    };
    let breakdown_h = if breakdown_rows.is_empty() {
        0
    } else {
        PANEL_EXTRA + BREAKDOWN_ROW * breakdown_rows.len() as u32
    };
    let height = title_h + timing_h + breakdown_h;
    let mut pixels = vec![255u8; WIDTH as usize * height as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let (title_area, body) = root.split_vertically(title_h);
        title_area.draw(&Text::new(
            title.to_string(),
            (WIDTH as i32 / 2, title_h as i32 / 2),
            font(24).pos(Pos::new(HPos::Center, VPos::Center)),
        ))?;
        let (timing_area, breakdown_area) = body.split_vertically(timing_h);
        draw_timings(&timing_area, &rows, uniform)?;
        if !breakdown_rows.is_empty() {
            draw_breakdown(&breakdown_area, &breakdown_rows, uniform)?;
        }
        root.present()?;
    }
    Ok((pixels, height))
}
