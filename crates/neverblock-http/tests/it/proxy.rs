//! The reverse proxy against a real application (a Python program): pages, bodies both ways,
//! fields, the keep-alive pool, X-Sendfile answers, and an upstream that fails in each way.

use std::io::{BufReader, Read, Write};
use std::time::Duration;

use neverblock_http::server::{Metrics, Proxy, Server, XSendfile};
use serde_json::Value;

use crate::logs;
use crate::serving::{read_reply, replies, Reply, Running, TempDir};
use crate::upstream::Upstream;

/// An application, a proxy in front of it, and the directory the application serves.
struct Front {
    server: Running,
    upstream: Option<Upstream>,
    files: TempDir,
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 253) as u8).collect()
}

fn front() -> Front {
    front_with(|proxy, _| proxy)
}

fn front_with(configure: impl FnOnce(Proxy, &TempDir) -> Proxy) -> Front {
    logs::capture();
    let files = TempDir::new("proxy-files");
    files.write("file.bin", pattern(300_000));
    let upstream = Upstream::start(files.path());
    let proxy = configure(Proxy::new(&upstream.url()).unwrap(), &files);
    Front { server: Running::start(proxy), upstream: Some(upstream), files }
}

impl Front {
    /// Sends `raw` and reads the one final response (after a `100 Continue`, if one came).
    fn request(&self, raw: &str) -> Reply {
        let answer = self.server.send_bytes(raw);
        let answer = answer.as_slice().strip_prefix(b"HTTP/1.1 100 Continue\r\n\r\n").unwrap_or(&answer);
        let mut all = replies(answer);
        assert_eq!(all.len(), 1, "{}", String::from_utf8_lossy(answer));
        all.remove(0)
    }

    fn get(&self, target: &str, fields: &str) -> Reply {
        self.request(&format!("GET {target} HTTP/1.1\r\nHost: front.example\r\n{fields}\r\n"))
    }
}

