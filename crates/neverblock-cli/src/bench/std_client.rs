//! std_client: 1,000 fibers, each one GET on a connection of its own against the delay
//! server at D ms, with clients written for `std::net` (ureq, and a plain
//! `std::net::TcpStream`), which the runtime's libc hooks park, beside neverblock's own client.
//!
//! This binary is built with the `hooks` feature; its other benchmarks use neverblock's
//! own sockets, which are non-blocking, so each hook is the real call after one check.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::json;

use super::servers::{self, ServerChild};
use super::{report, Common, Row};
use crate::load::{self, Load};

/// Options of `bench std-client`.
#[derive(Args, Debug)]
pub(crate) struct StdClientArgs {
    /// The server's delay in milliseconds.
    #[arg(long, default_value_t = 100)]
    delay: u64,
    /// Requests per row, all at once: one fiber each.
    #[arg(short = 'n', long, default_value_t = 1000)]
    requests: usize,
    #[command(flatten)]
    common: Common,
}

/// A client written for blocking sockets.
#[derive(Clone, Debug)]
enum StdClient {
    /// One agent for the row, as ureq is meant to be used (`ureq::get` makes one per request).
    Ureq(ureq::Agent),
    TcpStream,
}

pub(crate) fn run(args: StdClientArgs) -> anyhow::Result<()> {
    let mut command = servers::delay_server(&std::env::current_exe()?, Duration::from_millis(args.delay), None);
    let server = ServerChild::announced(&mut command, "delay-server")?;
    let url = server.url();
    let threads = neverblock::runtime::available_threads();
    let params = json!({"delay_ms": args.delay, "requests": args.requests, "loops": threads});
    let row = |name: &str, ok: usize, errors: usize, seconds: f64| {
        let rate = ok as f64 / seconds;
        Row::new("std-client", name, params.clone())
            .metric("requests_per_s", (rate * 10.0).round() / 10.0)
            .metric("ok", ok)
            .metric("errors", errors)
    };
    let load = Load {
        url: url.clone(),
        requests: args.requests,
        concurrency: args.requests,
        keepalive: false,
        threads,
        timeout: Duration::from_secs(30),
        total_timeout: None,
        progress: false,
    };
    // One untimed burst first, so that no row meets a cold server.
    load::run(load.clone())?;
    let own = load::run(load)?;
    let mut rows = vec![row("neverblock client", own.ok(), own.failed(), own.elapsed.as_secs_f64())];
    for client in [StdClient::Ureq(ureq::Agent::new_with_defaults()), StdClient::TcpStream] {
        let name = match client {
            StdClient::Ureq(_) => "ureq, hooks",
            StdClient::TcpStream => "std TcpStream, hooks",
        };
        let (ok, seconds) = on_fibers(&url, args.requests, threads, client);
        rows.push(row(name, ok, args.requests - ok, seconds));
    }
    report::print(rows, "requests_per_s", &args.common)?;
    Ok(())
}

/// `requests` fibers over `threads` loops, each one GET with `client`; returns the
/// successes and the seconds from the first spawn to the last answer.
fn on_fibers(url: &str, requests: usize, threads: usize, client: StdClient) -> (usize, f64) {
    let url = url.to_owned();
    neverblock::runtime::Builder::new().threads(threads).run(move || {
        let start = Instant::now();
        let fibers: Vec<_> = (0..requests)
            .map(|i| {
                let (url, client) = (url.clone(), client.clone());
                neverblock::runtime::spawn_on(i % threads, move || get(&url, &client))
            })
            .collect();
        let ok = fibers.into_iter().map(|f| f.join()).filter(|done| matches!(done, Ok(true))).count();
        (ok, start.elapsed().as_secs_f64())
    })
}

/// One GET of `url` (`http://host:port/`) on a new connection: whether it answered 200.
fn get(url: &str, client: &StdClient) -> bool {
    match client {
        StdClient::Ureq(agent) => agent
            .get(url)
            .call()
            .is_ok_and(|mut r| r.status() == 200 && r.body_mut().as_reader().read_to_end(&mut Vec::new()).is_ok()),
        StdClient::TcpStream => {
            let host = url.trim_start_matches("http://").trim_end_matches('/');
            let exchange = || -> std::io::Result<bool> {
                let mut stream = std::net::TcpStream::connect(host)?;
                stream.write_all(format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes())?;
                let mut answer = Vec::new();
                stream.read_to_end(&mut answer)?;
                Ok(answer.starts_with(b"HTTP/1.1 200"))
            };
            exchange().unwrap_or(false)
        }
    }
}
