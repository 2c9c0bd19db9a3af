//! The server core, one behaviour per test, in raw bytes over loopback: keep-alive, pipelining,
//! request bodies, `Expect`, HEAD, `OPTIONS *`, `Date`, response bodies, the hook, panics.

use std::io::{BufReader, Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};

use neverblock_http::server::{Body, Exchange, Request, Response, Server};

use crate::serving::{count_responses, echo, read_all, read_reply, replies, Running, TempDir};

#[test]
fn keep_alive_serves_many_requests_on_one_connection() {
    let server = Running::start(echo());
    let stream = server.connect();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    for i in 0..5 {
        (&stream).write_all(format!("GET /{i} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).unwrap();
        let reply = read_reply(&mut reader, false);
        assert_eq!((reply.status, reply.text()), (200, format!("GET /{i} ")));
        assert_eq!(reply.header("connection"), None, "HTTP/1.1 keeps the connection by default");
    }
    let stats = server.handle.stats();
    assert_eq!((stats.accepted, stats.open, stats.requests), (1, 1, 5));
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let server = Running::start(echo());
    let requests: String = (0..20)
        .map(|i| format!("POST /{i} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\nbody{i}", 4 + i.to_string().len()))
        .collect();
    let answers = replies(server.send(requests));
    let bodies: Vec<String> = answers.iter().map(|r| r.text()).collect();
    let expected: Vec<String> = (0..20).map(|i| format!("POST /{i} body{i}")).collect();
    assert_eq!(bodies, expected);
}

#[test]
fn a_content_length_body_reaches_the_handler_whole() {
    let server = Running::start(echo());
    let body: String = (0..100_000).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
    let answer = server.send(format!("PUT /big HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}", body.len()));
    assert_eq!(replies(&answer)[0].text(), format!("PUT /big {body}"));
}

#[test]
fn a_chunked_body_reaches_the_handler_without_its_framing() {
    let server = Running::start(echo());
    let request = "POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
                   5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nX-Trailer: t\r\n\r\n\
                   GET /next HTTP/1.1\r\nHost: x\r\n\r\n";
    let answers = replies(server.send(request));
    let bodies: Vec<String> = answers.iter().map(|r| r.text()).collect();
    assert_eq!(bodies, ["POST /c hello world", "GET /next "]);
}

#[test]
fn continue_is_sent_when_the_handler_first_reads_the_body() {
    let server = Running::start(echo());
    let mut stream = server.connect();
    stream.write_all(b"PUT /up HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n").unwrap();
    let mut interim = [0u8; 25];
    stream.read_exact(&mut interim).unwrap();
    assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n", "the body is asked for before it is sent");
    stream.write_all(b"data").unwrap();
    let reply = read_reply(&mut BufReader::new(stream), false);
    assert_eq!((reply.status, reply.text()), (200, "PUT /up data".to_owned()));
}

#[test]
fn continue_is_not_sent_when_the_handler_ignores_the_body() {
    let server = Running::start(|_: &mut Request<'_>| Response::new(403).body("no"));
    let mut stream = server.connect();
    stream
        .write_all(b"PUT /up HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 1000000\r\n\r\n")
        .unwrap();
    let answer = read_all(&mut stream);
    assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
    assert!(!answer.contains("100 Continue"), "{answer}");
    assert!(answer.contains("\r\nConnection: close\r\n"), "the unsent body cannot be skipped: {answer}");
}

#[test]
fn head_gets_the_get_response_without_its_body() {
    let server = Running::start(|_: &mut Request<'_>| Response::new(200).header("X-Kind", "greeting").body("hello"));
    let mut stream = server.connect();
    stream.write_all(b"HEAD / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut reader = BufReader::new(stream);
    let head = read_reply(&mut reader, true);
    assert_eq!((head.status, head.header("content-length"), head.header("x-kind")), (200, Some("5"), Some("greeting")));
    let get = read_reply(&mut reader, false);
    assert_eq!(get.text(), "hello", "no body bytes followed the HEAD response");
}

#[test]
fn options_star_is_answered_by_the_server_itself() {
    let server = Running::start(|_: &mut Request<'_>| -> Response { panic!("the handler must not see OPTIONS *") });
    let answer = server.send("OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n");
    let reply = &replies(&answer)[0];
    assert_eq!((reply.status, reply.header("content-length")), (200, Some("0")));
    let refused = server.send("GET * HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(refused.starts_with("HTTP/1.1 400 "), "{refused}");
}

#[test]
fn every_response_carries_the_current_date() {
    let server = Running::start(echo());
    let reply = &replies(server.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))[0];
    let date = httpdate::parse_http_date(reply.header("date").expect("a Date field")).unwrap();
    let skew = std::time::SystemTime::now().duration_since(date).unwrap();
    assert!(skew.as_secs() < 60, "{skew:?}");
}

#[test]
fn the_fields_the_server_frames_with_are_its_own_and_a_handlers_date_is_kept() {
    let server = Running::start(|_: &mut Request<'_>| {
        Response::new(200)
            .header("date", "Sun, 06 Nov 1994 08:49:37 GMT")
            .header("Content-Length", "999")
            .header("Transfer-Encoding", "gzip")
            .header("Connection", "keep-alive, close")
            .header("X-Kept", "yes")
            .body("four")
    });
    let reply = &replies(server.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))[0];
    let named = |name: &str| reply.headers.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name)).count();
    assert_eq!(reply.header("date"), Some("Sun, 06 Nov 1994 08:49:37 GMT"), "{reply:?}");
    assert_eq!(named("date"), 1, "the handler's Date alone: {reply:?}");
    assert_eq!((reply.header("content-length"), named("content-length")), (Some("4"), 1), "{reply:?}");
    assert_eq!(named("transfer-encoding"), 0, "{reply:?}");
    assert_eq!(reply.header("connection"), Some("close"), "a close in the handler's list closes: {reply:?}");
    assert_eq!((reply.header("x-kept"), reply.text().as_str()), (Some("yes"), "four"));
}

#[test]
fn a_handler_panic_answers_500_and_closes_only_its_connection() {
    let server = Running::start(|request: &mut Request<'_>| match request.path() {
        "/boom" => panic!("boom"),
        "/any" => std::panic::panic_any(42_u32),
        _ => Response::new(200).body("fine"),
    });
    let bystander = server.connect();
    let mut bystander_reader = BufReader::new(bystander.try_clone().unwrap());
    (&bystander).write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(read_reply(&mut bystander_reader, false).text(), "fine");
    let mut stream = server.connect();
    stream.write_all(b"GET /boom HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let answer = read_all(&mut stream);
    assert!(answer.starts_with("HTTP/1.1 500 Internal Server Error\r\n"), "{answer}");
    assert_eq!(count_responses(&answer), 1, "the connection closed after the 500: {answer}");
    (&bystander).write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(read_reply(&mut bystander_reader, false).text(), "fine", "the other connection goes on");
    let answer = server.send("GET /any HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 500 "), "a payload that is not a message is a 500 too: {answer}");
}

#[test]
fn a_body_without_a_length_is_chunked_for_http_11_and_runs_to_the_close_for_http_10() {
    let server = Running::start(|_: &mut Request<'_>| Response::new(200).body(Body::reader(&b"streamed body"[..])));
    let answer = server.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(answer.contains("\r\nTransfer-Encoding: chunked\r\n"), "{answer}");
    assert!(answer.ends_with("\r\n\r\nd\r\nstreamed body\r\n0\r\n\r\n"), "{answer}");
    let old = server.send("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    assert!(!old.contains("chunked") && old.contains("\r\nConnection: close\r\n"), "{old}");
    assert!(old.ends_with("\r\n\r\nstreamed body"), "{old}");
}

#[test]
fn a_sized_stream_and_a_file_range_are_sent_as_given() {
    let dir = TempDir::new("file-range");
    let path = dir.write("f.bin", "0123456789");
    let server = Running::start(move |request: &mut Request<'_>| match request.path() {
        "/file" => Response::new(200).body(Body::file(std::fs::File::open(&path).unwrap(), 3, 4)),
        _ => Response::new(200).body(Body::sized_reader(std::io::repeat(b'z'), 7)),
    });
    let answers = replies(server.send("GET /file HTTP/1.1\r\nHost: x\r\n\r\nGET /stream HTTP/1.1\r\nHost: x\r\n\r\n"));
    assert_eq!((answers[0].text(), answers[0].header("content-length")), ("3456".to_owned(), Some("4")));
    assert_eq!((answers[1].text(), answers[1].header("content-length")), ("zzzzzzz".to_owned(), Some("7")));
}

#[test]
fn an_unread_short_body_is_skipped_and_a_long_one_closes_the_connection() {
    let server = Running::start(|_: &mut Request<'_>| Response::new(204));
    let short = format!(
        "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{}GET /b HTTP/1.1\r\nHost: x\r\n\r\n",
        "x".repeat(1000)
    );
    assert_eq!(server.send(short).matches("HTTP/1.1 204").count(), 2, "the body was read past, the connection kept");
    let mut stream = server.connect();
    stream.write_all(b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n").unwrap();
    let answer = read_all(&mut stream);
    assert!(answer.starts_with("HTTP/1.1 204") && answer.contains("\r\nConnection: close\r\n"), "{answer}");
}

#[test]
fn http_10_keeps_the_connection_only_when_asked() {
    let server = Running::start(echo());
    let answer =
        server.send("GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /b HTTP/1.0\r\n\r\nGET /c HTTP/1.0\r\n\r\n");
    assert_eq!(answer.matches("HTTP/1.1 200").count(), 2, "{answer}");
    assert!(
        answer.contains("\r\nConnection: keep-alive\r\n") && answer.contains("\r\nConnection: close\r\n"),
        "{answer}"
    );
}

#[test]
fn a_response_field_with_a_line_break_is_never_sent() {
    let server = Running::start(|_: &mut Request<'_>| Response::new(200).header("X-Evil", "a\r\nSet-Cookie: stolen=1"));
    let answer = server.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 500 "), "{answer}");
    assert!(!answer.contains("stolen"), "{answer}");
}

#[test]
fn the_handler_sees_the_request_and_the_hook_sees_the_exchange() {
    let (tx, rx) = mpsc::channel::<String>();
    let tx = Mutex::new(tx);
    let builder = Server::builder().workers(1).on_response(move |x: &Exchange<'_>| {
        let line = format!(
            "{} {} {} {:?} {} {} {} {}",
            x.method(),
            x.path(),
            x.query().unwrap_or("-"),
            x.version(),
            x.status(),
            x.body_bytes(),
            x.header("user-agent").unwrap_or("-"),
            x.peer_addr().ip()
        );
        tx.lock().unwrap().send(line).unwrap();
    });
    let server = Running::with(builder, |request: &mut Request<'_>| {
        let text = format!(
            "{} {} {:?} {}",
            request.path(),
            request.query().unwrap_or("-"),
            request.version(),
            request.peer_addr().ip()
        );
        Response::new(201).body(text)
    });
    let answer = server.send("GET /p?q=1 HTTP/1.1\r\nHost: x\r\nUser-Agent: t/1\r\n\r\nGET /bad\x01 HTTP/1.1\r\n\r\n");
    assert_eq!(replies(&answer)[0].text(), "/p q=1 Http11 127.0.0.1");
    assert_eq!(rx.recv_timeout(crate::serving::PATIENCE).unwrap(), "GET /p q=1 Some(Http11) 201 23 t/1 127.0.0.1");
    let refused = rx.recv_timeout(crate::serving::PATIENCE).unwrap();
    assert!(refused.starts_with("  - None 400 "), "a refused request is reported too: {refused}");
}

#[test]
fn a_hook_that_panics_loses_its_call_but_not_the_connection() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let builder = Server::builder().workers(1).on_response(move |x: &Exchange<'_>| {
        counted.fetch_add(1, SeqCst);
        assert_ne!(x.path(), "/boom", "the hook fails on this one");
    });
    let server = Running::with(builder, |request: &mut Request<'_>| Response::new(200).body(request.path().to_owned()));
    let answer = server.send("GET /boom HTTP/1.1\r\nHost: x\r\n\r\nGET /after HTTP/1.1\r\nHost: x\r\n\r\n");
    let texts: Vec<String> = replies(&answer).iter().map(|r| r.text()).collect();
    assert_eq!(texts, ["/boom", "/after"], "both answered on the one connection: {answer}");
    assert_eq!(calls.load(SeqCst), 2, "the hook ran for both");
}

#[test]
fn requests_run_concurrently_on_one_loop() {
    // Each handler parks its fiber until all of them have arrived: they can only all finish if
    // they run at once, on the single loop.
    let arrived = Arc::new(AtomicUsize::new(0));
    let server = Running::start(move |_: &mut Request<'_>| {
        arrived.fetch_add(1, SeqCst);
        while arrived.load(SeqCst) < 10 {
            neverblock::sleep(std::time::Duration::from_millis(1));
        }
        Response::new(200).body("together")
    });
    let clients: Vec<_> = (0..10)
        .map(|_| {
            let mut stream = server.connect();
            stream.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
            stream
        })
        .collect();
    for mut stream in clients {
        assert!(read_all(&mut stream).ends_with("together"));
    }
}

#[test]
fn a_pipelined_answer_goes_out_while_the_next_request_is_handled() {
    // The second request's handler waits until the client has read the first answer: that
    // answer must not wait for the handler after it.
    let first_read = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = first_read.clone();
    let server = Running::start(move |request: &mut Request<'_>| {
        if request.path() == "/wait" {
            let give_up = std::time::Instant::now() + 2 * crate::serving::PATIENCE;
            while !seen.load(SeqCst) && std::time::Instant::now() < give_up {
                neverblock::sleep(std::time::Duration::from_millis(1));
            }
            return Response::new(200).body(if seen.load(SeqCst) { "after the first" } else { "gave up" });
        }
        Response::new(200).body("first")
    });
    let stream = server.connect();
    (&stream).write_all(b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\nGET /wait HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut reader = BufReader::new(stream);
    assert_eq!(read_reply(&mut reader, false).text(), "first");
    first_read.store(true, SeqCst);
    assert_eq!(read_reply(&mut reader, false).text(), "after the first");
}

/// A reader that yields as many `0` bytes as it holds, then fails.
struct FailingAfter(usize);

impl Read for FailingAfter {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.0 == 0 {
            return Err(std::io::Error::other("the source went away"));
        }
        let n = self.0.min(buf.len());
        buf[..n].fill(b'0');
        self.0 -= n;
        Ok(n)
    }
}

