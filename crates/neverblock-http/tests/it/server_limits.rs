//! Requests the server refuses, as one table: each gets its status, one response only, and the
//! connection closed, so nothing smuggled after it is ever answered.

use std::io::Write;

use neverblock_http::server::Server;

use crate::serving::{count_responses, echo, read_all, Running};

/// Sends `request` (keeping the sending side open) and checks the server answers `status` once and
/// closes the connection.
fn check(server: &Running, request: &[u8], status: u16) {
    let mut stream = server.connect();
    // The server may close before taking every byte of a refused request.
    let _ = stream.write_all(request);
    let answer = read_all(&mut stream);
    let shown = String::from_utf8_lossy(&request[..request.len().min(120)]);
    assert!(answer.starts_with(&format!("HTTP/1.1 {status} ")), "{shown:?} got {answer:?}");
    assert_eq!(count_responses(&answer), 1, "{shown:?}: one answer, then the close: {answer:?}");
    assert!(answer.contains("\r\nConnection: close\r\n"), "{shown:?}: {answer:?}");
}

/// The server the table runs against: small limits, an echo handler that reads bodies whole.
fn limited() -> Running {
    let builder = Server::builder().workers(1).max_request_line(100).max_head(1000).max_headers(10).max_body(1000);
    Running::with(builder, echo())
}

