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
//! build before it in one run. Each round measures every server in turn, each
//! started afresh; rows give the medians of the rounds (`--runs`), as one round
//! swings by a tenth either way on a shared machine.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use serde_json::json;

use super::servers::{self, ServerChild};
use super::side_by_side::median;
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
    /// Rounds, each measuring every server once (alternating); rows give medians.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    #[command(flatten)]
    common: Common,
}

pub(crate) fn run(args: IdleArgs) -> anyhow::Result<()> {
    let this = std::env::current_exe()?;
    let mut servers: Vec<(String, Box<dyn Fn() -> Command>)> = Vec::new();
    servers.push(("neverblock".into(), Box::new(move || servers::delay_server(&this, Duration::ZERO, Some(1)))));
    if let Some(bin) = args.server_bin.clone() {
        let name = format!("neverblock@{}", bin.display());
        servers.push((name, Box::new(move || servers::delay_server(&bin, Duration::ZERO, Some(1)))));
    }
    if args.common.peers {
        match peers::go_delay_server() {
            Some(bin) => {
                let go = move || {
                    let mut go = Command::new(bin);
                    go.args(["-delay", "0s", "-procs", "1"]);
                    go
                };
                servers.push(("go-net-http".into(), Box::new(go)));
            }
            None => eprintln!("note: go peer skipped: `go` is not installed or the peer did not build"),
        }
    }
    let mut rounds: Vec<Vec<Round>> = servers.iter().map(|_| Vec::new()).collect();
    for _ in 0..args.runs.max(1) {
        for ((name, command), measured) in servers.iter().zip(&mut rounds) {
            measured.push(measure(name, command(), &args)?);
        }
    }
    let rows = servers.iter().zip(&rounds).flat_map(|((name, _), measured)| rows(name, measured, &args)).collect();
    report::print(rows, "requests_per_s", &args.common)?;
    Ok(())
}

/// One round's figures for one server: the active connections alone, then beside the idle ones.
struct Round {
    alone: Figures,
    beside: Figures,
    /// The server's memory per idle connection.
    per_idle: u64,
}

/// The figures of one closed loop of GETs, and the server's memory after it.
struct Figures {
    rate: f64,
    p50_us: f64,
    p99_us: f64,
    errors: usize,
    rss: u64,
}

impl Figures {
    fn of(outcome: &load::Outcome, rss: u64) -> Figures {
        let micros = |p: f64| outcome.percentile(p).map_or(0.0, |d| d.as_secs_f64() * 1e6);
        Figures { rate: outcome.rate(), p50_us: micros(50.0), p99_us: micros(99.0), errors: outcome.failed(), rss }
    }
}

/// A server's two rows: each figure the median of its rounds (errors summed).
fn rows(name: &str, rounds: &[Round], args: &IdleArgs) -> Vec<Row> {
    let row = |idle: usize, figures: &dyn Fn(&Round) -> &Figures| {
        let median_of = |f: &dyn Fn(&Figures) -> f64| median(rounds.iter().map(|r| f(figures(r))).collect());
        Row::new("idle-connections", name, json!({"idle": idle, "active": args.active}))
            .metric("requests_per_s", median_of(&|f| f.rate).round())
            .metric("p50_us", median_of(&|f| f.p50_us).round())
            .metric("p99_us", median_of(&|f| f.p99_us).round())
            .metric("errors", rounds.iter().map(|r| figures(r).errors).sum::<usize>())
            .metric("server_rss_mib", (median_of(&|f| f.rss as f64) / 1048576.0 * 10.0).round() / 10.0)
            .metric("runs", rounds.len())
    };
    let per_idle = median(rounds.iter().map(|r| r.per_idle as f64).collect()).round();
    vec![row(0, &|r| &r.alone), row(args.idle, &|r| &r.beside).metric("bytes_per_idle_connection", per_idle)]
}

/// One round against one server, started afresh: active connections alone, then beside the idle
/// ones.
fn measure(name: &str, mut command: Command, args: &IdleArgs) -> anyhow::Result<Round> {
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
    Ok(Round {
        alone: Figures::of(&alone, before),
        beside: Figures::of(&beside, after),
        per_idle: after.saturating_sub(before) / args.idle.max(1) as u64,
    })
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
