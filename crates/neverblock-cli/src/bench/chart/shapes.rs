//! What each bench's picture shows, taken from its rows: the panels of a line chart
//! (pg-mix, slow-clients, delay-client), or groups of bars (every other bench).

use serde_json::Value;

use super::axis_label;
use crate::bench::Row;

/// Line charts side by side.
#[derive(Debug)]
pub(crate) struct Lines {
    pub(crate) title: String,
    pub(crate) panels: Vec<Panel>,
}

/// One chart: a line per implementation.
#[derive(Debug)]
pub(crate) struct Panel {
    pub(crate) title: String,
    pub(crate) x_label: String,
    pub(crate) y_label: String,
    /// Powers of ten on the y axis, for values spanning orders of magnitude.
    pub(crate) log_y: bool,
    pub(crate) series: Vec<Series>,
}

/// One implementation's points, in x order.
#[derive(Debug, PartialEq)]
pub(crate) struct Series {
    pub(crate) implementation: String,
    pub(crate) points: Vec<(f64, f64)>,
    /// Drawn dashed: a bound or a reference, not a measurement.
    pub(crate) reference: bool,
}

/// Groups of bars: a group per configuration, a bar per implementation.
#[derive(Debug)]
pub(crate) struct Bars {
    pub(crate) title: String,
    pub(crate) y_label: String,
    /// Each configuration's label (its params).
    pub(crate) groups: Vec<String>,
    pub(crate) implementations: Vec<String>,
    /// `values[group][implementation]`; `None` where that implementation has no row.
    pub(crate) values: Vec<Vec<Option<f64>>>,
}

fn param(row: &Row, name: &str) -> Option<f64> {
    row.params.get(name).and_then(Value::as_f64)
}

/// The implementations of `rows`, in order of first appearance.
fn implementations<'a>(rows: impl IntoIterator<Item = &'a Row>) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for row in rows {
        if !names.contains(&row.implementation) {
            names.push(row.implementation.clone());
        }
    }
    names
}

/// A series per implementation of `rows`: `(x, y)` of each row that has both, sorted by x.
fn series_of(rows: &[&Row], x: impl Fn(&Row) -> Option<f64>, y: impl Fn(&Row) -> Option<f64>) -> Vec<Series> {
    implementations(rows.iter().copied())
        .into_iter()
        .filter_map(|implementation| {
            let mut points: Vec<(f64, f64)> = rows
                .iter()
                .filter(|row| row.implementation == implementation)
                .filter_map(|row| Some((x(row)?, y(row)?)))
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            (!points.is_empty()).then_some(Series { implementation, points, reference: false })
        })
        .collect()
}

/// pg-mix: each implementation's advantage over the blocking row of the same k and concurrency
/// (its seconds ÷ theirs) against k, a panel per concurrency.
pub(crate) fn pg_mix(rows: &[Row]) -> Lines {
    let mut concurrencies: Vec<f64> = rows.iter().filter_map(|row| param(row, "concurrency")).collect();
    concurrencies.sort_by(f64::total_cmp);
    concurrencies.dedup();
    let advantage = |row: &Row| {
        let blocking = rows.iter().find(|b| b.implementation == "blocking" && b.params == row.params)?;
        Some(blocking.get("seconds")? / row.get("seconds").filter(|s| *s > 0.0)?)
    };
    let panels = concurrencies
        .into_iter()
        .map(|concurrency| {
            let here: Vec<&Row> = rows
                .iter()
                .filter(|row| row.implementation != "blocking" && param(row, "concurrency") == Some(concurrency))
                .collect();
            Panel {
                title: format!("{concurrency} clients at once"),
                x_label: "k: one long query every k (queries)".into(),
                y_label: "advantage over one blocking connection (×)".into(),
                log_y: false,
                series: series_of(&here, |row| param(row, "k"), advantage),
            }
        })
        .collect();
    Lines { title: "pg-mix: a pg_sleep every k queries".into(), panels }
}

/// slow-clients: MB/s (beside the bound, every client at its rate) and mean time to first byte,
/// against the number of clients.
pub(crate) fn slow_clients(rows: &[Row]) -> Lines {
    let all: Vec<&Row> = rows.iter().collect();
    let clients = |row: &Row| param(row, "clients");
    let mut throughput = series_of(&all, clients, |row| row.get("mb_per_s"));
    // The bound, from any row: its MB/s is `bound_pct` per cent of it.
    let mut bound: Vec<(f64, f64)> = rows
        .iter()
        .filter_map(|row| {
            Some((clients(row)?, row.get("mb_per_s")? * 100.0 / row.get("bound_pct").filter(|p| *p > 0.0)?))
        })
        .collect();
    bound.sort_by(|a, b| a.0.total_cmp(&b.0));
    bound.dedup_by(|a, b| a.0 == b.0);
    if !bound.is_empty() {
        throughput.push(Series {
            implementation: "bound: every client at its rate".into(),
            points: bound,
            reference: true,
        });
    }
    let panel = |title: &str, y_label: &str, series| Panel {
        title: title.into(),
        x_label: "clients at once".into(),
        y_label: y_label.into(),
        log_y: false,
        series,
    };
    Lines {
        title: "slow-clients: throttled downloads".into(),
        panels: vec![
            panel("aggregate throughput", &axis_label("mb_per_s"), throughput),
            panel(
                "time to first byte",
                "mean time to first byte (ms)",
                series_of(&all, clients, |row| row.get("ttfb_mean_ms")),
            ),
        ],
    }
}

/// delay-client: requests/s against the server's delay, on a log scale (the blocking client's
/// few a second beside the fibers' thousands).
pub(crate) fn delay_client(rows: &[Row]) -> Lines {
    let all: Vec<&Row> = rows.iter().collect();
    let series = series_of(&all, |row| param(row, "delay_ms"), |row| row.get("requests_per_s").filter(|r| *r > 0.0));
    Lines {
        title: "delay-client: GETs against a server that answers after a delay".into(),
        panels: vec![Panel {
            title: String::new(),
            x_label: "server delay (ms)".into(),
            y_label: axis_label("requests_per_s"),
            log_y: true,
            series,
        }],
    }
}

/// Any bench: a group per configuration (its params), a bar per implementation, the height
/// its `key` metric.
pub(crate) fn side_by_side(rows: &[Row], key: &str) -> Bars {
    let implementations = implementations(rows);
    let mut configurations: Vec<&serde_json::Map<String, Value>> = Vec::new();
    for row in rows {
        if !configurations.contains(&&row.params) {
            configurations.push(&row.params);
        }
    }
    let values = configurations
        .iter()
        .map(|params| {
            implementations
                .iter()
                .map(|name| rows.iter().find(|r| &r.implementation == name && &&r.params == params)?.get(key))
                .collect()
        })
        .collect();
    let groups = configurations
        .iter()
        .map(|params| params.iter().map(|(k, v)| format!("{k}={}", plain(v))).collect::<Vec<_>>().join(" "))
        .collect();
    let bench = rows.first().map_or("", |row| row.bench.as_str());
    Bars { title: bench.into(), y_label: axis_label(key), groups, implementations, values }
}

/// A param's value as a label shows it: strings without quotes.
fn plain(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
