//! h2: HTTP/2 from `neverblock serve` beside nginx (`listen … http2`), h2o and Go's net/http
//! (`--peers`), one worker each by default, pinned as `http-hello` pins them (the server on its
//! CPUs, the load on the others), loaded by `h2load` (Debian's `nghttp2-client`): 10 connections,
//! each with 10 streams in flight, for a 13-byte file and a 1 MiB file, over TLS (ALPN `h2`,
//! TLS 1.3, an ECDSA P-256 certificate) and in cleartext (prior knowledge). Each row gives
//! requests/s, MB/s of response bodies and the server's CPU time per request, medians of rounds
//! that alternate the servers (so a slow spell of the machine falls on all of them).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use serde_json::json;

use super::certificates::{self, CertFiles, KeyType};
use super::downloads;
use super::http_hello::HELLO;
use super::servers::{self, pinned, Content, Placement, ServerChild, TempDir};
use super::side_by_side::median;
use super::{h2o, nginx, peers, report, Common, Row};

/// Options of `bench h2`.
#[derive(Args, Debug)]
pub(crate) struct H2Args {
    /// Server workers, one configuration each: neverblock's loops, nginx's worker processes, h2o's
    /// threads, Go's GOMAXPROCS.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize])]
    workers: Vec<usize>,
    /// h2load's connections (`-c`).
    #[arg(short = 'c', long, default_value_t = 10)]
    connections: usize,
    /// Streams in flight on each connection (h2load's `-m`).
    #[arg(short = 'm', long, default_value_t = 10)]
    streams: usize,
    /// How long each measurement counts responses (h2load's `-D`).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// How long each measurement loads the server before counting (h2load's `--warm-up-time`).
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    warmup: Duration,
    /// Rounds, each measuring every server once; rows give medians.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    #[command(flatten)]
    common: Common,
}

/// The files: the 13 bytes of `http-hello`, and 1 MiB.
const FILES: [(&str, usize); 2] = [("hello.txt", HELLO.len()), ("1mib.bin", 1 << 20)];

/// How the load reaches the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transport {
    /// TLS 1.3, `h2` by ALPN.
    Tls,
    /// Cleartext, HTTP/2 by prior knowledge.
    Cleartext,
}

impl Transport {
    fn label(self) -> &'static str {
        match self {
            Transport::Tls => "tls",
            Transport::Cleartext => "cleartext",
        }
    }
}

pub(crate) fn run(args: H2Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.workers.iter().all(|&w| w > 0), "--workers must be at least 1");
    anyhow::ensure!(
        Command::new("h2load").arg("--version").output().is_ok_and(|o| o.status.success()),
        "bench h2 loads the servers with h2load, which is not installed (apt-get install nghttp2-client)"
    );
    let dir = TempDir::new("h2")?;
    let root = dir.0.join("files");
    std::fs::create_dir(&root)?;
    std::fs::write(root.join(FILES[0].0), HELLO)?;
    std::fs::write(root.join(FILES[1].0), downloads::contents(FILES[1].1 as u64))?;
    let cert = certificates::self_signed(&dir.0, KeyType::EcdsaP256)?;
    if args.common.peers {
        // Built now, not on the first start, which runs pinned to the server's CPUs.
        let _ = peers::go_http_server();
    }
    let mut rows = Vec::new();
    for transport in [Transport::Tls, Transport::Cleartext] {
        for (file, len) in FILES {
            for &workers in &args.workers {
                rows.extend(measure(&args, &root, &cert, transport, file, len, workers));
            }
        }
    }
    report::print(rows, "requests_per_s", &args.common)?;
    Ok(())
}

/// A server to measure: its row name and how it starts with a number of workers (`None`: not
/// available here, a note already said why).
struct Contender<'a> {
    name: &'static str,
    start: Box<dyn Fn(usize) -> Option<anyhow::Result<ServerChild>> + 'a>,
}

