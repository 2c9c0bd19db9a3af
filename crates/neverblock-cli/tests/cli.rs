//! The `neverblock` command end to end: each bench prints well-formed rows.

use std::process::Command;

use serde_json::Value;

fn neverblock(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_neverblock")).args(args).output().expect("run neverblock");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

fn rows(stdout: &str) -> Vec<Value> {
    stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))).collect()
}

#[test]
fn fiber_switch_prints_one_json_row_per_configuration() {
    let (ok, stdout, stderr) = neverblock(&["bench", "fiber-switch", "--t", "10", "--n", "50", "--json"]);
    assert!(ok, "{stderr}");
    let rows = rows(&stdout);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["bench"], "fiber-switch");
    assert_eq!(rows[0]["impl"], "neverblock");
    assert_eq!(rows[0]["params"]["t"], 10);
    assert!(rows[0]["metrics"]["round_trip_ns"].as_f64().unwrap() > 0.0);
}

#[test]
fn fiber_chain_with_peers_reports_ratios_to_neverblock() {
    let args = ["bench", "fiber-chain", "--t", "500", "--warmup", "1", "--runs", "3", "--json", "--peers"];
    let (ok, stdout, stderr) = neverblock(&args);
    assert!(ok, "{stderr}");
    let rows = rows(&stdout);
    let floor = rows.iter().find(|r| r["impl"] == "corosensei").expect("the raw corosensei floor always runs");
    assert!(floor["metrics"]["vs_neverblock_ratio"].as_f64().unwrap() > 0.0);
    for row in &rows {
        assert_eq!(row["params"]["t"], 500, "{row}");
        assert!(row["metrics"]["mean_s"].as_f64().unwrap() > 0.0, "{row}");
    }
}

#[test]
fn fiber_chain_max_stops_at_the_cap_and_reports_memory() {
    let (ok, stdout, stderr) = neverblock(&["bench", "fiber-chain", "--max", "--t", "1000", "--cap", "3000", "--json"]);
    assert!(ok, "{stderr}");
    let rows = rows(&stdout);
    assert_eq!(rows[0]["metrics"]["max_fibers_count"], 3000);
    assert!(rows[0]["metrics"]["peak_rss_bytes"].as_u64().unwrap() > 0);
    assert!(rows[0]["params"]["stopped_by"].as_str().unwrap().contains("cap"));
    assert!(stderr.contains("t =      2000: ok"), "{stderr}");
}

#[test]
fn fiber_chain_max_names_the_limit_that_stopped_it() {
    // mprotect guard pages cost two mappings per fiber: vm.max_map_count stops the chain.
    let args = ["bench", "fiber-chain", "--max", "--mprotect-guards", "--t", "20000", "--cap", "100000", "--json"];
    let (ok, stdout, stderr) = neverblock(&args);
    assert!(ok, "{stderr}");
    let row = &rows(&stdout)[0];
    let max = row["metrics"]["max_fibers_count"].as_u64().unwrap();
    assert!((20_000..40_000).contains(&max), "{row}");
    assert!(row["params"]["stopped_by"].as_str().unwrap().contains("vm.max_map_count"), "{row}");
}
