//! The client against servers that bend RFC 9112 or are hostile: what ends a connection, what a
//! reset is called, how long a dripping server can hold a request, how many interim responses
//! are taken, folded and oddly listed fields.

use std::time::{Duration, Instant};

use neverblock::run;
use neverblock_http::{Client, ErrorKind};

use crate::fixtures::{Behaviour, TestServer};

/// A server answering every request with `response` on a connection it keeps open.
fn raw(response: &str) -> TestServer {
    TestServer::start(Behaviour::Raw(response.as_bytes().to_vec()))
}

/// The bodies of two GETs in a row from one client, and how many connections they took.
fn two_gets(server: &TestServer) -> ([String; 2], usize) {
    let url = server.url("/");
    let bodies = run(move || {
        let client = Client::new();
        [(); 2].map(|()| client.get(&url).unwrap().text().into_owned())
    });
    (bodies, server.connections())
}

#[test]
fn an_http_1_0_response_with_transfer_encoding_closes_its_connection() {
    // RFC 9112 §6.1: HTTP/1.0 has no Transfer-Encoding, so what ends the body is in doubt; even a
    // `keep-alive` does not make the connection safe to reuse.
    let server =
        raw("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
    assert_eq!(two_gets(&server), (["hello".to_owned(), "hello".to_owned()], 2));
}

#[test]
fn close_wins_over_keep_alive_in_http_1_0() {
    // RFC 9112 §9.3: `close` in any Connection element, in one field or another, ends the connection.
    for fields in ["Connection: keep-alive, close\r\n", "Connection: keep-alive\r\nConnection: close\r\n"] {
        let server = raw(&format!("HTTP/1.0 200 OK\r\n{fields}Content-Length: 2\r\n\r\nok"));
        assert_eq!(two_gets(&server), (["ok".to_owned(), "ok".to_owned()], 2), "{fields:?}");
    }
    let kept = raw("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok");
    assert_eq!(two_gets(&kept).1, 1, "keep-alive alone keeps an HTTP/1.0 connection");
}

#[test]
fn a_reset_before_any_response_byte_is_a_reset() {
    let server = TestServer::start(Behaviour::Reset);
    let url = server.url("/");
    let (get, post) = run(move || {
        let client = Client::new();
        (client.get(&url).unwrap_err(), client.post(&url, "x").unwrap_err())
    });
    for err in [get, post] {
        assert_eq!(err.kind(), ErrorKind::Reset, "{err}");
        assert!(err.to_string().contains("reset"), "{err}");
    }
}

#[test]
fn in_blocking_mode_the_total_timeout_ends_a_request_while_the_server_drips() {
    // A byte every 100 ms for 30 s, in the head, then in the body: each read succeeds long before
    // the read timeout, so only the total timeout can end the request. The bound below is a hang
    // guard (three times the total timeout), not a claim of speed.
    let total = Duration::from_secs(1);
    let every = Duration::from_millis(100);
    let heads = ["HTTP/1.1 200 OK\r\nX-Slow: ", "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"];
    for head in heads {
        let server = TestServer::start(Behaviour::Drip { head: head.into(), every, total: Duration::from_secs(30) });
        let client = Client::builder().total_timeout(total).build().unwrap();
        let started = Instant::now();
        let err = client.get(&server.url("/")).unwrap_err();
        let took = started.elapsed();
        assert_eq!(err.kind(), ErrorKind::TotalTimeout, "{err}");
        assert!(took < 3 * total, "a {total:?} total timeout ended the request after {took:?} ({head:?})");
    }
}

#[test]
fn in_fibers_the_total_timeout_ends_a_dripping_request_too() {
    let server = TestServer::start(Behaviour::Drip {
        head: b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n".to_vec(),
        every: Duration::from_millis(100),
        total: Duration::from_secs(30),
    });
    let url = server.url("/");
    let (err, took) = run(move || {
        let client = Client::builder().total_timeout(Duration::from_secs(1)).build().unwrap();
        let started = Instant::now();
        (client.get(&url).unwrap_err(), started.elapsed())
    });
    assert_eq!(err.kind(), ErrorKind::TotalTimeout, "{err}");
    assert!(took < Duration::from_secs(3), "hang guard: {took:?}");
}

#[test]
fn endless_interim_responses_are_cut_off() {
    let server =
        raw(&format!("{}HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "HTTP/1.1 100 Continue\r\n\r\n".repeat(1000)));
    let url = server.url("/");
    let err = run(move || Client::new().get(&url).unwrap_err());
    assert_eq!(err.kind(), ErrorKind::TooLarge, "{err}");
    assert!(err.to_string().contains("interim (1xx) responses"), "{err}");
}

#[test]
fn a_folded_field_is_read_with_spaces_for_its_line_breaks() {
    // RFC 9112 §5.2: a user agent must replace each obsolete line fold with spaces.
    let server = raw("HTTP/1.1 200 OK\r\nX-Folded: one\r\n two\r\nContent-Length: 2\r\n\r\nok");
    let url = server.url("/");
    let response = run(move || Client::new().get(&url).unwrap());
    assert_eq!((response.header("x-folded"), response.text().as_ref()), (Some("one   two"), "ok"));
}

#[test]
fn empty_transfer_coding_elements_are_ignored() {
    let server = raw("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, \r\n\r\n5\r\nhello\r\n0\r\n\r\n");
    assert_eq!(two_gets(&server), (["hello".to_owned(), "hello".to_owned()], 1));
}
