//! What the client promises about a request's connection and body: `Connection: close` ends the
//! connection whatever the server does, `Expect: 100-continue` holds the body until the server
//! asks for it, and a total timeout bounds every wait of a request, in blocking mode too.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use neverblock::run;
use neverblock_http::{Client, ErrorKind, Request};

use crate::fixtures::{Behaviour, TestServer};

#[test]
fn a_request_that_sent_connection_close_is_the_last_on_its_connection() {
    // The fixture keeps every connection open, whatever the request says (RFC 9112 §9.6: a client
    // that sent `close` must not send further requests on that connection).
    let server = TestServer::start(Behaviour::fixed(200, &[], "ok"));
    let url = server.url("/");
    let statuses = run(move || {
        let client = Client::new();
        let request = Request::new("GET", url.as_str()).header("Connection", "close");
        [(); 3].map(|()| client.request(&request).unwrap().status())
    });
    assert_eq!(statuses, [200; 3]);
    assert_eq!((server.connections(), server.requests()), (3, 3), "one connection per request");
}

/// What the one-connection server below answers a head that asks for `100 Continue`.
#[derive(Clone, Copy)]
enum Reply {
    /// `100 Continue`, then the body is read and echoed in a 200.
    Continue,
    /// This final status at once, without reading a body; then it counts what else arrives.
    Final(u16),
    /// Nothing until the body has come, then the body echoed in a 200.
    Silent,
}

/// Serves one connection: reads a request head, listens 300 ms for body bytes the client sends
/// before any answer, replies as `reply` says, and reports what it saw.
fn expect_server(reply: Reply) -> (String, JoinHandle<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/upload", listener.local_addr().unwrap());
    let served = thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = Vec::new();
        let head_end = loop {
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            buf.extend(read_some(&mut conn).expect("the head arrives"));
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
        assert!(head.contains("expect: 100-continue"), "{head}");
        let mut body = buf.split_off(head_end);
        let early = if matches!(reply, Reply::Silent) {
            body.len()
        } else {
            conn.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
            body.extend(read_some(&mut conn).unwrap_or_default());
            conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            body.len()
        };
        match reply {
            Reply::Final(status) => {
                conn.write_all(format!("HTTP/1.1 {status} Nope\r\nContent-Length: 0\r\n\r\n").as_bytes()).unwrap();
                let mut after = body.len();
                while let Some(bytes) = read_some(&mut conn) {
                    after += bytes.len();
                }
                return format!("early {early}, after the answer {after} then the end");
            }
            Reply::Continue => conn.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").unwrap(),
            Reply::Silent => {}
        }
        while body.len() < 5 {
            body.extend(read_some(&mut conn).expect("the body arrives"));
        }
        conn.write_all(&[b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", &body[..]].concat()).unwrap();
        format!("early {early}")
    });
    (url, served)
}

/// One read: its bytes, or `None` at the end of the stream or on an error (a timeout included).
fn read_some(conn: &mut TcpStream) -> Option<Vec<u8>> {
    let mut chunk = [0; 4096];
    match conn.read(&mut chunk) {
        Ok(0) | Err(_) => None,
        Ok(n) => Some(chunk[..n].to_vec()),
    }
}

/// The request both body kinds are sent with.
fn upload(url: &str) -> Request {
    Request::new("PUT", url).header("Expect", "100-continue")
}

#[test]
fn a_body_waits_for_100_continue_in_memory_and_streamed() {
    for streamed in [false, true] {
        let (url, served) = expect_server(Reply::Continue);
        let (status, body) = run(move || {
            let client = Client::new();
            let response = if streamed {
                client.send_body(&upload(&url), &b"hello"[..], Some(5)).unwrap().into_response().unwrap()
            } else {
                client.request(&upload(&url).body("hello")).unwrap()
            };
            (response.status(), response.into_body())
        });
        assert_eq!((status, &body[..]), (200, &b"hello"[..]), "streamed: {streamed}");
        assert_eq!(served.join().unwrap(), "early 0", "no body byte before the 100 (streamed: {streamed})");
    }
}

#[test]
fn a_final_answer_before_100_continue_is_the_response_and_the_body_is_never_sent() {
    for streamed in [false, true] {
        let (url, served) = expect_server(Reply::Final(417));
        let status = run(move || {
            let client = Client::new();
            let response = if streamed {
                client.send_body(&upload(&url), &b"hello"[..], None).unwrap()
            } else {
                client.send(&upload(&url).body("hello")).unwrap()
            };
            let status = response.status();
            drop(response.into_response());
            drop(client);
            status
        });
        assert_eq!(status, 417, "streamed: {streamed}");
        let seen = served.join().unwrap();
        assert_eq!(seen, "early 0, after the answer 0 then the end", "streamed: {streamed}");
    }
}

#[test]
fn a_server_silent_about_100_continue_gets_the_body_after_the_wait() {
    let (url, served) = expect_server(Reply::Silent);
    let body = run(move || {
        let client = Client::builder().expect_continue_timeout(Duration::from_millis(100)).build().unwrap();
        client.request(&upload(&url).body("hello")).unwrap().into_body()
    });
    assert_eq!(&body[..], b"hello");
    assert_eq!(served.join().unwrap(), "early 0");
}

#[test]
fn outside_a_runtime_the_total_timeout_bounds_the_wait_for_a_connection_slot() {
    // One connection per host, held by a response whose body is not read: a second request can
    // only wait for a slot, which in blocking mode used to wait for ever.
    let server = TestServer::start(Behaviour::Head);
    let url = server.url("/");
    let (done, ended) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let client =
            Client::builder().max_connections_per_host(1).total_timeout(Duration::from_millis(300)).build().unwrap();
        let held = client.send(&Request::new("GET", url.as_str())).unwrap();
        let second = client.get(&url).map(|r| r.status());
        drop(held);
        let _ = done.send(second.map_err(|e| e.kind()));
    });
    let second = ended.recv_timeout(Duration::from_secs(30)).expect("the second request ended instead of hanging");
    assert_eq!(second, Err(ErrorKind::TotalTimeout));
}
