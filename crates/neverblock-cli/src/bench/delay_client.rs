//! delay_client (NeverBlock's client benchmark): 1000 GETs, one connection each, against a server
//! that answers after D ms, by a blocking client, a thread per request, fibers,
//! and the peers (Go goroutines, MRI threads, Python gevent).

use std::time::{Duration, Instant};

use clap::Args;
use neverblock_http::{Client, Request};
use serde_json::json;

use super::servers::{self, ServerChild};
use super::{peers, report, Common, Row};
use crate::load::{self, Load};

/// Options of `bench delay-client`.
#[derive(Args, Debug)]
pub(crate) struct DelayClientArgs {
    /// Server delays in milliseconds.
    #[arg(long, value_delimiter = ',', default_values_t = [0u64, 10, 50, 100, 500])]
    delays: Vec<u64>,
    /// Requests per row.
    #[arg(short = 'n', long, default_value_t = 1000)]
    requests: usize,
    /// The longest the blocking row may take per delay: past it, it times a sample and extrapolates.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    blocking_budget: Duration,
    #[command(flatten)]
    common: Common,
}

pub(crate) fn run(args: DelayClientArgs) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    for &delay in &args.delays {
        let mut command = servers::delay_server(&std::env::current_exe()?, Duration::from_millis(delay), None);
        let server = ServerChild::announced(&mut command, "delay-server")?;
        let url = server.url();
        let params = json!({"delay_ms": delay, "requests": args.requests});
        let row = |name: &str, ok: usize, errors: usize, seconds: f64| {
            let rate = ok as f64 / seconds;
            let mut row = Row::new("delay-client", name, params.clone())
                .metric("requests_per_s", (rate * 10.0).round() / 10.0)
                .metric("ok", ok)
                .metric("errors", errors);
            if delay > 0 {
                let bound = args.requests as f64 * 1000.0 / delay as f64;
                row = row.metric("bound_pct", (rate.min(bound) / bound * 1000.0).round() / 10.0);
            }
            row
        };
        let load = Load {
            url: url.clone(),
            requests: args.requests,
            concurrency: args.requests,
            keepalive: false,
            threads: neverblock::runtime::available_threads(),
            timeout: Duration::from_secs(30),
            total_timeout: None,
            progress: false,
        };
        // One untimed burst first, so that no row meets a cold server (fresh stacks,
        // tables still growing) while the rows after it meet a warm one.
        load::run(load.clone())?;
        let fibers = load::run(load)?;
        rows.push(row("neverblock", fibers.ok(), fibers.failed(), fibers.elapsed.as_secs_f64()));
        let (ok, errors, seconds, sampled) = blocking(&url, args.requests, delay, args.blocking_budget);
        let mut blocking_row = row("blocking", ok, errors, seconds);
        if sampled < args.requests {
            blocking_row = blocking_row.metric("note", format!("extrapolated from {sampled} sequential requests"));
        }
        rows.push(blocking_row);
        let (ok, errors, seconds) = thread_per_request(&url, args.requests);
        rows.push(row("os-threads", ok, errors, seconds));
        if args.common.peers {
            for (name, ok, errors, seconds) in peers::delay_client(&url, args.requests) {
                rows.push(row(&name, ok, errors, seconds));
            }
        }
    }
    report::print(rows, "requests_per_s", &args.common)?;
    Ok(())
}

/// The request every row sends: a GET on a connection of its own.
fn one_shot(url: &str) -> Request {
    Request::new("GET", url).header("Connection", "close")
}

/// Sequential requests in blocking mode (no runtime): all of them if they fit the
/// budget, else as many as fit (at least 5). Returns ok, errors, seconds, requests sent.
fn blocking(url: &str, requests: usize, delay_ms: u64, budget: Duration) -> (usize, usize, f64, usize) {
    let fit = budget.as_millis() as usize / (delay_ms as usize).max(1);
    let sample = requests.min(fit.max(5));
    let client = Client::new();
    let request = one_shot(url);
    let start = Instant::now();
    let ok = (0..sample).filter(|_| client.request(&request).is_ok_and(|r| r.status() == 200)).count();
    let seconds = start.elapsed().as_secs_f64() * requests as f64 / sample as f64;
    let scale = |n: usize| n * requests / sample;
    (scale(ok), scale(sample - ok), seconds, sample)
}

/// One OS thread per request, each blocking in its own request.
fn thread_per_request(url: &str, requests: usize) -> (usize, usize, f64) {
    let client = Client::builder().max_connections_per_host(requests).build().expect("default roots");
    let start = Instant::now();
    let threads: Vec<_> = (0..requests)
        .map(|_| {
            let (client, request) = (client.clone(), one_shot(url));
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || client.request(&request).is_ok_and(|r| r.status() == 200))
        })
        .collect();
    // A thread that could not be started counts as a failed request.
    let ok = threads.into_iter().filter_map(|t| t.ok()?.join().ok()).filter(|&ok| ok).count();
    (ok, requests - ok, start.elapsed().as_secs_f64())
}
