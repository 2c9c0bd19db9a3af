//! The server's own handlers over HTTP/2, through curl by prior knowledge and over TLS: static
//! files' ranges and conditional requests, X-Sendfile answers and the reverse proxy, byte for
//! byte; the access log's `HTTP/2.0` and the metrics by protocol.

use neverblock_http::server::{AccessLog, Exchange, LogFormat, Metrics, Proxy, ServerBuilder, StaticFiles, XSendfile};

use crate::http2::{curl, pattern, self_signed};
use crate::serving::{Running, TempDir};
use crate::upstream::Upstream;

/// `www/` served as files, then (for what is not a file) the Python application in front of the
/// same directory, its X-Sendfile answers honoured; metrics at `/metrics`, an access log.
struct Site {
    server: Running,
    dir: TempDir,
    log: AccessLog,
    _upstream: Upstream,
}

fn site(tls: bool) -> Site {
    let dir = TempDir::new("http2-sites");
    dir.write("www/small.txt", "small over h2\n");
    dir.write("www/big.bin", pattern(1 << 20));
    let www = dir.path().join("www");
    let upstream = Upstream::start(&www);
    let metrics = Metrics::new();
    let log = AccessLog::file(dir.path().join("access.log"), LogFormat::common()).unwrap();
    let (counted, logged) = (metrics.clone(), log.clone());
    let builder = ServerBuilder::default().workers(1).on_response(move |x: &Exchange<'_>| {
        counted.record(x);
        logged.record(x);
    });
    let proxy = XSendfile::new(Proxy::new(&upstream.url()).unwrap()).root(&www).unwrap();
    let handler = metrics.serve("/metrics", StaticFiles::new(&www).unwrap().then(proxy));
    let server =
        if tls { Running::with_tls(builder, &self_signed(&dir), handler) } else { Running::with(builder, handler) };
    metrics.watch(&server.handle);
    Site { server, dir, log, _upstream: upstream }
}

impl Site {
    /// The body curl gets for `path` with `flags`, and its status, checked to come over HTTP/2.
    fn get(&self, tls: bool, flags: &[&str], path: &str) -> (Vec<u8>, u16) {
        let (scheme, how) =
            if tls { ("https", ["-k", "--http2"]) } else { ("http", ["--http2-prior-knowledge", "-g"]) };
        let flags: Vec<&str> = how.iter().chain(flags).copied().collect();
        let out = self.dir.path().join("curl.out");
        // curl leaves the file as it was when no body comes (a 304).
        let _ = std::fs::remove_file(&out);
        let (body, spoke) = curl(&flags, &format!("{scheme}://{}{path}", self.server.addr), &out);
        let (version, status) = spoke.split_once(' ').unwrap();
        assert_eq!(version, "2", "{path} over HTTP/2");
        (body, status.parse().unwrap())
    }

    /// The value of `field` in the response head curl got for `path`.
    fn field(&self, tls: bool, path: &str, field: &str) -> String {
        let heads = self.dir.path().join("heads.txt");
        self.get(tls, &["-D", heads.to_str().unwrap()], path);
        let heads = std::fs::read_to_string(&heads).unwrap();
        let prefix = format!("{field}: ");
        let line = heads.lines().find(|line| line.to_ascii_lowercase().starts_with(&prefix));
        line.unwrap_or_else(|| panic!("no {field} in {heads}"))[prefix.len()..].trim().to_owned()
    }
}

/// Every handler's answer over HTTP/2 (TLS or not), byte for byte.
fn check_handlers(tls: bool) {
    let site = site(tls);
    let big = pattern(1 << 20);
    assert_eq!(site.get(tls, &["-r", "1000-1999"], "/big.bin"), (big[1000..2000].to_vec(), 206));
    assert_eq!(site.get(tls, &["-r", "-100"], "/big.bin"), (big[big.len() - 100..].to_vec(), 206));
    let etag = site.field(tls, "/small.txt", "etag");
    let modified = site.field(tls, "/small.txt", "last-modified");
    let not_modified = site.get(tls, &["-H", &format!("If-None-Match: {etag}")], "/small.txt");
    assert_eq!(not_modified, (Vec::new(), 304));
    let since = site.get(tls, &["-H", &format!("If-Modified-Since: {modified}")], "/small.txt");
    assert_eq!(since, (Vec::new(), 304));
    let stale_range = site.get(tls, &["-r", "0-4", "-H", "If-Range: \"other\""], "/small.txt");
    assert_eq!(stale_range, (b"small over h2\n".to_vec(), 200), "If-Range that does not match: the whole file");
    assert_eq!(site.get(tls, &[], "/hello"), (b"hello, world!\n".to_vec(), 200), "proxied");
    assert_eq!(site.get(tls, &[], "/file?path=big.bin&mode=stream"), (big.clone(), 200), "proxied, streamed");
    assert_eq!(site.get(tls, &[], "/file?path=big.bin&mode=sendfile"), (big.clone(), 200), "X-Sendfile");
    let ranged = site.get(tls, &["-r", "500000-500099"], "/file?path=big.bin&mode=sendfile");
    assert_eq!(ranged, (big[500_000..500_100].to_vec(), 206), "X-Sendfile, a range");
    let (echo, status) = site.get(tls, &["--data-binary", "a posted body"], "/echo");
    let echo: serde_json::Value = serde_json::from_slice(&echo).unwrap();
    assert_eq!((status, echo["method"].as_str(), echo["body"].as_str()), (200, Some("POST"), Some("a posted body")));
}

#[test]
fn files_ranges_conditionals_x_sendfile_and_the_proxy_by_prior_knowledge() {
    check_handlers(false);
}

#[test]
fn files_ranges_conditionals_x_sendfile_and_the_proxy_over_tls() {
    check_handlers(true);
}

#[test]
fn the_access_log_says_http2_and_the_metrics_count_streams_and_connections_by_protocol() {
    let site = site(false);
    for _ in 0..3 {
        site.get(false, &[], "/small.txt");
    }
    site.server.send("GET /small.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let (page, _) = site.get(false, &[], "/metrics");
    let page = String::from_utf8(page).unwrap();
    for line in [
        "neverblock_connections_served_total{protocol=\"HTTP/1\"} 1",
        "neverblock_connections_served_total{protocol=\"HTTP/2\"} 4",
        "neverblock_connections_serving{protocol=\"HTTP/2\"} 1",
        "neverblock_http_requests_by_version_total{version=\"HTTP/1.1\"} 1",
        "neverblock_http_requests_by_version_total{version=\"HTTP/2.0\"} 3",
    ] {
        assert!(page.lines().any(|l| l == line), "{line} in {page}");
    }
    site.log.close();
    let log = std::fs::read_to_string(site.dir.path().join("access.log")).unwrap();
    let h2 = log.lines().filter(|l| l.contains("\"GET /small.txt HTTP/2.0\" 200 14")).count();
    assert_eq!(h2, 3, "{log}");
    assert!(log.contains("\"GET /small.txt HTTP/1.1\" 200 14"), "{log}");
}