/// The servers, each serving `content` in HTTP/2.
fn contenders<'a>(content: Content<'a>, transport: Transport, peers: bool) -> Vec<Contender<'a>> {
    let mut contenders = vec![Contender {
        name: "neverblock",
        start: Box::new(move |workers| Some(servers::neverblock(content, workers))),
    }];
    if peers {
        contenders.push(Contender {
            name: "nginx",
            start: Box::new(move |workers| nginx::start_speaking(content, workers, true)),
        });
        contenders.push(Contender { name: "h2o", start: Box::new(move |workers| h2o::start(content, workers)) });
        let h2c = transport == Transport::Cleartext;
        contenders.push(Contender {
            name: "go-net-http",
            start: Box::new(move |workers| servers::go_speaking(content, workers, h2c)),
        });
    }
    contenders
}

/// One measurement: h2load's counts and the server's CPU time meanwhile.
struct Measured {
    requests_per_s: f64,
    mb_per_s: f64,
    server_cpus: f64,
    failed: u64,
}

/// Rows of medians for `file` over `transport` with `workers`, one per server that ran.
fn measure(
    args: &H2Args,
    root: &Path,
    cert: &CertFiles,
    transport: Transport,
    file: &str,
    len: usize,
    workers: usize,
) -> Vec<Row> {
    let content = match transport {
        Transport::Tls => Content::FilesOverTls { root, cert },
        Transport::Cleartext => Content::Files(root),
    };
    let contenders = contenders(content, transport, args.common.peers);
    let placement = Placement::for_workers(workers);
    let params = json!({
        "transport": transport.label(),
        "file": file,
        "workers": workers,
        "connections": args.connections,
        "streams": args.streams,
    });
    eprintln!("note: h2 {params}: {}, h2load on {} thread(s)", placement.describe(), placement.load_threads);
    let mut measured: Vec<Vec<Measured>> = contenders.iter().map(|_| Vec::new()).collect();
    let mut dropped = vec![false; contenders.len()];
    for _ in 0..args.runs.max(1) {
        for (i, contender) in contenders.iter().enumerate() {
            if dropped[i] {
                continue;
            }
            match once(args, contender, &placement, transport, file, len, workers) {
                Some(Ok(m)) => measured[i].push(m),
                Some(Err(e)) => {
                    eprintln!("note: {} skipped: {e:#}", contender.name);
                    dropped[i] = true;
                }
                None => dropped[i] = true,
            }
        }
    }
    contenders
        .iter()
        .zip(measured)
        .filter(|(_, runs)| !runs.is_empty())
        .map(|(contender, runs)| {
            let median_of = |f: fn(&Measured) -> f64| median(runs.iter().map(f).collect());
            Row::new("h2", contender.name, params.clone())
                .metric("requests_per_s", median_of(|m| m.requests_per_s).round())
                .metric("mb_per_s", report::round(median_of(|m| m.mb_per_s)))
                .metric("server_cpus", report::round(median_of(|m| m.server_cpus)))
                .metric("server_cpu_us_per_req", report::round(median_of(|m| m.server_cpus / m.requests_per_s * 1e6)))
                .metric("failed", runs.iter().map(|m| m.failed).sum::<u64>())
                .metric("runs", runs.len())
        })
        .collect()
}

