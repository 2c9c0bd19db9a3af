//! Side-by-side bars: a group per configuration, a bar per implementation in its colour,
//! each bar's value written above it, and a legend.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::shapes::Bars;
use super::{compact, draw_legend, plot_error, Colours};

/// The width of one bar, and the picture's height, in pixels.
const BAR_WIDTH: u32 = 46;
const HEIGHT: u32 = 480;

/// `bars` as SVG text.
pub(crate) fn draw(bars: &Bars, colours: &Colours) -> anyhow::Result<String> {
    let per_group = bars.implementations.len().max(1);
    // A bar's slot per implementation, and one slot of space between groups.
    let slots = bars.groups.len() * (per_group + 1);
    let width = (slots as u32 * BAR_WIDTH + 160).max(640);
    let top = bars.values.iter().flatten().flatten().fold(0f64, |a, &b| a.max(b));
    let top = if top > 0.0 { top * 1.2 } else { 1.0 };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(&bars.title, ("sans-serif", 20))
            .margin(14)
            .x_label_area_size(56)
            .y_label_area_size(80)
            .build_cartesian_2d(0f64..slots as f64, 0f64..top)
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .x_desc("configuration")
            .y_label_formatter(&|v| compact(*v))
            .y_desc(&bars.y_label)
            .axis_desc_style(("sans-serif", 14))
            .label_style(("sans-serif", 12))
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(plot_error)?;
        for (i, implementation) in bars.implementations.iter().enumerate() {
            let colour = colours.of_implementation(implementation);
            let bars_of = bars.values.iter().enumerate().filter_map(|(group, values)| {
                let value = values[i]?;
                let left = (group * (per_group + 1) + i) as f64 + 0.5;
                Some(Rectangle::new([(left, 0.0), (left + 0.9, value)], colour.filled()))
            });
            chart
                .draw_series(bars_of)
                .map_err(plot_error)?
                .label(implementation.as_str())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 18, y + 5)], colour.filled()));
            let value_labels = bars.values.iter().enumerate().filter_map(|(group, values)| {
                let value = values[i]?;
                let centre = (group * (per_group + 1) + i) as f64 + 0.95;
                let style = ("sans-serif", 11).into_font().color(&BLACK).pos(Pos::new(HPos::Center, VPos::Bottom));
                Some(Text::new(compact(value), (centre, value), style))
            });
            chart.draw_series(value_labels).map_err(plot_error)?;
        }
        let group_labels = bars.groups.iter().enumerate().map(|(group, label)| {
            let centre = (group * (per_group + 1)) as f64 + 0.5 + per_group as f64 * 0.5;
            let style = ("sans-serif", 12).into_font().color(&BLACK).pos(Pos::new(HPos::Center, VPos::Top));
            EmptyElement::at((centre, 0.0)) + Text::new(label.clone(), (0, 6), style)
        });
        chart.draw_series(group_labels).map_err(plot_error)?;
        draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        root.present().map_err(plot_error)?;
    }
    Ok(svg)
}
