//! xsendfile (grizzly-sendfile's experiment behind a reverse proxy): an application with 4 workers
//! (a peer program, standard library only) answers downloads of a 20 MB file either by streaming
//! the bytes itself or with `X-Sendfile`, behind `neverblock serve --upstream`; C clients at 1 MB/s
//! each: aggregate MB/s against the bound of C MB/s, p99 time to first byte, and whether every
//! download's bytes were right, both ways side by side.
//!
//! The server is the command itself in a child process (`serve --upstream URL --x-sendfile-root
//! DIR`), so the clients (fibers on a loop of this process, see `xsendfile/clients.rs`) measure it
//! as a user would run it. Streamed, each download holds one of the application's 4 workers for
//! as long as its client takes (neverblock's proxy, like nginx with `proxy_buffering off` in the
//! `--peers` rows, passes the body on as the client reads it), so the rest wait; with X-Sendfile
//! the application answers at once and the server sends the file.

mod clients;
pub(super) mod nginx;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use serde_json::json;

use super::{report, Common, Row};
use clients::{Download, Tally};

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

/// A child process, killed on drop; `stdin` is held so that a peer that watches it ends with us.
pub(super) struct Process {
    child: Child,
    _stdin: Option<ChildStdin>,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `command` and reads its first line of standard output, which names where it listens.
pub(super) fn start(mut command: Command, what: &str) -> anyhow::Result<(Process, String)> {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("start {what}"))?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line)?;
    let stdin = child.stdin.take();
    anyhow::ensure!(!line.is_empty(), "{what} printed nothing");
    Ok((Process { child, _stdin: stdin }, line))
}

/// A directory for the file and the application, removed on drop.
pub(super) struct Scratch(pub(super) PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The file's bytes: a pattern with no short period, so a misplaced piece shows.
fn content(size: usize) -> Vec<u8> {
    (0..size).map(|i| (i ^ (i >> 8) ^ (i >> 16)) as u8).collect()
}

pub(crate) fn run(args: XSendfileArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.clients.iter().all(|&c| c > 0), "--clients must be at least 1");
    anyhow::ensure!(args.rate > 0 && args.file_size > 0, "--rate and --file-size must be positive");
    let python = ["python3", "python"].into_iter().find(|p| Command::new(p).arg("--version").output().is_ok());
    let Some(python) = python else {
        anyhow::bail!("the application is a Python program: install python3");
    };
    let scratch = Scratch(std::env::temp_dir().join(format!("neverblock-xsendfile-{}", std::process::id())));
    std::fs::create_dir_all(&scratch.0)?;
    let content = Arc::new(content(args.file_size));
    std::fs::write(scratch.0.join("file.bin"), &*content)?;
    let app_path = scratch.0.join("upstream_app.py");
    std::fs::write(&app_path, APP)?;

    let mut app = Command::new(python);
    app.arg(&app_path).arg("--root").arg(&scratch.0);
    app.args(["--workers", &args.app_workers.to_string(), "--close"]);
    let (_app, line) = start(app, "the application")?;
    let app_port = line.trim().rsplit(' ').next().unwrap_or_default().to_owned();
    let (_server, addr) = start_server(&scratch.0, &app_port, args.workers)?;

    let nginx = match args.common.peers {
        true => nginx::start(&scratch.0, &app_port, args.workers).transpose()?,
        false => None,
    };
    let ours = [("neverblock", addr, "sendfile"), ("app-streaming", addr, "stream")];
    let theirs = nginx.iter().flat_map(|(_, _, at)| [("nginx", *at, "accel"), ("nginx-streaming", *at, "stream")]);
    let ways: Vec<(&str, std::net::SocketAddr, &str)> = ours.into_iter().chain(theirs).collect();
    let mut rows = Vec::new();
    for &clients in &args.clients {
        let params = json!({"clients": clients, "workers": args.workers, "app_workers": args.app_workers,
            "window_s": args.window.as_secs_f64()});
        let mut runs: Vec<Vec<Tally>> = ways.iter().map(|_| Vec::new()).collect();
        for _ in 0..args.runs.max(1) {
            for (way, &(_, at, mode)) in ways.iter().enumerate() {
                let request = format!("GET /file?path=file.bin&mode={mode} HTTP/1.1\r\nHost: bench\r\n\r\n");
                let download = Download {
                    addr: at,
                    request: request.into_bytes().into(),
                    content: content.clone(),
                    rate: args.rate,
                };
                settle(&app_port, args.app_workers)?;
                runs[way].push(window(clients, &download, args.window));
            }
        }
        for ((name, _, _), tallies) in ways.iter().zip(&runs) {
            rows.push(row(name, &params, tallies, clients, args.rate, args.window));
        }
    }
    report::print(rows, "aggregate_mb_per_s", args.common.json);
    Ok(())
}

