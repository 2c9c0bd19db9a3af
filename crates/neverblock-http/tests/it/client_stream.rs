//! Responses read as streams and request bodies sent from readers: when the connection goes back to
//! the pool, what a proxy sees of the head, and the limits a stream keeps or drops.

use std::cell::RefCell;
use std::io::{BufRead, Read};
use std::rc::Rc;
use std::time::Duration;

use neverblock::run;
use neverblock_http::{Client, Error, ErrorKind, Request, Version};

use crate::fixtures::{Behaviour, TestServer};

fn get(url: &str) -> Request {
    Request::new("GET", url)
}

/// The client's error inside an I/O error from a stream's `Read`.
fn inner(e: &std::io::Error) -> &Error {
    e.get_ref().and_then(|e| e.downcast_ref::<Error>()).unwrap_or_else(|| panic!("no client error in {e:?}"))
}

#[test]
fn send_returns_at_the_head_while_the_body_is_held_back() {
    // A long body, three bytes at once, then a byte every 100 ms for 30 s (or until the client leaves).
    let server = TestServer::start(Behaviour::Drip {
        head: b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nabc".to_vec(),
        every: Duration::from_millis(100),
        total: Duration::from_secs(30),
    });
    let url = server.url("/");
    let (status, length, first) = run(move || {
        let mut response = Client::new().send(&get(&url)).unwrap();
        let mut first = [0; 3];
        response.read_exact(&mut first).unwrap();
        (response.status(), response.content_length(), first)
    });
    assert_eq!((status, length, &first), (200, Some(1000), b"abc"));
}

#[test]
fn a_body_read_to_its_end_gives_the_connection_back() {
    let fixed = TestServer::start(Behaviour::fixed(200, &[], "hello"));
    let chunked = TestServer::start(Behaviour::Chunked { chunks: vec![b"a".to_vec(), b"bc".to_vec()] });
    let (fixed_url, chunked_url) = (fixed.url("/"), chunked.url("/"));
    run(move || {
        // One connection per host: a stream that kept it would leave the next request waiting forever.
        let client = Client::builder().max_connections_per_host(1).build().unwrap();
        let mut text = String::new();
        client.send(&get(&fixed_url)).unwrap().read_to_string(&mut text).unwrap();
        // Exactly the announced length, with no read that returns 0: the last byte ends it.
        let mut exact = [0; 5];
        client.send(&get(&fixed_url)).unwrap().read_exact(&mut exact).unwrap();
        let head = client.send(&Request::new("HEAD", fixed_url.as_str())).unwrap();
        assert_eq!(head.content_length(), Some(0), "a HEAD response has no body, whatever its fields say");
        drop(head);
        let mut lines = client.send(&get(&chunked_url)).unwrap().lines();
        assert_eq!(lines.next().unwrap().unwrap(), "abc");
        assert!(lines.next().is_none());
        drop(lines);
        client.send(&get(&chunked_url)).unwrap().copy_to(&mut std::io::sink()).unwrap();
        assert_eq!((text.as_str(), &exact), ("hello", b"hello"));
    });
    assert_eq!((fixed.connections(), fixed.requests()), (1, 3));
    assert_eq!((chunked.connections(), chunked.requests()), (1, 2));
}

#[test]
fn a_stream_dropped_before_its_end_closes_its_connection() {
    let server = TestServer::start(Behaviour::fixed(200, &[], vec![b'x'; 1 << 20]));
    let url = server.url("/");
    let statuses = run(move || {
        let client = Client::builder().max_connections_per_host(1).build().unwrap();
        let mut partly = client.send(&get(&url)).unwrap();
        partly.read_exact(&mut [0; 10]).unwrap();
        drop(partly);
        // Its slot is free again, and the next request has a connection of its own.
        let streamed = client.send(&get(&url)).unwrap().status();
        [streamed, client.get(&url).unwrap().status()]
    });
    assert_eq!(statuses, [200, 200]);
    assert_eq!((server.connections(), server.requests()), (3, 3), "the first body was cut short: not reused");
}

#[test]
fn the_head_keeps_every_field_in_order_with_repeats() {
    let headers = [("Set-Cookie", "a=1"), ("X-Other", "y"), ("set-cookie", "b=2")];
    let server = TestServer::start(Behaviour::fixed(404, &headers, "gone"));
    let url = server.url("/missing");
    let (status, version, reason, header, fields, url_seen) = run(move || {
        let response = Client::new().send(&get(&url)).unwrap();
        let fields: Vec<(String, Vec<u8>)> = response.headers().map(|(n, v)| (n.to_owned(), v.to_vec())).collect();
        let header = response.header("SET-COOKIE").map(str::to_owned);
        (response.status(), response.version(), response.reason().to_owned(), header, fields, response.url().to_owned())
    });
    assert_eq!((status, version, reason.as_str(), header.as_deref()), (404, Version::Http11, "Not Found", Some("a=1")));
    let expected: Vec<(String, Vec<u8>)> =
        [("Set-Cookie", "a=1"), ("X-Other", "y"), ("set-cookie", "b=2"), ("Content-Length", "4")]
            .iter()
            .map(|&(n, v)| (n.to_owned(), v.as_bytes().to_vec()))
            .collect();
    assert_eq!(fields, expected);
    assert!(url_seen.ends_with("/missing"), "{url_seen}");
}

