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

/// The lean ureq agent's input and output buffers.
const LEAN_BUFFER: usize = 16 * 1024;

/// A client written for blocking sockets.
#[derive(Clone, Debug)]
enum StdClient {
    /// neverblock's own, the yardstick: one for the row, as ureq's agent.
    Neverblock(neverblock_http::Client),
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
    // ureq's default buffers (128 KiB each way, zeroed for every connection) cost more than
    // parking does: a thousand connections at once zero 256 MB. Buffers the size of a page of
    // heads show what the hooks cost a client with lean buffers.
    let lean = ureq::Agent::config_builder()
        .input_buffer_size(LEAN_BUFFER)
        .output_buffer_size(LEAN_BUFFER)
        .build()
        .new_agent();
    // As many connections to the one host as fibers ask for (its default caps them at 64, as
    // ureq's agent does not).
    let own = neverblock_http::Client::builder().max_connections_per_host(args.requests).build()?;
    let clients = [
        ("neverblock client", StdClient::Neverblock(own)),
        ("ureq, hooks", StdClient::Ureq(ureq::Agent::new_with_defaults())),
        ("ureq, hooks, 16 KiB buffers", StdClient::Ureq(lean)),
        ("std TcpStream, hooks", StdClient::TcpStream),
    ];
    let mut rows = Vec::new();
    for (name, client) in clients {
        let (ok, seconds) = on_fibers(&url, args.requests, threads, client);
        rows.push(row(name, ok, args.requests - ok, seconds));
    }
    report::print(rows, "requests_per_s", &args.common)?;
    Ok(())
}

/// Two bursts of `requests` fibers over `threads` loops, each fiber one GET with `client`: the
/// first untimed (so that no row meets a cold server or a cold heap), the second timed; returns
/// its successes and the seconds from its first spawn to its last answer.
fn on_fibers(url: &str, requests: usize, threads: usize, client: StdClient) -> (usize, f64) {
    let url = url.to_owned();
    neverblock::runtime::Builder::new().threads(threads).run(move || {
        let burst = || {
            let start = Instant::now();
            let fibers: Vec<_> = (0..requests)
                .map(|i| {
                    let (url, client) = (url.clone(), client.clone());
                    neverblock::runtime::spawn_on(i % threads, move || get(&url, &client))
                })
                .collect();
            let ok = fibers.into_iter().map(|f| f.join()).filter(|done| matches!(done, Ok(true))).count();
            (ok, start.elapsed().as_secs_f64())
        };
        burst();
        burst()
    })
}

/// One GET of `url` (`http://host:port/`) on a new connection: whether it answered 200.
fn get(url: &str, client: &StdClient) -> bool {
    match client {
        StdClient::Neverblock(client) => {
            let request = neverblock_http::Request::new("GET", url).header("Connection", "close");
            client.request(&request).is_ok_and(|r| r.status() == 200)
        }
        StdClient::Ureq(agent) => agent
            .get(url)
            .header("Connection", "close")
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