#[test]
fn limits_are_answered_with_their_own_status() {
    let server = limited();
    let long_line = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(100));
    let unfinished_line = format!("GET /{}", "a".repeat(200));
    // One byte over the limit, and no more sent: refused however short the buffer.
    let unfinished_just_over = format!("GET /{}", "a".repeat(96));
    let long_head = format!("GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "b".repeat(1000));
    let many = format!("GET / HTTP/1.1\r\nHost: x\r\n{}\r\n", "X-A: 1\r\n".repeat(10));
    let big_chunked = format!(
        "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3e9\r\n{}\r\n0\r\n\r\n",
        "c".repeat(1001)
    );
    let cases: &[(&[u8], u16)] = &[
        (long_line.as_bytes(), 414),
        (unfinished_line.as_bytes(), 414),
        (unfinished_just_over.as_bytes(), 414),
        (long_head.as_bytes(), 431),
        (many.as_bytes(), 431),
        (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1001\r\n\r\n", 413),
        (big_chunked.as_bytes(), 413),
        (b"GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505),
        (b"GET / HTTP/1.7\r\nHost: x\r\n\r\n", 505),
        (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501),
        (b"PUT / HTTP/1.1\r\nHost: x\r\nExpect: something-else\r\nContent-Length: 1\r\n\r\nx", 417),
        (b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", 501),
    ];
    for &(request, status) in cases {
        check(&server, request, status);
    }
}

#[test]
fn a_request_line_at_the_limit_is_served_and_one_byte_more_is_414() {
    let server = limited();
    for (extra, status) in [(0, 200), (1, 414)] {
        // "GET /" and " HTTP/1.1" around the path: 100 bytes in all, then one more.
        let line = format!("GET /{} HTTP/1.1", "a".repeat(100 - 14 + extra));
        assert_eq!(line.len(), 100 + extra);
        let answer = server.send(format!("{line}\r\nHost: x\r\nConnection: close\r\n\r\n"));
        assert!(answer.starts_with(&format!("HTTP/1.1 {status} ")), "{} bytes: {answer:?}", line.len());
    }
}

#[test]
fn malformed_and_ambiguous_requests_are_400() {
    let server = limited();
    let chunked = "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
    let cases: Vec<(String, &str)> = vec![
        (
            "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".into(),
            "CL and TE",
        ),
        (
            "GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n".into(),
            "TE and CL",
        ),
        ("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd".into(), "differing CL"),
        ("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3, 4\r\n\r\nabcd".into(), "a CL list that differs"),
        ("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n".into(), "a negative CL"),
        ("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0x10\r\n\r\n".into(), "a hex CL"),
        ("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n".into(), "chunked twice"),
        ("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".into(), "TE in HTTP/1.0"),
        (format!("{chunked}zz\r\nabc\r\n0\r\n\r\n"), "a chunk size that is not hex"),
        (format!("{chunked}-1\r\nabc\r\n0\r\n\r\n"), "a negative chunk size"),
        (format!("{chunked}10000000000000000\r\n"), "a chunk size past 64 bits"),
        (format!("{chunked}3;a b\r\nabc\r\n0\r\n\r\n"), "a chunk extension with a space in its name"),
        (format!("{chunked}3;\"q\r\nabc\r\n0\r\n\r\n"), "a broken chunk extension"),
        (format!("{chunked}3\nabc\r\n0\r\n\r\n"), "a bare LF after a chunk size"),
        (format!("{chunked}3\r\nabcd\r\n0\r\n\r\n"), "chunk data longer than its size"),
        (format!("{chunked}3\r\nabc\r\n0\r\nX: 1\r\n folded\r\n\r\n"), "a folded trailer"),
        ("GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n folded\r\n\r\n".into(), "obsolete line folding"),
        ("GET / HTTP/1.1\r\nHost : x\r\n\r\n".into(), "whitespace before a colon"),
        ("GET / HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\n\r\n".into(), "a NUL in a field"),
        ("GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x01b\r\n\r\n".into(), "a control byte in a field"),
        ("GET / HTTP/1.1\r\nHost: x\r\nX A: 1\r\n\r\n".into(), "a space in a field name"),
        ("GET / HTTP/1.1\r\nHost: x\r\nX-A 1\r\n\r\n".into(), "a field without a colon"),
        ("GET /a\x7f HTTP/1.1\r\nHost: x\r\n\r\n".into(), "a DEL in the target"),
        ("GET  / HTTP/1.1\r\nHost: x\r\n\r\n".into(), "two spaces in the request line"),
        ("GET / HTTP/1.1\r\n\r\n".into(), "no Host"),
        ("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n".into(), "two Hosts"),
        ("GET / HTTP/1.1\r\nHost: a b\r\n\r\n".into(), "a space in the Host"),
        ("GET / HTTP/1.1\r\nHost: a/b@c\r\n\r\n".into(), "a Host that is not a host"),
        (
            "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: \r\n\r\n0\r\n\r\n".into(),
            "an empty Transfer-Encoding after chunked",
        ),
        (format!("{chunked}3\r\nabc\r\n0\r\nX: a\0b\r\n\r\n"), "a NUL in a trailer field"),
        ("GET nopath HTTP/1.1\r\nHost: x\r\n\r\n".into(), "a target without a path"),
        ("\x16\x03\x01\x02\x00\x01\x00\x01\x7c\x03\x03\r\n\r\n".into(), "a TLS hello"),
    ];
    for (request, what) in cases {
        let mut stream = server.connect();
        let _ = stream.write_all(request.as_bytes());
        let answer = read_all(&mut stream);
        assert!(answer.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{what}: {answer:?}");
        assert_eq!(count_responses(&answer), 1, "{what}: {answer:?}");
    }
}

#[test]
fn a_request_smuggled_behind_ambiguous_framing_is_never_answered() {
    let server = limited();
    let attacks = [
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 44\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2;\n\r\nxx\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
    ];
    for attack in attacks {
        let mut stream = server.connect();
        let _ = stream.write_all(attack.as_bytes());
        let answer = read_all(&mut stream);
        assert!(!answer.contains("/smuggled"), "{attack:?} got {answer:?}");
        assert_eq!(count_responses(&answer), 1, "{attack:?} got {answer:?}");
    }
}

#[test]
fn the_server_goes_on_after_refusing() {
    let server = limited();
    check(&server, b"GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400);
    let answer = server.send("GET /fine HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n") && answer.ends_with("GET /fine "), "{answer}");
    let stats = server.handle.stats();
    assert_eq!((stats.accepted, stats.requests), (2, 2), "the refusal counts as a request answered");
}

#[test]
fn a_request_line_that_is_not_http_is_closed_unanswered() {
    let server = limited();
    // No `HTTP/` at its end: another protocol (here h2spec's broken HTTP/2 preface), which an
    // HTTP/1 answer would only confuse.
    assert_eq!(server.send("INVALID CONNECTION PREFACE\r\n\r\n"), "");
    assert_eq!(server.send("GET / FOO/1.1\r\nHost: x\r\n\r\n"), "");
    assert!(server.send("GET / HTTP/1.x\r\nHost: x\r\n\r\n").starts_with("HTTP/1.1 400 "), "ends in HTTP/, malformed");
}
