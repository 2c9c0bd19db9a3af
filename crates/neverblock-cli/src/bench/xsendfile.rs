//! xsendfile (grizzly-sendfile's experiment behind a reverse proxy): an application with 4 workers
//! (a peer program, standard library only) answers downloads of a 20 MB file either by streaming
//! the bytes itself or with `X-Sendfile`, behind `neverblock serve --upstream`; C clients at 1 MB/s
//! each: aggregate MB/s against the bound of C MB/s, p99 time to first byte, and whether every
//! download's bytes were right, both ways side by side.
//!
//! The server is the command itself in a child process (`serve --upstream URL --x-sendfile-root
//! DIR`), so the clients (fibers in this process, those of [`downloads`](super::downloads)) measure it
//! as a user would run it. Streamed, each download holds one of the application's 4 workers for
//! as long as its client takes (neverblock's proxy, like nginx with `proxy_buffering off` in the
//! `--peers` rows, passes the body on as the client reads it), so the rest wait; with X-Sendfile
//! the application answers at once and the server sends the file.

use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::json;

use super::downloads::{self, Download, Tally};
use super::servers::{self, Content, ServerChild, TempDir};
use super::side_by_side::median;
use super::{nginx, report, Common, Row};

const APP: &str = include_str!("../../../../peers/python/upstream_app.py");

/// Options of `bench xsendfile`.
#[derive(Args, Debug)]
pub(crate) struct XSendfileArgs {
    /// Clients at once, one configuration each.
    #[arg(short = 'c', long, value_delimiter = ',', default_values_t = [50usize, 100, 300])]
    clients: Vec<usize>,
    /// How long each configuration runs.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    window: Duration,
    /// The file's size, in bytes.
    #[arg(long, default_value_t = 20_000_000)]
    file_size: usize,
    /// Each client's download rate, in bytes a second.
    #[arg(long, default_value_t = 1_000_000)]
    rate: u64,
    /// The server's event loops.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// The application's workers (each serves one request at a time).
    #[arg(long, default_value_t = 4)]
    app_workers: usize,
    /// Windows per configuration and way, alternating the ways; rows give medians.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    #[command(flatten)]
    common: Common,
}

pub(crate) fn run(args: XSendfileArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.clients.iter().all(|&c| c > 0), "--clients must be at least 1");
    anyhow::ensure!(args.rate > 0 && args.file_size > 0, "--rate and --file-size must be positive");
    let python = ["python3", "python"].into_iter().find(|p| Command::new(p).arg("--version").output().is_ok());
    let Some(python) = python else {
        anyhow::bail!("the application is a Python program: install python3");
    };
    let scratch = TempDir::new("xsendfile")?;
    let file = Arc::new(downloads::contents(args.file_size as u64));
    std::fs::write(scratch.0.join("file.bin"), &*file)?;
    let app_path = scratch.0.join("upstream_app.py");
    std::fs::write(&app_path, APP)?;

    let mut app = Command::new(python);
    app.arg(&app_path).arg("--root").arg(&scratch.0);
    app.args(["--workers", &args.app_workers.to_string(), "--close"]);
    let app = ServerChild::announced(&mut app, "the application")?;
    let content = Content::Proxy { upstream: app.addr, files: &scratch.0 };
    let server = servers::neverblock(content, args.workers)?;
    let nginx = match args.common.peers {
        true => nginx::start(content, args.workers).transpose()?,
        false => None,
    };
    let ours = [("neverblock", server.addr, "sendfile"), ("app-streaming", server.addr, "stream")];
    let theirs = nginx.iter().flat_map(|n| [("nginx", n.addr, "accel"), ("nginx-streaming", n.addr, "stream")]);
    let ways: Vec<(&str, SocketAddr, &str)> = ours.into_iter().chain(theirs).collect();
    let mut rows = Vec::new();
    for &clients in &args.clients {
        let params = json!({"clients": clients, "workers": args.workers, "app_workers": args.app_workers,
            "window_s": args.window.as_secs_f64()});
        let mut runs: Vec<Vec<Tally>> = ways.iter().map(|_| Vec::new()).collect();
        for _ in 0..args.runs.max(1) {
            for (way, &(_, at, mode)) in ways.iter().enumerate() {
                let target = format!("/file?path=file.bin&mode={mode}");
                let download = Download::get(at, &target, file.clone(), args.rate);
                wait_until_workers_free(app.addr, args.app_workers)?;
                runs[way].push(downloads::run(&download, clients, args.window));
            }
        }
        for ((name, _, _), tallies) in ways.iter().zip(&runs) {
            rows.push(row(name, &params, tallies, clients, args.rate, args.window));
        }
    }
    report::print(rows, "aggregate_mb_per_s", &args.common)?;
    Ok(())
}

/// Waits until every one of the application's workers is free again: downloads the last window
/// left behind (a proxy still reading a body its client dropped) would otherwise hold up the next
/// window's first requests. Free means `workers` requests at once each answered within 100 ms.
fn wait_until_workers_free(addr: SocketAddr, workers: usize) -> anyhow::Result<()> {
    use std::io::{Read, Write};
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let probes: Vec<_> = (0..workers.max(1))
            .map(|_| {
                std::thread::spawn(move || -> std::io::Result<Duration> {
                    let started = Instant::now();
                    let mut stream = std::net::TcpStream::connect(addr)?;
                    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
                    stream.write_all(b"GET /hello HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")?;
                    stream.read_to_end(&mut Vec::new())?;
                    Ok(started.elapsed())
                })
            })
            .collect();
        let slowest = probes
            .into_iter()
            .map(|p| p.join().ok().and_then(Result::ok))
            .try_fold(Duration::ZERO, |a, b| Some(a.max(b?)));
        if slowest.is_some_and(|d| d < Duration::from_millis(100)) {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "the application stayed busy for a minute after a window");
        neverblock::sleep(Duration::from_millis(200));
    }
}

/// A row of medians over the runs of one way.
fn row(name: &str, params: &serde_json::Value, tallies: &[Tally], clients: usize, rate: u64, window: Duration) -> Row {
    let mb_per_s = median(tallies.iter().map(|t| t.bytes as f64 / 1e6 / window.as_secs_f64()).collect());
    let first_byte = |p: f64| {
        median(tallies.iter().map(|t| t.ttfb.percentile(p).map_or(0.0, |d| d.as_secs_f64() * 1000.0)).collect())
    };
    let bound = clients as f64 * rate as f64 / 1e6;
    Row::new("xsendfile", name, params.clone())
        .metric("aggregate_mb_per_s", report::round(mb_per_s))
        .metric("of_bound_percent", report::round(100.0 * mb_per_s / bound))
        .metric("p50_first_byte_ms", report::round(first_byte(50.0)))
        .metric("p99_first_byte_ms", report::round(first_byte(99.0)))
        .metric("downloads_complete", tallies.iter().map(|t| t.completed).sum::<u64>())
        .metric("downloads_bad", tallies.iter().map(|t| t.bad).sum::<u64>())
}
