//! The pictures, checked in their SVG text: axis labels with units, a legend entry and one
//! series (a line or a set of bars) in its own colour per implementation.

use serde_json::json;

use super::{axis_label, draw, shapes, Colours, NEVERBLOCK};
use crate::bench::Row;

fn row(bench: &str, implementation: &str, params: serde_json::Value, metrics: &[(&str, f64)]) -> Row {
    metrics.iter().fold(Row::new(bench, implementation, params), |row, (name, value)| row.metric(name, *value))
}

/// The SVG colour `#RRGGBB` of `implementation` in `rows`' picture.
fn colour(rows: &[Row], implementation: &str) -> String {
    let c = Colours::of(rows).of_implementation(implementation);
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

/// The texts of the picture's `<text>` elements.
fn texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| Some(t.split_once('>')?.1.split_once("</text>")?.0.trim().to_string()))
        .collect()
}

/// How many `<polyline>`s of three points or more are stroked in `colour`: a line series each
/// (a legend's sample is a two-point line).
fn lines_in(svg: &str, colour: &str) -> usize {
    svg.split("<polyline")
        .skip(1)
        .filter_map(|p| p.split("/>").next())
        .filter(|p| p.contains(&format!("stroke=\"{colour}\"")))
        .filter(|p| {
            p.split("points=\"")
                .nth(1)
                .is_some_and(|points| points.split('"').next().unwrap_or("").split_whitespace().count() >= 3)
        })
        .count()
}

/// How many `<rect>`s are filled in `colour`: the bars, and the legend's marker.
fn rects_in(svg: &str, colour: &str) -> usize {
    svg.split("<rect")
        .skip(1)
        .filter(|r| r.split("/>").next().unwrap_or("").contains(&format!("fill=\"{colour}\"")))
        .count()
}

fn assert_has_text(svg: &str, wanted: &str) {
    let texts = texts(svg);
    assert!(texts.iter().any(|t| t == wanted), "no <text>{wanted}</text> among {texts:?}");
}

#[test]
fn axes_name_their_metric_and_its_unit() {
    for (metric, label) in [
        ("requests_per_s", "requests/s"),
        ("mb_per_s", "MB/s"),
        ("round_trip_ns", "round trip (ns)"),
        ("ttfb_mean_ms", "ttfb mean (ms)"),
        ("mean_s", "mean (s)"),
        ("advantage_x", "advantage (×)"),
        ("max_fibers_count", "max fibers (count)"),
        ("seconds", "time (s)"),
    ] {
        assert_eq!(axis_label(metric), label, "{metric}");
    }
}

#[test]
fn bars_show_each_implementation_in_its_colour_per_configuration_with_a_legend() {
    let rows: Vec<Row> = [1, 2]
        .into_iter()
        .flat_map(|workers| {
            ["neverblock", "nginx", "go-net-http"].into_iter().enumerate().map(move |(i, name)| {
                let params = json!({"workers": workers, "connections": 100});
                row("http-hello", name, params, &[("requests_per_s", 10_000.0 * (i + workers) as f64)])
            })
        })
        .collect();
    let svg = draw(&rows, "requests_per_s").unwrap();
    assert_has_text(&svg, "requests/s");
    assert_has_text(&svg, "configuration");
    assert_has_text(&svg, "connections=100 workers=1");
    assert_has_text(&svg, "30k");
    for name in ["neverblock", "nginx", "go-net-http"] {
        assert_has_text(&svg, name);
        assert_eq!(rects_in(&svg, &colour(&rows, name)), 3, "{name}: a bar per configuration, a legend marker");
    }
    let distinct: std::collections::HashSet<String> =
        ["neverblock", "nginx", "go-net-http"].iter().map(|name| colour(&rows, name)).collect();
    assert_eq!(distinct.len(), 3, "each implementation its own colour");
}

