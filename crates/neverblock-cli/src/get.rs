//! `neverblock get`: a load client (like `ab` or `wrk`, closed loop) on fibers; response bodies
//! are read and dropped as they arrive, so its memory does not grow with their size.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use serde_json::json;

use crate::load::{self, Interrupt, Load, Outcome};

/// Options of `neverblock get`.
#[derive(Args, Debug)]
pub(crate) struct GetArgs {
    /// The URL to GET.
    url: String,
    /// How many requests in all.
    #[arg(short = 'n', long, default_value_t = 1000)]
    requests: usize,
    /// How many at once (one fiber each).
    #[arg(short = 'c', long, default_value_t = 100)]
    concurrency: usize,
    /// Reuse connections (otherwise each request opens and closes its own).
    #[arg(long)]
    keepalive: bool,
    /// Runtime threads (default: one per core; at most one per concurrent request). Each takes a
    /// few file descriptors: more than the open-files limit allows is refused up front.
    #[arg(long)]
    threads: Option<usize>,
    /// Connect and read timeout per request (each read and write waits at most this long).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// How long one whole request may take, its body included (default: no limit).
    #[arg(long, value_parser = humantime::parse_duration)]
    total_timeout: Option<Duration>,
    /// Print one JSON object instead of the report.
    #[arg(long)]
    json: bool,
}

/// Runs the load; Ctrl-C stops it and the summary so far is printed (exit 130), a second Ctrl-C
/// ends the process at once.
pub(crate) fn run(args: GetArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.concurrency > 0 && args.requests > 0, "-n and -c must be at least 1");
    let threads = args.threads.unwrap_or_else(neverblock::runtime::available_threads).clamp(1, args.concurrency);
    check_descriptors(threads, args.concurrency)?;
    let interrupt = Arc::new(Interrupt::install().context("watch for Ctrl-C")?);
    let load = Load {
        url: args.url.clone(),
        requests: args.requests,
        concurrency: args.concurrency,
        keepalive: args.keepalive,
        threads,
        timeout: args.timeout,
        total_timeout: args.total_timeout,
        progress: !args.json,
    };
    let outcome = load::run_until(load, Some(interrupt))?;
    let peak_rss = crate::bench::status_bytes("VmHWM:");
    let ms = |p: f64| outcome.percentile(p).map(|d| d.as_secs_f64() * 1e3);
    if args.json {
        let row = json!({
            "url": args.url, "requests": args.requests, "concurrency": args.concurrency, "keepalive": args.keepalive,
            "ok": outcome.ok(), "seconds": outcome.elapsed.as_secs_f64(), "interrupted": outcome.interrupted,
            "errors": outcome.errors.iter().map(|(kind, f)| (kind.clone(), f.count)).collect::<BTreeMap<_, _>>(),
            "first_errors": outcome.errors.iter().map(|(kind, f)| (kind.clone(), f.first.clone())).collect::<BTreeMap<_, _>>(),
            "requests_per_s": outcome.rate(),
            "latency_ms": {"p50": ms(50.0), "p90": ms(90.0), "p99": ms(99.0), "max": ms(100.0)},
            "peak_rss_bytes": peak_rss,
        });
        println!("{row}");
        return succeeded(&outcome);
    }
    eprintln!();
    let connections = if args.keepalive { "keep-alive" } else { "a connection each" };
    if outcome.interrupted {
        let done = outcome.ok() + outcome.failed();
        println!(
            "interrupted (Ctrl-C) after {done} of {} requests, {} at once, {connections}",
            args.requests, args.concurrency
        );
    } else {
        println!("{} requests, {} at once, {connections}", args.requests, args.concurrency);
    }
    println!("  ok:          {}", outcome.ok());
    println!("  errors:      {}", outcome.failed());
    for (kind, failures) in &outcome.errors {
        println!("    {kind}: {}", failures.count);
        println!("      first: {}", failures.first);
    }
    println!("  time:        {:.3} s", outcome.elapsed.as_secs_f64());
    println!("  requests/s:  {:.0}", outcome.rate());
    for (name, p) in [("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("max", 100.0)] {
        if let Some(v) = ms(p) {
            println!("  latency {name}: {v:.2} ms");
        }
    }
    if let Some(bytes) = peak_rss {
        println!("  peak memory: {:.1} MiB", bytes as f64 / f64::from(1 << 20));
    }
    succeeded(&outcome)
}

/// Descriptors one runtime thread holds: its epoll instance, its wake-up eventfd, and the socket
/// pair Ctrl-C arrives on.
const FDS_PER_THREAD: u64 = 4;
/// Descriptors the process holds besides its threads' (the standard streams, signal pipes), with room
/// to spare.
const FDS_RESERVED: u64 = 16;

/// Raises the soft open-files limit to the hard one (as Go does at start-up), then refuses a
/// thread count whose descriptors alone would not fit under it, and warns when the connections
/// would not either.
fn check_descriptors(threads: usize, concurrency: usize) -> anyhow::Result<()> {
    let limit = crate::open_files::raise_to_hard_limit();
    // `None`: no limit.
    let Some(limit) = limit else { return Ok(()) };
    let needed = threads as u64 * FDS_PER_THREAD + FDS_RESERVED;
    anyhow::ensure!(
        needed <= limit,
        "--threads {threads} needs about {needed} file descriptors ({FDS_PER_THREAD} per runtime thread and \
         {FDS_RESERVED} for the process), more than the open-files limit of {limit} (ulimit -n): use fewer \
         threads or raise the limit"
    );
    if needed + concurrency as u64 > limit {
        log::warn!(
            "-c {concurrency} connections at once and {threads} runtime threads need about {} file descriptors, \
             more than the open-files limit of {limit} (ulimit -n): expect 'Too many open files' errors",
            needed + concurrency as u64
        );
    }
    Ok(())
}

/// Ends the command as the run did: exit 130 if Ctrl-C stopped it (the shell's code for SIGINT);
/// a failure when any request failed (the report above says which and why).
fn succeeded(outcome: &Outcome) -> anyhow::Result<()> {
    if outcome.interrupted {
        std::io::stdout().flush().context("write the report")?;
        std::process::exit(130);
    }
    let (failed, all) = (outcome.failed(), outcome.failed() + outcome.ok());
    anyhow::ensure!(failed == 0, "{failed} of {all} requests failed");
    Ok(())
}
