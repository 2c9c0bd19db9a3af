//! The metrics page: read by a parser of Prometheus' text format, every line a sample or a comment,
//! and its counters moving as requests are made.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};

use neverblock_http::server::{Metrics, Request, Response, Server, StaticFiles};
use prometheus_parse::{LineInfo, Scrape, Value};

use crate::serving::{read_reply, Running, TempDir};

/// A server of `/files/*` from a directory and `/hello`, with metrics at `/metrics`.
fn instrumented(dir: &TempDir) -> Running {
    let metrics = Metrics::new();
    let files = StaticFiles::new(dir.path()).unwrap();
    let app = move |request: &mut Request<'_>| match request.path().strip_prefix("/files") {
        Some(rest) => files.serve_path(request, rest),
        None if request.path() == "/hello" => Response::new(200).body("hello\n"),
        None => Response::new(404),
    };
    let builder = Server::builder().workers(2).on_response(metrics.hook());
    let running = Running::with(builder, metrics.serve("/metrics", app));
    metrics.watch(&running.handle);
    running
}

/// One scrape: each sample's value by its name and labels (`name{a="x",b="y"}`, labels sorted).
struct Page(HashMap<String, f64>);

fn scrape(server: &Running) -> Page {
    let mut stream = server.connect();
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let reply = read_reply(&mut BufReader::new(stream), false);
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), Some("text/plain; version=0.0.4; charset=utf-8"));
    let text = reply.text();
    for line in text.lines() {
        let parsed = LineInfo::parse(line);
        assert!(!matches!(parsed, LineInfo::Ignored | LineInfo::Empty), "not exposition format: {line:?}");
    }
    let parsed = Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap();
    let mut values = HashMap::new();
    for sample in parsed.samples {
        let mut labels: Vec<String> = sample.labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
        labels.sort();
        let key = if labels.is_empty() {
            sample.metric.clone()
        } else {
            format!("{}{{{}}}", sample.metric, labels.join(","))
        };
        match sample.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => {
                values.insert(key, v);
            }
            Value::Histogram(buckets) => {
                assert!(buckets.windows(2).all(|w| w[0].less_than < w[1].less_than && w[0].count <= w[1].count));
                let all = buckets.last().unwrap();
                assert!(all.less_than.is_infinite(), "{buckets:?}");
                values.insert(format!("{key}:+Inf"), all.count);
            }
            Value::Summary(_) => panic!("no summaries on the page"),
        }
    }
    Page(values)
}

impl Page {
    fn get(&self, key: &str) -> f64 {
        *self.0.get(key).unwrap_or_else(|| panic!("{key} is not on the page: {:?}", self.0.keys()))
    }
}

#[test]
fn the_page_parses_and_its_counters_move_with_requests() {
    let dir = TempDir::new("metrics");
    dir.write("small.txt", "0123456789");
    let server = instrumented(&dir);
    let before = scrape(&server);
    let get = "neverblock_http_requests_total{method=\"GET\",status=\"2xx\"}";
    let bytes = before.get("neverblock_http_response_body_bytes_total");
    let accepted = before.get("neverblock_connections_accepted_total");
    let durations = before.get("neverblock_http_request_duration_seconds:+Inf");

    for _ in 0..3 {
        assert!(server.send("GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ends_with("hello\n"));
    }
    server.send("GET /files/small.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    server.send("DELETE /nowhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    server.send("BREW /pot HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    server.send("GET /\x01 HTTP/1.1\r\n\r\n");

    let after = scrape(&server);
    // The first scrape is counted once it was sent: one more GET 2xx than the requests here.
    assert_eq!(after.get(get) - before.0.get(get).copied().unwrap_or(0.0), 5.0);
    assert_eq!(after.get("neverblock_http_requests_total{method=\"DELETE\",status=\"4xx\"}"), 1.0);
    assert_eq!(
        after.get("neverblock_http_requests_total{method=\"other\",status=\"4xx\"}"),
        2.0,
        "BREW, and a refused head"
    );
    assert!(after.get("neverblock_http_response_body_bytes_total") >= bytes + 3.0 * 6.0 + 10.0);
    assert_eq!(after.get("neverblock_connections_accepted_total") - accepted, 8.0);
    assert!(after.get("neverblock_connections_open") >= 1.0, "the scrape's own connection");
    assert_eq!(after.get("neverblock_http_request_duration_seconds:+Inf") - durations, 8.0);
    assert_eq!(after.get("neverblock_downloads_in_flight"), 0.0);
    for index in 0..2 {
        assert!(after.get(&format!("neverblock_fibers{{loop=\"{index}\"}}")) >= 1.0, "each loop's accept fiber");
        // Present for each loop (`get` fails on a missing sample).
        after.get(&format!("neverblock_run_queue_length{{loop=\"{index}\"}}"));
        assert_eq!(after.get(&format!("neverblock_loop_stalls_total{{loop=\"{index}\"}}")), 0.0, "nothing held a loop");
        let turns = after.get(&format!("neverblock_loop_turn_seconds{{loop=\"{index}\"}}:+Inf"));
        assert!(turns >= 1.0, "loop {index} turned at least once: {turns}");
    }
}

#[test]
fn a_file_being_sent_counts_as_a_download_in_flight_until_its_end() {
    let dir = TempDir::new("metrics-download");
    // Far more than the kernel buffers between the server and a client that stops reading.
    let file = std::fs::File::create(dir.path().join("big.bin")).unwrap();
    file.set_len(64 << 20).unwrap();
    let server = instrumented(&dir);
    let mut slow = server.connect();
    slow.write_all(b"GET /files/big.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut first = [0u8; 4096];
    slow.read_exact(&mut first).unwrap();
    assert!(first.starts_with(b"HTTP/1.1 200 OK\r\n"));
    assert_eq!(scrape(&server).get("neverblock_downloads_in_flight"), 1.0);
    let mut rest = BufReader::new(slow);
    let mut total = first.len();
    loop {
        let n = rest.fill_buf().unwrap().len();
        if n == 0 {
            break;
        }
        rest.consume(n);
        total += n;
    }
    assert!(total > 64 << 20);
    assert_eq!(scrape(&server).get("neverblock_downloads_in_flight"), 0.0);
}