/// The fields the application saw, from its echo.
fn seen(echo: &Value) -> Vec<(String, String)> {
    echo["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f[0].as_str().unwrap().to_owned(), f[1].as_str().unwrap().to_owned()))
        .collect()
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
}

#[test]
fn a_proxied_page_comes_back_and_the_upstream_sees_forwarding_fields_but_no_hop_by_hop_ones() {
    let front = front();
    let hello = front.get("/hello", "");
    assert_eq!((hello.status, hello.text().as_str()), (200, "hello, world!\n"));
    assert_eq!(hello.header("content-type"), Some("text/plain"));

    let reply = front.get(
        "/echo?x=1&y=%20",
        "Connection: X-Secret\r\nX-Secret: for this hop\r\nKeep-Alive: timeout=5\r\nTE: trailers\r\n\
         Proxy-Authorization: Basic eA==\r\nX-Forwarded-For: 198.51.100.4\r\nAccept: */*\r\n",
    );
    let echo: Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(echo["method"], "GET");
    assert_eq!(echo["target"], "/echo?x=1&y=%20", "the target as sent");
    let fields = seen(&echo);
    for hop in ["connection", "x-secret", "keep-alive", "te", "proxy-authorization"] {
        assert!(field(&fields, hop).is_none() || hop == "connection", "{hop} reached the upstream: {fields:?}");
    }
    assert_ne!(field(&fields, "connection"), Some("X-Secret"));
    assert_eq!(field(&fields, "accept"), Some("*/*"));
    assert_eq!(field(&fields, "host"), Some(&*format!("127.0.0.1:{}", front.upstream.as_ref().unwrap().port)));
    assert_eq!(field(&fields, "x-forwarded-host"), Some("front.example"));
    assert_eq!(field(&fields, "x-forwarded-for"), Some("198.51.100.4, 127.0.0.1"));
    assert_eq!(field(&fields, "x-forwarded-proto"), Some("http"));
    assert_eq!(field(&fields, "forwarded"), Some("for=127.0.0.1;host=front.example;proto=http"));

    // A redirect is the upstream's answer to the client, passed on as it is, not followed.
    let moved = front.get("/redirect?to=/hello", "");
    assert_eq!((moved.status, moved.text().as_str(), moved.header("location")), (302, "moved\n", Some("/hello")));

    let hop = front.get("/hop", "");
    assert_eq!((hop.status, hop.text().as_str(), hop.header("x-end-to-end")), (200, "hop\n", Some("kept")));
    for gone in ["x-hop-field", "keep-alive", "proxy-authenticate", "upgrade"] {
        assert!(hop.header(gone).is_none(), "{gone} reached the client: {hop:?}");
    }
}

#[test]
fn bodies_stream_both_ways_sized_and_chunked() {
    let front = front();
    let body: Vec<u8> = pattern(200_000).iter().map(|b| b'a' + b % 26).collect();
    let mut chunked = String::new();
    for piece in body.chunks(70_000) {
        chunked.push_str(&format!("{:x}\r\n{}\r\n", piece.len(), String::from_utf8_lossy(piece)));
    }
    let reply = front.request(&format!(
        "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\n{chunked}0\r\n\r\n"
    ));
    let echo: Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!((echo["method"].as_str(), echo["chunked"].as_bool()), (Some("POST"), Some(true)), "streamed on as sent");
    assert_eq!(echo["body"].as_str().unwrap().as_bytes(), body, "the chunked body arrived whole");
    assert_eq!(field(&seen(&echo), "content-type"), Some("text/plain"));

    let sized = front.request(&format!(
        "PUT /echo HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n{}",
        body.len(),
        String::from_utf8_lossy(&body)
    ));
    let echo: Value = serde_json::from_slice(&sized.body).unwrap();
    assert_eq!((echo["method"].as_str(), echo["chunked"].as_bool()), (Some("PUT"), Some(false)));
    assert_eq!(echo["body"].as_str().unwrap().len(), body.len());
    assert!(field(&seen(&echo), "expect").is_none(), "the server answered the 100-continue itself");

    let streamed = front.get("/stream?chunks=4", "");
    assert_eq!(streamed.text(), "chunk 0\nchunk 1\nchunk 2\nchunk 3\n");
    assert_eq!(streamed.header("transfer-encoding"), Some("chunked"), "a body of unknown length goes on chunked");
    let file = front.get("/file?path=file.bin&mode=stream", "");
    assert_eq!((file.header("content-length"), file.body == pattern(300_000)), (Some("300000"), true));
}

#[test]
fn the_upstream_connection_is_kept_alive_and_reused() {
    let front = front();
    let mut stream = front.server.connect();
    stream.write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\nGET /hello HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    stream.write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    let connections: Vec<String> =
        replies(&answer).iter().map(|r| r.header("x-upstream-connection").unwrap().to_owned()).collect();
    assert_eq!(connections.len(), 3);
    assert!(connections.iter().all(|c| *c == connections[0]), "one upstream connection carried all: {connections:?}");
}

#[test]
fn x_sendfile_answers_are_sent_from_the_root_with_ranges_and_never_leak() {
    logs::capture();
    let files = TempDir::new("proxy-sendfile");
    files.write("file.bin", pattern(300_000));
    let outside = TempDir::new("proxy-outside");
    outside.write("secret.txt", "SECRET");
    let upstream = Upstream::start(files.path());
    let proxy = Proxy::new(&upstream.url()).unwrap();
    let handler = XSendfile::new(proxy).root(files.path()).unwrap().accel_location("/files/", files.path()).unwrap();
    let server = Running::start(handler);
    let get = |target: &str, fields: &str| {
        let answer = server.send_bytes(format!("GET {target} HTTP/1.1\r\nHost: x\r\n{fields}\r\n"));
        replies(&answer).remove(0)
    };
    for mode in ["sendfile", "accel"] {
        let whole = get(&format!("/file?path=file.bin&mode={mode}"), "");
        assert_eq!((whole.status, whole.body.len()), (200, 300_000), "{mode}");
        assert!(whole.body == pattern(300_000));
        assert!(whole.header("x-sendfile").is_none() && whole.header("x-accel-redirect").is_none(), "{whole:?}");
        let part = get(&format!("/file?path=file.bin&mode={mode}"), "Range: bytes=1000-1999\r\n");
        assert_eq!((part.status, part.header("content-range")), (206, Some("bytes 1000-1999/300000")));
        assert!(part.body == pattern(300_000)[1000..2000]);
    }
    let secret = outside.path().join("secret.txt");
    let refused = get(&format!("/sendfile?path={}", secret.display()), "");
    assert_eq!(refused.status, 404);
    assert!(refused.header("x-sendfile").is_none() && !refused.text().contains("SECRET"), "{refused:?}");
    assert!(!logs::lines_containing(secret.to_str().unwrap()).is_empty(), "a log line names the path");
    let typed = get(&format!("/sendfile?path={}", files.path().join("file.bin").display()), "");
    assert_eq!(typed.header("content-type"), Some("text/x-report"), "the application's type wins");
    assert_eq!(typed.header("content-disposition"), Some("attachment; filename=\"report.txt\""));
    assert_eq!(typed.body.len(), 300_000);
}

#[test]
fn a_refused_or_reset_upstream_gets_502_and_a_slow_one_504() {
    logs::capture();
    let nothing = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = nothing.local_addr().unwrap().port();
    drop(nothing);
    let refused = Running::start(Proxy::new(&format!("http://127.0.0.1:{port}")).unwrap());
    let answer = refused.send("GET /refused-here HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 502 "), "{answer}");
    assert!(!logs::lines_containing("/refused-here").is_empty(), "a log line says why");

    let front = front_with(|proxy, _| proxy.timeout(Duration::from_millis(500)));
    let reset = front.get("/reset", "Connection: close\r\n");
    assert_eq!(reset.status, 502);
    let slow = front.get("/slow?ms=3000", "Connection: close\r\n");
    assert_eq!(slow.status, 504);
    assert!(!logs::lines_containing("/slow?ms=3000").is_empty());
    assert_eq!(front.get("/hello", "").text(), "hello, world!\n", "and the proxy goes on");
}

