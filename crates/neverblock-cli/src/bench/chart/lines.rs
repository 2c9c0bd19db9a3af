//! Line charts, panels side by side: a line with a marker at each point for every
//! implementation, in its colour, a legend in each panel.

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::shapes::{Lines, Panel};
use super::{compact, draw_legend, plot_error, Colours, REFERENCE};

/// One panel's width and the picture's height, in pixels.
const PANEL_WIDTH: u32 = 560;
const HEIGHT: u32 = 460;

/// `lines` as SVG text.
pub(crate) fn draw(lines: &Lines, colours: &Colours) -> anyhow::Result<String> {
    let mut svg = String::new();
    {
        let width = PANEL_WIDTH * lines.panels.len().max(1) as u32;
        let root = SVGBackend::with_string(&mut svg, (width, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let root = root.titled(&lines.title, ("sans-serif", 20)).map_err(plot_error)?;
        for (panel, area) in lines.panels.iter().zip(root.split_evenly((1, lines.panels.len().max(1)))) {
            draw_panel(panel, &area, colours)?;
        }
        root.present().map_err(plot_error)?;
    }
    Ok(svg)
}

fn draw_panel(panel: &Panel, area: &DrawingArea<SVGBackend<'_>, Shift>, colours: &Colours) -> anyhow::Result<()> {
    let points = || panel.series.iter().flat_map(|series| series.points.iter());
    let (x_min, x_max) = bounds(points().map(|p| p.0));
    let (y_min, y_max) = bounds(points().map(|p| p.1));
    let x_range = pad(x_min, x_max, false);
    if panel.log_y {
        let low = 10f64.powf(y_min.max(f64::MIN_POSITIVE).log10().floor());
        // Headroom above the highest point, where the legend sits.
        let high = 10f64.powf((y_max * 3.0).max(f64::MIN_POSITIVE).log10().ceil().max(low.log10() + 1.0));
        draw_on(panel, area, colours, x_range, (low..high).log_scale())
    } else {
        draw_on(panel, area, colours, x_range, pad(0f64.min(y_min), y_max, true))
    }
}

/// Draws `panel` on `area` with its y axis `y_range` (linear or logarithmic).
fn draw_on<Y>(
    panel: &Panel,
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    colours: &Colours,
    x_range: std::ops::Range<f64>,
    y_range: Y,
) -> anyhow::Result<()>
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d::<RangedCoordf64, Y>(x_range.into(), y_range)
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .x_desc(&panel.x_label)
        .x_label_formatter(&|x| compact(*x))
        .y_label_formatter(&|y| compact(*y))
        .y_desc(&panel.y_label)
        .axis_desc_style(("sans-serif", 14))
        .label_style(("sans-serif", 12))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(plot_error)?;
    for (i, series) in panel.series.iter().enumerate() {
        let (colour, width) = if series.reference {
            // A bound, not a measurement: thin, grey and dashed beside the measured lines.
            (REFERENCE, 2)
        } else {
            // Each later line thinner, so one drawn over another (both at a bound) leaves it showing.
            (colours.of_implementation(&series.implementation), 5u32.saturating_sub(i as u32).max(2))
        };
        let style = colour.stroke_width(width);
        let drawn = if series.reference {
            let dashes = DashedLineSeries::new(series.points.iter().copied(), 8, 5, style);
            chart.draw_series(dashes).map_err(plot_error)?
        } else {
            let marker = width + 1;
            let line = LineSeries::new(series.points.iter().copied(), style).point_size(marker);
            chart.draw_series(line).map_err(plot_error)?
        };
        drawn
            .label(series.implementation.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(width)));
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)
}

/// The least and greatest of `values` (0 and 1 for none).
fn bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values
        .fold(None, |acc: Option<(f64, f64)>, v| Some(acc.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v)))))
        .unwrap_or((0.0, 1.0))
}

/// `min..max` with a margin (more above for `room_above`: the legend sits in the upper left).
fn pad(min: f64, max: f64, room_above: bool) -> std::ops::Range<f64> {
    let span = if max > min { max - min } else { max.abs().max(1.0) };
    let above = if room_above { 0.25 } else { 0.05 };
    let below = if min == 0.0 { 0.0 } else { span * 0.05 };
    (min - below)..(max + span * above)
}
