//! `--chart FILE.svg`: a bench's rows drawn as a picture, in the shape its experiment
//! was published in where it has one (pg-mix: the fibered pool's advantage against k,
//! a panel per concurrency; slow-clients: MB/s and time to first byte against clients;
//! delay-client: requests/s against the delay), side-by-side bars of each implementation
//! elsewhere. SVG only (plotters' SVG backend writes `<text>` elements, so no font
//! library is needed); each implementation keeps one colour across the picture.

mod bars;
mod lines;
mod shapes;
#[cfg(test)]
mod tests;

use std::path::Path;

use anyhow::Context as _;
use plotters::chart::{ChartContext, SeriesLabelPosition};
use plotters::coord::CoordTranslate;
use plotters::prelude::SVGBackend;
use plotters::style::{Color, RGBColor, BLACK, WHITE};

use super::Row;

/// Writes `rows` (one bench's, `key` its headline metric) to `path` as an SVG picture.
pub(crate) fn write(rows: &[Row], key: &str, path: &Path) -> anyhow::Result<()> {
    let svg = draw(rows, key)?;
    std::fs::write(path, svg).with_context(|| format!("write the chart {}", path.display()))
}

/// The picture of `rows`, as SVG text.
pub(crate) fn draw(rows: &[Row], key: &str) -> anyhow::Result<String> {
    let bench = rows.first().map_or("", |row| row.bench.as_str());
    let colours = Colours::of(rows);
    match bench {
        "pg-mix" => lines::draw(&shapes::pg_mix(rows), &colours),
        "slow-clients" => lines::draw(&shapes::slow_clients(rows), &colours),
        "delay-client" => lines::draw(&shapes::delay_client(rows), &colours),
        _ => bars::draw(&shapes::side_by_side(rows, key), &colours),
    }
}

/// Each implementation's colour: neverblock always blue, the blocking baseline grey, the rest
/// from a palette that colour-blind readers tell apart (Okabe and Ito's), in order of appearance.
pub(crate) struct Colours(Vec<(String, RGBColor)>);

const NEVERBLOCK: RGBColor = RGBColor(0x00, 0x72, 0xB2);
const BLOCKING: RGBColor = RGBColor(0x80, 0x80, 0x80);
/// A reference line (a bound), not an implementation's.
const REFERENCE: RGBColor = RGBColor(0xA0, 0xA0, 0xA0);
const PALETTE: [RGBColor; 8] = [
    RGBColor(0xD5, 0x5E, 0x00),
    RGBColor(0x00, 0x9E, 0x73),
    RGBColor(0xE6, 0x9F, 0x00),
    RGBColor(0xCC, 0x79, 0xA7),
    RGBColor(0x56, 0xB4, 0xE9),
    RGBColor(0x00, 0x00, 0x00),
    RGBColor(0x8C, 0x56, 0x4B),
    RGBColor(0x6A, 0x3D, 0x9A),
];

impl Colours {
    fn of(rows: &[Row]) -> Colours {
        let mut colours: Vec<(String, RGBColor)> = Vec::new();
        let mut next = PALETTE.iter().cycle();
        for row in rows {
            let name = &row.implementation;
            if colours.iter().any(|(known, _)| known == name) {
                continue;
            }
            let colour = match name.as_str() {
                "neverblock" => NEVERBLOCK,
                "blocking" => BLOCKING,
                _ => *next.next().expect("the palette cycles"),
            };
            colours.push((name.clone(), colour));
        }
        Colours(colours)
    }

    /// The colour of `implementation` (black for one no row named).
    pub(crate) fn of_implementation(&self, implementation: &str) -> RGBColor {
        self.0.iter().find(|(name, _)| name == implementation).map_or(RGBColor(0, 0, 0), |(_, colour)| *colour)
    }
}

/// The legend of `chart`'s series at `position`, in the style every chart shares.
fn draw_legend<'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, CT>,
    position: SeriesLabelPosition,
) -> anyhow::Result<()> {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(plot_error)
}

/// plotters' drawing errors, for `?` in an `anyhow` function.
fn plot_error(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("drawing the chart: {e}")
}

/// How an axis names a metric: `requests_per_s` → `requests/s`, `round_trip_ns` → `round trip (ns)`,
/// `ttfb_mean_ms` → `ttfb mean (ms)`, `advantage_x` → `advantage (×)`.
pub(crate) fn axis_label(metric: &str) -> String {
    let words = |name: &str| name.replace('_', " ").replace("mb", "MB");
    if let Some(name) = metric.strip_suffix("_per_s") {
        return format!("{}/s", words(name));
    }
    let units = [("_ns", "ns"), ("_ms", "ms"), ("_s", "s"), ("_x", "×"), ("_pct", "%"), ("_count", "count")];
    for (suffix, unit) in units {
        if let Some(name) = metric.strip_suffix(suffix) {
            return format!("{} ({unit})", words(name));
        }
    }
    match metric {
        "seconds" => "time (s)".to_string(),
        other => words(other),
    }
}

/// A figure in about four digits, as the charts print them: `12345` → `12.35k`, `0.0123` → `0.012`, `250` → `250`.
pub(crate) fn compact(value: f64) -> String {
    let (scaled, suffix) = match value.abs() {
        v if v >= 1e9 => (value / 1e9, "G"),
        v if v >= 1e6 => (value / 1e6, "M"),
        v if v >= 1e4 => (value / 1e3, "k"),
        _ => (value, ""),
    };
    let whole_digits = scaled.abs().max(1.0).log10().floor() as usize + 1;
    let decimals = 4usize.saturating_sub(whole_digits);
    let text = format!("{scaled:.decimals$}");
    let text = if text.contains('.') { text.trim_end_matches('0').trim_end_matches('.') } else { &text };
    format!("{text}{suffix}")
}