#[test]
fn a_body_that_fails_before_its_first_byte_is_a_500_and_earlier_answers_still_go_out() {
    let server = Running::start(|request: &mut Request<'_>| match request.path() {
        "/fail" => Response::new(200).body(Body::sized_reader(FailingAfter(0), 10)),
        _ => Response::new(200).body("fine"),
    });
    // The first answer goes out before the pipelined second request, whose body then fails.
    let answer = server.send("GET /ok HTTP/1.1\r\nHost: x\r\n\r\nGET /fail HTTP/1.1\r\nHost: x\r\n\r\n");
    let answers = replies(&answer);
    let got: Vec<(u16, String)> = answers.iter().map(|r| (r.status, r.text())).collect();
    assert_eq!(got.len(), 2, "{answer:?}");
    assert_eq!(got[0], (200, "fine".to_owned()), "{answer:?}");
    assert_eq!(got[1].0, 500, "{answer:?}");
    assert_eq!(answers[1].header("connection"), Some("close"), "{answer:?}");
}

#[test]
fn a_body_that_fails_midway_ends_the_connection_unframed() {
    let server = Running::start(|request: &mut Request<'_>| match request.path() {
        "/half" => Response::new(200).body(Body::sized_reader(FailingAfter(5), 10)),
        _ => Response::new(200).body("fine"),
    });
    let answer = server.send("GET /half HTTP/1.1\r\nHost: x\r\n\r\nGET /ok HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n") && answer.contains("\r\nContent-Length: 10\r\n"), "{answer:?}");
    assert!(answer.ends_with("\r\n\r\n00000"), "five of the ten bytes, then the close: {answer:?}");
    assert_eq!(count_responses(&answer), 1, "nothing is answered after a body cut short: {answer:?}");
}

