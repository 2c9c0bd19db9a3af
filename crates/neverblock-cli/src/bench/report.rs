//! Result rows: a readable table, or one JSON object per row; and their chart when asked.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{chart, Common};

/// One measured configuration: `{"bench", "impl", "params", "metrics"}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Row {
    pub(crate) bench: String,
    #[serde(rename = "impl")]
    pub(crate) implementation: String,
    pub(crate) params: Map<String, Value>,
    /// Named `<name>_<unit>`.
    pub(crate) metrics: Map<String, Value>,
}

impl Row {
    pub(crate) fn new(bench: &str, implementation: &str, params: Value) -> Row {
        Row {
            bench: bench.into(),
            implementation: implementation.into(),
            params: params.as_object().cloned().unwrap_or_default(),
            metrics: Map::new(),
        }
    }

    pub(crate) fn metric(mut self, name: &str, value: impl Into<Value>) -> Row {
        self.metrics.insert(name.into(), value.into());
        self
    }

    pub(crate) fn get(&self, name: &str) -> Option<f64> {
        self.metrics.get(name).and_then(Value::as_f64)
    }
}

/// Adds `vs_neverblock_ratio` (this row's `key` ÷ neverblock's, for rows with the
/// same params) to every row, then prints them (as JSON with `--json`) and, with
/// `--chart FILE`, draws them there.
///
/// # Errors
///
/// When the chart cannot be drawn or written.
pub(crate) fn print(rows: Vec<Row>, key: &str, common: &Common) -> anyhow::Result<()> {
    let rows = with_ratios(rows, key);
    if common.json {
        for row in &rows {
            println!("{}", serde_json::to_string(row).expect("rows serialise"));
        }
    } else {
        print_table(&rows);
    }
    match &common.chart {
        Some(path) => chart::write(&rows, key, path),
        None => Ok(()),
    }
}

/// `rows` with each one's `vs_neverblock_ratio`, grouped by configuration in the order neverblock ran them.
fn with_ratios(mut rows: Vec<Row>, key: &str) -> Vec<Row> {
    let baselines: Vec<(Map<String, Value>, f64)> = rows
        .iter()
        .filter(|r| r.implementation == "neverblock")
        .filter_map(|r| Some((r.params.clone(), r.get(key)?)))
        .collect();
    for row in rows.iter_mut().filter(|r| r.implementation != "neverblock") {
        let base = baselines.iter().find(|(p, _)| *p == row.params).map(|(_, v)| *v);
        if let (Some(base), Some(own)) = (base, row.get(key)) {
            if base > 0.0 {
                row.metrics.insert("vs_neverblock_ratio".into(), round(own / base).into());
            }
        }
    }
    // Group rows by configuration, in the order neverblock ran them.
    rows.sort_by_key(|r| baselines.iter().position(|(p, _)| *p == r.params).unwrap_or(usize::MAX));
    rows
}

/// `x` to three decimals, as rows show figures.
pub(crate) fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn render(v: &Value) -> String {
    match v {
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => format!("{f:.6}").trim_end_matches('0').trim_end_matches('.').to_string(),
            _ => n.to_string(),
        },
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn print_table(rows: &[Row]) {
    let Some(first) = rows.first() else { return };
    let mut metric_names: Vec<&String> = Vec::new();
    for row in rows {
        for name in row.metrics.keys() {
            if !metric_names.contains(&name) {
                metric_names.push(name);
            }
        }
    }
    let mut header = vec!["impl".to_string(), "params".to_string()];
    header.extend(metric_names.iter().map(|n| n.to_string()));
    let mut lines = vec![header];
    for row in rows {
        let params = row.params.iter().map(|(k, v)| format!("{k}={}", render(v))).collect::<Vec<_>>().join(" ");
        let mut line = vec![row.implementation.clone(), params];
        line.extend(metric_names.iter().map(|n| row.metrics.get(*n).map(render).unwrap_or_else(|| "-".into())));
        lines.push(line);
    }
    let widths: Vec<usize> = (0..lines[0].len()).map(|i| lines.iter().map(|l| l[i].len()).max().unwrap_or(0)).collect();
    println!("{}", first.bench);
    for line in lines {
        let cells: Vec<String> = line.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        println!("  {}", cells.join("  ").trim_end());
    }
}
