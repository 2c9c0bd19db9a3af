//! idle-connections: what a server pays for keep-alive connections that say
//! nothing. Against `delay-server` (one loop, no delay), 100 active connections
//! run a closed loop of GETs, first alone, then beside 10,000 idle keep-alive
//! connections (each answered once, then silent): the server's memory per idle
//! connection, and the active connections' requests/s and latencies with the
//! idle ones held. The memory is read once the last idle connection has been
//! silent for `SETTLE`: what an idle connection holds, not what answering it left
//! (neverblock's server gives back a connection's buffers, and in cleartext its
//! fiber, after a second of silence; its loop lets go of worker fibers left idle
//! and unused for a whole second, looking once a second). A server whose idle connections cost a timer insert and
//! cancel per read, or a wasted `recv` per request, shows it here.
//!
//! The same rows for Go net/http (`--peers`), and for another build's
//! `delay-server` (`--server-bin`), so a change can be measured against the
//! build before it in one run.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use serde_json::json;

use super::servers::{self, ServerChild};
use super::{peers, report, Common, Row};
use crate::load::{self, Load};

/// How long the idle connections are left silent before the server's memory is read: a second
/// for each to give back what it held, two for the workers that served them to be let go.
const SETTLE: Duration = Duration::from_millis(3500);

/// Options of `bench idle-connections`.
#[derive(Args, Debug)]
pub(crate) struct IdleArgs {
    /// Idle keep-alive connections held open in the second row.
    #[arg(long, default_value_t = 10_000)]
    idle: usize,
    /// Connections running the closed loop of GETs.
    #[arg(long, default_value_t = 100)]
    active: usize,
    /// GETs timed per row.
    #[arg(short = 'n', long, default_value_t = 100_000)]
    requests: usize,
    /// Also run the rows against this `neverblock` binary's delay-server (another build, to compare).
    #[arg(long)]
    server_bin: Option<PathBuf>,
    #[command(flatten)]
    common: Common,
}

pub(crate) fn run(args: IdleArgs) -> anyhow::Result<()> {
    let mut servers: Vec<(String, Command)> = Vec::new();
    let this = std::env::current_exe()?;
    servers.push(("neverblock".into(), servers::delay_server(&this, Duration::ZERO, Some(1))));
    if let Some(bin) = &args.server_bin {
        servers.push((format!("neverblock@{}", bin.display()), servers::delay_server(bin, Duration::ZERO, Some(1))));
    }
    if args.common.peers {
        match peers::go_delay_server() {
            Some(bin) => {
                let mut go = Command::new(bin);
                go.args(["-delay", "0s", "-procs", "1"]);
                servers.push(("go-net-http".into(), go));
            }
            None => eprintln!("note: go peer skipped: `go` is not installed or the peer did not build"),
        }
    }
    let mut rows = Vec::new();
    for (name, command) in servers {
        rows.extend(measure(&name, command, &args)?);
    }
    report::print(rows, "requests_per_s", &args.common)?;
    Ok(())
}

/// The two rows of one server: active connections alone, then beside the idle ones.
fn measure(name: &str, mut command: Command, args: &IdleArgs) -> anyhow::Result<Vec<Row>> {
    let server = ServerChild::announced(&mut command, name)?;
    let load = Load {
        url: server.url(),
        requests: args.requests,
        concurrency: args.active,
        keepalive: true,
        threads: 1,
        timeout: Duration::from_secs(30),
        total_timeout: None,
        progress: false,
    };
    // Untimed, so neither row meets a cold server.
    load::run(Load { requests: args.requests / 5, ..load.clone() })?;
    let alone = load::run(load.clone())?;
    let before = server.rss()?;
    let idle = open_idle(server.addr, args.idle)?;
    #[expect(
        clippy::disallowed_methods,
        reason = "the bench's own thread, outside any runtime: the server runs apart"
    )]
    std::thread::sleep(SETTLE);
    let after = server.rss()?;
    let beside = load::run(load)?;
    drop(idle);
    let row = |idle: usize, outcome: &load::Outcome, rss: u64| {
        let micros = |p: f64| outcome.percentile(p).map_or(0.0, |d| d.as_secs_f64() * 1e6);
        Row::new("idle-connections", name, json!({"idle": idle, "active": args.active}))
            .metric("requests_per_s", outcome.rate().round())
            .metric("p50_us", micros(50.0).round())
            .metric("p99_us", micros(99.0).round())
            .metric("errors", outcome.failed())
            .metric("server_rss_mib", (rss as f64 / 1048576.0 * 10.0).round() / 10.0)
    };
    let per_idle = after.saturating_sub(before) / args.idle.max(1) as u64;
    Ok(vec![row(0, &alone, before), row(args.idle, &beside, after).metric("bytes_per_idle_connection", per_idle)])
}

/// Opens `count` keep-alive connections to `addr`, each answered once, then left silent.
fn open_idle(addr: SocketAddr, count: usize) -> anyhow::Result<Vec<TcpStream>> {
    (0..count)
        .map(|i| {
            let mut conn = TcpStream::connect(addr).with_context(|| format!("idle connection {i}"))?;
            conn.write_all(b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n")?;
            read_response(&mut conn).with_context(|| format!("the answer on idle connection {i}"))?;
            Ok(conn)
        })
        .collect()
}

/// Reads one response with a `Content-Length` body, leaving the connection at its end.
fn read_response(conn: &mut TcpStream) -> anyhow::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    let head_end = loop {
        let n = conn.read(&mut chunk)?;
        anyhow::ensure!(n > 0, "closed before the response head ended");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    anyhow::ensure!(head.starts_with("http/1.1 200"), "not a 200: {head}");
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .context("a Content-Length")?;
    let mut left = (head_end + length).saturating_sub(buf.len());
    while left > 0 {
        let n = conn.read(&mut chunk[..left.min(1024)])?;
        anyhow::ensure!(n > 0, "closed inside the body");
        left -= n;
    }
    Ok(())
}