#[test]
fn a_body_from_a_reader_goes_chunked_or_by_its_length() {
    let server = TestServer::start(Behaviour::Echo);
    let url = server.url("/upload");
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let echoed = run(move || {
        let client = Client::new();
        // A reader that is neither Send nor 'static, as a proxy's request body is.
        let shared = Rc::new(RefCell::new(&big[..]));
        let reader = RcReader(shared.clone());
        let request = Request::new("PUT", url.as_str()).header("Content-Length", "1");
        let chunked = client.send_body(&request, reader, None).unwrap().into_response().unwrap();
        let mut sized_reader = &b"sized body"[..];
        let sized = client.send_body(&request, &mut sized_reader, Some(10)).unwrap().into_response().unwrap();
        (chunked.into_body(), sized.into_body())
    });
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(echoed.0, [b"PUT ".as_slice(), &big].concat());
    assert_eq!(echoed.1, b"PUT sized body");
    assert_eq!(server.connections(), 1, "both went over one kept-alive connection");
}

/// Reads from a slice shared through an `Rc`: a reader that is not `Send`.
struct RcReader<'a>(Rc<RefCell<&'a [u8]>>);

impl Read for RcReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        // Short reads, so the body goes as many chunks.
        let mut rest = self.0.borrow_mut();
        let n = rest.len().min(buf.len()).min(7000);
        buf[..n].copy_from_slice(&rest[..n]);
        *rest = &rest[n..];
        Ok(n)
    }
}

#[test]
fn a_reader_that_ends_early_fails_the_request() {
    let server = TestServer::start(Behaviour::Echo);
    let url = server.url("/");
    let err =
        run(move || Client::new().send_body(&Request::new("POST", url.as_str()), &b"abc"[..], Some(10)).unwrap_err());
    assert_eq!(err.kind(), ErrorKind::Io, "{err}");
    assert!(err.to_string().contains("ended after 3 of its 10 bytes"), "{err}");
}

#[test]
fn a_streamed_body_is_not_sent_again_to_a_redirect() {
    // The first two requests get a 302.
    let server = TestServer::start(Behaviour::Redirect { to: "/next".into(), times: 2 });
    let url = server.url("/start");
    let (streamed, bytes) = run(move || {
        let client = Client::builder().redirects(5).build().unwrap();
        let request = Request::new("PUT", url.as_str());
        let streamed = client.send_body(&request, &b"once"[..], Some(4)).unwrap().status();
        let bytes = client.send(&request.clone().body("again")).unwrap().into_response().unwrap();
        (streamed, bytes)
    });
    assert_eq!(streamed, 302, "a PUT keeps its method and body across a 302: a stream cannot");
    assert_eq!((bytes.status(), bytes.text().as_ref()), (200, "done"));
}

#[test]
fn max_body_bounds_what_is_kept_not_what_is_streamed() {
    let server = TestServer::start(Behaviour::fixed(200, &[], vec![b'x'; 100_000]));
    let url = server.url("/");
    let (streamed, kept) = run(move || {
        let client = Client::builder().max_body(1000).build().unwrap();
        let streamed = client.send(&get(&url)).unwrap().copy_to(&mut std::io::sink()).unwrap();
        (streamed, client.get(&url).unwrap_err())
    });
    assert_eq!(streamed, 100_000);
    assert_eq!(kept.kind(), ErrorKind::TooLarge, "{kept}");
}

#[test]
fn a_body_read_past_the_total_timeout_fails_as_a_total_timeout() {
    let server = TestServer::start(Behaviour::Drip {
        head: b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n".to_vec(),
        every: Duration::from_millis(50),
        total: Duration::from_secs(30),
    });
    let url = server.url("/");
    let (kind, again) = run(move || {
        let client = Client::builder().total_timeout(Duration::from_millis(500)).build().unwrap();
        let mut response = client.send(&get(&url)).unwrap();
        let err = response.read_to_end(&mut Vec::new()).unwrap_err();
        (inner(&err).kind(), response.read(&mut [0; 10]).map_err(|e| inner(&e).kind()))
    });
    assert_eq!(kind, ErrorKind::TotalTimeout);
    assert_eq!(again, Err(ErrorKind::TotalTimeout), "a failed stream keeps failing");
}

#[test]
fn a_stream_moves_to_another_thread_and_is_read_there() {
    let server = TestServer::start(Behaviour::Chunked { chunks: vec![b"from ".to_vec(), b"afar".to_vec()] });
    let client = Client::new();
    // Outside a runtime, then on a plain thread: a stream owns its connection and its slot.
    let response = client.send(&get(&server.url("/"))).unwrap();
    let body = std::thread::spawn(move || {
        let mut response = response;
        let mut body = String::new();
        response.read_to_string(&mut body).map(|_| body)
    })
    .join()
    .unwrap()
    .unwrap();
    assert_eq!(body, "from afar");
    client.get(&server.url("/")).unwrap();
    assert_eq!(server.connections(), 1, "the connection read to its end on the other thread was reused");
}