/// A reader that panics: the handler's own code, run while its response is sent.
struct PanickingReader;

impl Read for PanickingReader {
    fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
        panic!("the body's reader broke")
    }
}

#[test]
fn a_body_reader_that_panics_is_a_500_like_a_handler_that_panics() {
    let answers = Arc::new(Mutex::new(Vec::new()));
    let seen = answers.clone();
    let builder =
        Server::builder().workers(1).on_response(move |x: &Exchange<'_>| seen.lock().unwrap().push(x.status()));
    let server = Running::with(builder, |request: &mut Request<'_>| match request.path() {
        "/panic" => Response::new(200).body(Body::reader(PanickingReader)),
        _ => Response::new(200).body("fine"),
    });
    let answer = server.send("GET /ok HTTP/1.1\r\nHost: x\r\n\r\nGET /panic HTTP/1.1\r\nHost: x\r\n\r\n");
    let statuses: Vec<u16> = replies(&answer).iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 500], "{answer:?}");
    assert_eq!(*answers.lock().unwrap(), [200, 500], "the hook saw the panic's 500");
    assert_eq!(replies(server.send("GET /ok HTTP/1.1\r\nHost: x\r\n\r\n"))[0].text(), "fine", "the server goes on");
}

#[test]
fn empty_lines_before_a_request_are_skipped_however_many() {
    // RFC 9112 §2.2: a server skips empty lines before a request line. They are consumed as they
    // come, never kept and parsed again with every read, so more of them than a head may hold
    // are no head too long.
    let server = Running::start(echo());
    let answer = server.send(format!("{}GET /after HTTP/1.1\r\nHost: x\r\n\r\n", "\r\n".repeat(100_000)));
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n") && answer.ends_with("GET /after "), "{answer:?}");
}