/// Starts `neverblock serve --upstream` in front of the application; returns it and its address.
fn start_server(root: &Path, app_port: &str, workers: usize) -> anyhow::Result<(Process, std::net::SocketAddr)> {
    let mut server = Command::new(std::env::current_exe()?);
    server.args(["serve", "--listen", "127.0.0.1:0", "--workers", &workers.to_string()]);
    server.args(["--upstream", &format!("http://127.0.0.1:{app_port}")]);
    server.arg("--x-sendfile-root").arg(root);
    let (process, line) = start(server, "neverblock serve")?;
    let url = line.split_whitespace().find(|w| w.starts_with("http://")).context("the server's startup line")?;
    let addr = url.trim_start_matches("http://").trim_end_matches('/').parse()?;
    Ok((process, addr))
}

/// Waits until every one of the application's workers is free again: downloads the last window
/// left behind (a proxy still reading a body its client dropped) would otherwise hold up the next
/// window's first requests. Free means `workers` requests at once each answered within 100 ms.
fn settle(app_port: &str, workers: usize) -> anyhow::Result<()> {
    use std::io::{Read, Write};
    let deadline = Instant::now() + Duration::from_secs(60);
    let addr = format!("127.0.0.1:{app_port}");
    loop {
        let probes: Vec<_> = (0..workers.max(1))
            .map(|_| {
                let addr = addr.clone();
                std::thread::spawn(move || -> std::io::Result<Duration> {
                    let started = Instant::now();
                    let mut stream = std::net::TcpStream::connect(&addr)?;
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
        neverblock::run(|| neverblock::sleep(Duration::from_millis(200)));
    }
}

/// One window of `clients` clients downloading `download`.
fn window(clients: usize, download: &Download, length: Duration) -> Tally {
    let download = download.clone();
    neverblock::run(move || {
        // The clients start together once every fiber is made.
        let start = Instant::now() + Duration::from_millis(100);
        clients::run(clients, &download, start, start + length)
    })
}

/// A row of medians over the runs of one way.
fn row(name: &str, params: &serde_json::Value, tallies: &[Tally], clients: usize, rate: u64, window: Duration) -> Row {
    let median = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    let mb_per_s = median(tallies.iter().map(|t| t.bytes as f64 / 1e6 / window.as_secs_f64()).collect());
    let first_byte =
        |p: f64| median(tallies.iter().map(|t| percentile(&t.first_byte, p).as_secs_f64() * 1000.0).collect());
    let (p50, p99) = (first_byte(0.5), first_byte(0.99));
    let bound = clients as f64 * rate as f64 / 1e6;
    let round = |x: f64| (x * 1000.0).round() / 1000.0;
    Row::new("xsendfile", name, params.clone())
        .metric("aggregate_mb_per_s", round(mb_per_s))
        .metric("of_bound_percent", round(100.0 * mb_per_s / bound))
        .metric("p50_first_byte_ms", round(p50))
        .metric("p99_first_byte_ms", round(p99))
        .metric("downloads_complete", tallies.iter().map(|t| t.complete).sum::<u64>())
        .metric("downloads_bad", tallies.iter().map(|t| t.bad).sum::<u64>())
}

fn percentile(values: &[Duration], p: f64) -> Duration {
    let mut sorted = values.to_vec();
    sorted.sort();
    sorted.get(((sorted.len() as f64 * p).ceil() as usize).saturating_sub(1)).copied().unwrap_or_default()
}