#[test]
fn pg_mix_draws_the_advantage_against_k_in_a_panel_per_concurrency() {
    let mut rows = Vec::new();
    for concurrency in [10, 100] {
        for k in [5, 20, 50] {
            let params = json!({"k": k, "concurrency": concurrency});
            rows.push(row("pg-mix", "neverblock", params.clone(), &[("seconds", 0.5), ("advantage_x", 4.0)]));
            rows.push(row("pg-mix", "blocking", params.clone(), &[("seconds", 2.0)]));
            rows.push(row("pg-mix", "go-pgx", params, &[("seconds", 1.0)]));
        }
    }
    let lines = shapes::pg_mix(&rows);
    assert_eq!(lines.panels.len(), 2);
    let names: Vec<&str> = lines.panels[0].series.iter().map(|s| s.implementation.as_str()).collect();
    assert_eq!(names, ["neverblock", "go-pgx"], "the blocking row is what the others are measured against");
    assert_eq!(lines.panels[0].series[0].points, [(5.0, 4.0), (20.0, 4.0), (50.0, 4.0)]);
    assert_eq!(lines.panels[0].series[1].points, [(5.0, 2.0), (20.0, 2.0), (50.0, 2.0)]);
    let svg = draw(&rows, "seconds").unwrap();
    for text in [
        "10 clients at once",
        "100 clients at once",
        "advantage over one blocking connection (×)",
        "neverblock",
        "go-pgx",
    ] {
        assert_has_text(&svg, text);
    }
    assert_has_text(&svg, "k: one long query every k (queries)");
    assert_eq!(
        lines_in(&svg, &format!("#{:02X}{:02X}{:02X}", NEVERBLOCK.0, NEVERBLOCK.1, NEVERBLOCK.2)),
        2,
        "a line per panel"
    );
    assert_eq!(lines_in(&svg, &colour(&rows, "go-pgx")), 2);
    assert_eq!(lines_in(&svg, &colour(&rows, "blocking")), 0);
}

#[test]
fn slow_clients_draws_throughput_beside_its_bound_and_time_to_first_byte() {
    let rows: Vec<Row> = [50, 100, 200]
        .into_iter()
        .flat_map(|clients| {
            let params = json!({"clients": clients, "workers": 2, "window_s": 10.0});
            let c = clients as f64;
            [
                row(
                    "slow-clients",
                    "neverblock",
                    params.clone(),
                    &[("mb_per_s", c), ("bound_pct", 100.0), ("ttfb_mean_ms", 1.0)],
                ),
                row(
                    "slow-clients",
                    "nginx",
                    params,
                    &[("mb_per_s", c * 0.9), ("bound_pct", 90.0), ("ttfb_mean_ms", 2.0)],
                ),
            ]
        })
        .collect();
    let svg = draw(&rows, "mb_per_s").unwrap();
    for text in
        ["MB/s", "mean time to first byte (ms)", "clients at once", "aggregate throughput", "time to first byte"]
    {
        assert_has_text(&svg, text);
    }
    assert_has_text(&svg, "bound: every client at its rate");
    for name in ["neverblock", "nginx"] {
        assert_eq!(lines_in(&svg, &colour(&rows, name)), 2, "{name}: a line in each panel");
    }
    let bound = shapes::slow_clients(&rows).panels[0].series.iter().find(|s| s.reference).map(|s| s.points.clone());
    assert_eq!(bound, Some(vec![(50.0, 50.0), (100.0, 100.0), (200.0, 200.0)]));
}

#[test]
fn delay_client_draws_requests_per_second_against_the_delay_on_a_log_scale() {
    let rows: Vec<Row> = [0, 100, 500]
        .into_iter()
        .flat_map(|delay| {
            let params = json!({"delay_ms": delay, "requests": 1000});
            [
                row(
                    "delay-client",
                    "neverblock",
                    params.clone(),
                    &[("requests_per_s", 9000.0 / (1.0 + delay as f64 / 100.0))],
                ),
                row("delay-client", "blocking", params, &[("requests_per_s", 1000.0 / (1.0 + delay as f64))]),
            ]
        })
        .collect();
    let lines = shapes::delay_client(&rows);
    assert!(lines.panels[0].log_y);
    let svg = draw(&rows, "requests_per_s").unwrap();
    for text in ["requests/s", "server delay (ms)", "neverblock", "blocking"] {
        assert_has_text(&svg, text);
    }
    for name in ["neverblock", "blocking"] {
        assert_eq!(lines_in(&svg, &colour(&rows, name)), 1, "{name}");
    }
}