#[test]
fn no_content_and_not_modified_carry_no_body_and_204_no_length() {
    let server = Running::start(|request: &mut Request<'_>| {
        let status = if request.path() == "/304" { 304 } else { 204 };
        let response = Response::new(status).header("Content-Length", "0").header("Transfer-Encoding", "chunked");
        match request.path() {
            "/empty" => response,
            _ => response.body("a body the status forbids"),
        }
    });
    for (request, status) in [
        ("GET /full HTTP/1.1", 204),
        ("HEAD /full HTTP/1.1", 204),
        ("GET /empty HTTP/1.1", 204),
        ("HEAD /empty HTTP/1.1", 204),
        ("GET /304 HTTP/1.1", 304),
        ("GET /empty HTTP/1.0", 204),
    ] {
        let answer = server.send(format!("{request}\r\nHost: x\r\n\r\n"));
        assert!(answer.starts_with(&format!("HTTP/1.1 {status} ")), "{request}: {answer:?}");
        assert!(answer.ends_with("\r\n\r\n"), "{request}: no body: {answer:?}");
        assert!(!answer.contains("Transfer-Encoding"), "{request}: {answer:?}");
        if status == 204 {
            assert!(!answer.contains("Content-Length"), "RFC 9110 §8.6: {request}: {answer:?}");
        }
    }
}

#[test]
fn the_server_alone_frames_responses_whatever_the_handler_sets() {
    let server = Running::start(|request: &mut Request<'_>| {
        let response = Response::new(200)
            .header("Content-Length", "99")
            .header("Transfer-Encoding", "chunked")
            .header("Connection", "keep-alive");
        match request.path() {
            "/close" => Response::new(200).header("Connection", "close").body("bye"),
            "/stream" => response.body(Body::reader(&b"streamed"[..])),
            _ => response.body("hi"),
        }
    });
    let answer = server.send("GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
    let answers = replies(&answer);
    assert_eq!((answers[0].text(), answers[1].text()), ("hi".to_owned(), "streamed".to_owned()), "{answer:?}");
    assert_eq!(answer.matches("Content-Length").count(), 1, "{answer:?}");
    assert_eq!(answer.matches("Transfer-Encoding").count(), 1, "{answer:?}");
    assert!(!answer.contains("Connection"), "{answer:?}");
    let answer = server.send("GET /close HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(count_responses(&answer), 1, "the handler's Connection: close ends the connection: {answer:?}");
    assert!(answer.contains("\r\nConnection: close\r\n") && answer.ends_with("bye"), "{answer:?}");
}