/// Starts the contender on the server's CPUs, runs h2load from the load's CPUs, stops the server.
fn once(
    args: &H2Args,
    contender: &Contender<'_>,
    placement: &Placement,
    transport: Transport,
    file: &str,
    len: usize,
    workers: usize,
) -> Option<anyhow::Result<Measured>> {
    let server = match pinned(placement.server.as_ref(), || (contender.start)(workers))? {
        Ok(server) => server,
        Err(e) => return Some(Err(e)),
    };
    let scheme = match transport {
        Transport::Tls => "https",
        Transport::Cleartext => "http",
    };
    let url = format!("{scheme}://{}/{file}", server.addr);
    let before = server.cpu_time();
    let output = pinned(placement.load.as_ref(), || {
        Command::new("h2load")
            .args(["-c", &args.connections.to_string(), "-m", &args.streams.to_string()])
            .args(["-t", &placement.load_threads.min(args.connections).to_string()])
            .arg(format!("--warm-up-time={}ms", args.warmup.as_millis()))
            .args(["-D", &format!("{}ms", args.duration.as_millis())])
            .arg(&url)
            .output()
    });
    let server_cpu = server.cpu_time() - before;
    drop(server);
    Some(output.context("run h2load").and_then(|output| {
        let text = String::from_utf8_lossy(&output.stdout);
        let counts = H2loadCounts::parse(&text).with_context(|| {
            format!("h2load's output has no counts: {text}{}", String::from_utf8_lossy(&output.stderr))
        })?;
        anyhow::ensure!(counts.protocol == "h2" || counts.protocol == "h2c", "h2load spoke {}", counts.protocol);
        anyhow::ensure!(counts.succeeded > 0, "no request succeeded: {text}");
        let seconds = args.duration.as_secs_f64();
        anyhow::ensure!(
            counts.data >= counts.succeeded * len as u64,
            "the responses carried {} bytes, not {len} each",
            counts.data
        );
        Ok(Measured {
            requests_per_s: counts.succeeded as f64 / seconds,
            mb_per_s: counts.data as f64 / seconds / 1e6,
            server_cpus: server_cpu.as_secs_f64() / (args.warmup + args.duration).as_secs_f64(),
            failed: counts.failed,
        })
    }))
}

/// What h2load reports of a measurement (its duration's, without the warm-up).
#[derive(Debug, PartialEq)]
struct H2loadCounts {
    /// The application protocol it spoke: `h2`, or `h2c` in cleartext.
    protocol: String,
    succeeded: u64,
    /// Failed, errored and timed out.
    failed: u64,
    /// Response body bytes.
    data: u64,
}

impl H2loadCounts {
    /// Reads `Application protocol: h2`, `requests: N total, … N succeeded, N failed, N errored,
    /// N timeout` and `traffic: … N (BYTES) data`.
    fn parse(text: &str) -> Option<H2loadCounts> {
        let protocol = text.lines().find_map(|l| l.strip_prefix("Application protocol: "))?.trim().to_owned();
        let requests = text.lines().find_map(|l| l.strip_prefix("requests: "))?;
        let count = |word: &str| -> Option<u64> {
            requests.split(", ").find_map(|part| part.strip_suffix(word)?.trim().parse().ok())
        };
        let failed = count(" failed")? + count(" errored")? + count(" timeout")?;
        let traffic = text.lines().find_map(|l| l.strip_prefix("traffic: "))?;
        let data = traffic.split(", ").find(|part| part.ends_with(" data"))?;
        let bytes = data.split_once('(')?.1.split_once(')')?.0.parse().ok()?;
        Some(H2loadCounts { protocol, succeeded: count(" succeeded")?, failed, data: bytes })
    }
}

#[cfg(test)]
mod tests {
    use super::H2loadCounts;

    #[test]
    fn h2loads_counts_are_read_from_its_report() {
        let report = "Application protocol: h2c\n\
            finished in 2.00s, 1342.00 req/s, 86.54KB/s\n\
            requests: 1342 total, 1342 started, 1342 done, 1340 succeeded, 2 failed, 0 errored, 1 timeout\n\
            status codes: 1342 2xx, 0 3xx, 0 4xx, 0 5xx\n\
            traffic: 86.54KB (88618) total, 98.07KB (100426) headers (space savings 82.97%), 36.33KB (37206) data\n";
        let counts = H2loadCounts::parse(report).unwrap();
        assert_eq!(counts, H2loadCounts { protocol: "h2c".to_owned(), succeeded: 1340, failed: 3, data: 37206 });
        assert_eq!(H2loadCounts::parse("finished in 2.00s\n"), None);
    }
}
