//! libpq_sleep: ten `select pg_sleep(1)` through libpq (C's client, its blocking API) on
//! ten fibers of one loop, with the runtime's libc hooks and without them (the blocking row).
//!
//! libpq is called from the runtime crate's example `libpq_sleep` (FFI is unsafe code, which
//! lives in that crate alone), run as a child through cargo, built on first use. The
//! blocking row is the same binary with `NEVERBLOCK_HOOKS=off`: every hook is then libc's
//! call, so each query blocks the loop as it would without the feature.

use std::path::Path;
use std::process::Command;

use anyhow::Context;
use serde_json::json;

use super::SleepArgs;
use crate::bench::{report, Row};

/// `bench libpq-sleep`, with `pg-sleep`'s options.
pub(crate) fn run(args: SleepArgs) -> anyhow::Result<()> {
    let target = args.database.open()?;
    let params = json!({"queries": args.queries, "sleep_s": args.seconds});
    let mut rows = Vec::new();
    for (name, hooks) in [("libpq, hooks", true), ("libpq, blocking", false)] {
        let seconds = libpq_sleep(&target.url, args.queries, args.seconds, hooks)?;
        rows.push(
            Row::new("libpq-sleep", name, params.clone())
                .metric("seconds", (seconds * 1000.0).round() / 1000.0)
                .metric("queries_per_s", (args.queries as f64 / seconds * 100.0).round() / 100.0),
        );
    }
    report::print(rows, "seconds", &args.common)?;
    Ok(())
}

/// Runs the example once (built first, if cargo finds it stale) and returns the seconds it printed.
fn libpq_sleep(url: &str, queries: usize, seconds: f64, hooks: bool) -> anyhow::Result<f64> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut command = Command::new("cargo");
    command
        .current_dir(&workspace)
        .args(["run", "--release", "--quiet", "-p", "neverblock", "--features", "hooks"])
        .args(["--example", "libpq_sleep", "--", url, &queries.to_string(), &seconds.to_string()])
        // Fat LTO would link it for minutes; the libpq calls gain nothing from it.
        .env("CARGO_PROFILE_RELEASE_LTO", "false");
    if !hooks {
        command.env("NEVERBLOCK_HOOKS", "off");
    }
    eprintln!("note: running the libpq_sleep example ({}; built with cargo on first use)", hooks_word(hooks));
    let out = command.output().context("run cargo (the libpq_sleep example is built with it)")?;
    anyhow::ensure!(out.status.success(), "libpq_sleep failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    let printed = String::from_utf8_lossy(&out.stdout);
    printed.trim().parse().with_context(|| format!("libpq_sleep printed {printed:?}"))
}

fn hooks_word(hooks: bool) -> &'static str {
    if hooks {
        "hooks on"
    } else {
        "NEVERBLOCK_HOOKS=off"
    }
}