#[test]
fn an_upstream_killed_mid_run_gets_502_and_the_server_goes_on() {
    logs::capture();
    let mut front = front();
    let port = front.upstream.as_ref().unwrap().port;
    // A response in flight when the application dies is cut short, never taken for whole.
    let mut stream = front.server.connect();
    stream.write_all(b"GET /stream?chunks=200 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut first = [0u8; 64];
    stream.read_exact(&mut first).unwrap();
    front.upstream.take().unwrap().kill();
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    let whole = [&first[..], &rest].concat();
    // Streamed: the first chunks came before the application died, and the rest never did.
    assert!(!String::from_utf8_lossy(&whole).contains("chunk 199"), "the response was cut short");

    let dead = front.get("/hello", "Connection: close\r\n");
    assert_eq!(dead.status, 502);
    let again = Upstream::on_port(front.files.path(), port);
    assert_eq!(front.get("/hello", "").text(), "hello, world!\n", "back once the application is");
    drop(again);
}

#[test]
fn metrics_count_proxied_requests_in_flight_and_upstream_failures() {
    let files = TempDir::new("proxy-metrics");
    // Far more than the kernel buffers between the proxy and a client that stops reading.
    std::fs::File::create(files.path().join("big.bin")).unwrap().set_len(64 << 20).unwrap();
    let upstream = Upstream::start(files.path());
    let metrics = Metrics::new();
    let proxy =
        Proxy::new(&upstream.url()).unwrap().timeout(Duration::from_millis(500)).observe(metrics.proxy_observer());
    let server =
        Running::with(Server::builder().workers(1).on_response(metrics.hook()), metrics.serve("/metrics", proxy));
    let page = || {
        let mut stream = server.connect();
        stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
        read_reply(&mut BufReader::new(stream), false).text()
    };
    let mut slow = server.connect();
    slow.write_all(b"GET /file?path=big.bin&mode=stream HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut first = [0u8; 32];
    slow.read_exact(&mut first).unwrap();
    assert!(page().contains("\nneverblock_proxy_requests_in_flight 1\n"), "until its body is sent");
    server.send("GET /slow?ms=3000 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    drop(slow);
    wait_until_gone(&page);
    let text = page();
    assert!(text.contains("\nneverblock_proxy_upstream_errors_total{kind=\"timeout\"} 1\n"), "{text}");
    assert!(text.contains("\nneverblock_proxy_requests_total 2\n"), "{text}");
    assert!(text.contains("\nneverblock_proxy_requests_in_flight 0\n"), "{text}");
}

/// Waits (up to 10 s) until no proxied request is in flight on `page`.
fn wait_until_gone(page: &dyn Fn() -> String) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !page().contains("\nneverblock_proxy_requests_in_flight 0\n") {
        assert!(std::time::Instant::now() < deadline, "a request stayed in flight after its client left");
        #[expect(clippy::disallowed_methods, reason = "a plain test thread polls the page")]
        std::thread::sleep(Duration::from_millis(10));
    }
}
