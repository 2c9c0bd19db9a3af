//! Slow and stalled clients: each costs a timer, and is dropped by its deadline or its rate
//! floor, however it spaces its bytes.

use std::io::{BufReader, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use neverblock_http::server::{Body, Exchange, Request, Response, Server};

use crate::serving::{echo, read_all, read_reply, Running, PATIENCE};

/// Writes `bytes` one at a time, `gap` apart, from a thread, until they run out or a write fails;
/// returns a flag that says whether all were sent, set when the thread ends.
fn drip(stream: &std::net::TcpStream, bytes: Vec<u8>, gap: Duration) -> (Arc<AtomicBool>, std::thread::JoinHandle<()>) {
    let mut stream = stream.try_clone().unwrap();
    let finished = Arc::new(AtomicBool::new(false));
    let flag = finished.clone();
    let thread = std::thread::spawn(move || {
        for byte in &bytes {
            if stream.write_all(std::slice::from_ref(byte)).is_err() {
                return;
            }
            #[allow(clippy::disallowed_methods)] // a client on a std thread of its own, no fiber here
            std::thread::sleep(gap);
        }
        flag.store(true, SeqCst);
    });
    (finished, thread)
}

#[test]
fn a_client_dripping_its_head_is_dropped_at_the_head_deadline() {
    let server = Running::with(Server::builder().workers(1).header_timeout(Duration::from_millis(300)), echo());
    let stream = server.connect();
    // 200 bytes 50 ms apart: each byte comes well within any per-read timeout; the head as a
    // whole would take 10 s.
    let head = format!("GET / HTTP/1.1\r\nHost: x\r\nX-Drip: {}\r\n\r\n", "d".repeat(160));
    let (finished, dripper) = drip(&stream, head.into_bytes(), Duration::from_millis(50));
    let answer = read_all(&mut stream.try_clone().unwrap());
    assert!(answer.starts_with("HTTP/1.1 408 Request Timeout\r\n"), "{answer:?}");
    assert!(!finished.load(SeqCst), "dropped while still dripping");
    let _ = stream.shutdown(std::net::Shutdown::Both);
    dripper.join().unwrap();
}

#[test]
fn an_idle_kept_alive_connection_is_closed() {
    let server = Running::with(Server::builder().workers(1).keep_alive_timeout(Duration::from_millis(200)), echo());
    let mut stream = server.connect();
    stream.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let answer = read_all(&mut stream);
    assert!(
        answer.starts_with("HTTP/1.1 200 OK\r\n") && answer.ends_with("GET / "),
        "answered, then closed: {answer:?}"
    );
}

#[test]
fn a_connection_idle_past_a_second_is_answered_again_and_closed_at_its_keep_alive_deadline() {
    // After a second of silence a kept-alive connection gives back its buffers and its fiber, then
    // waits on: its next request, longer than the first read buffer, is answered whole, and the
    // connection still closes at its keep-alive deadline, not before.
    let keep_alive = Duration::from_millis(2500);
    let server = Running::with(Server::builder().workers(1).keep_alive_timeout(keep_alive), echo());
    let mut writer = server.connect();
    let mut reader = BufReader::new(writer.try_clone().unwrap());
    writer.write_all(b"GET /first HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(read_reply(&mut reader, false).text(), "GET /first ");
    #[allow(clippy::disallowed_methods)] // the client, on the test's own thread
    std::thread::sleep(Duration::from_millis(1400));
    let body = "b".repeat(10_000);
    let request = format!("POST /second HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}", body.len());
    writer.write_all(request.as_bytes()).unwrap();
    assert_eq!(read_reply(&mut reader, false).text(), format!("POST /second {body}"));
    let answered = Instant::now();
    let mut rest = Vec::new();
    reader.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "nothing more: {rest:?}");
    let closed_after = answered.elapsed();
    assert!(closed_after >= keep_alive - Duration::from_millis(300), "closed {closed_after:?} after the answer");
}

#[test]
fn quiet_connections_hold_no_fiber_and_are_answered_when_they_speak_again() {
    // Two hundred kept-alive connections silent past the release second: their tasks end, and
    // once their workers have sat unused a whole second the loop lets go of all but 64, so it
    // holds fewer stacks than connections. Each is answered again when it speaks, by a task its
    // readiness started.
    let handler = |request: &mut Request<'_>| match request.target() {
        "/stacks" => Response::new(200).body(neverblock::fiber::stack_stats().live.to_string()),
        target => Response::new(200).body(format!("again {target}")),
    };
    let server = Running::with(Server::builder().workers(1).keep_alive_timeout(Duration::from_secs(30)), handler);
    let mut quiet: Vec<_> = (0..200)
        .map(|i| {
            let writer = server.connect();
            let mut reader = BufReader::new(writer.try_clone().unwrap());
            (&writer).write_all(format!("GET /{i} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).unwrap();
            assert_eq!(read_reply(&mut reader, false).text(), format!("again /{i}"));
            (writer, reader)
        })
        .collect();
    #[allow(clippy::disallowed_methods)] // the client, on the test's own thread
    std::thread::sleep(Duration::from_millis(3500));
    let mut asker = server.connect();
    let mut answers = BufReader::new(asker.try_clone().unwrap());
    asker.write_all(b"GET /stacks HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let stacks: usize = read_reply(&mut answers, false).text().parse().unwrap();
    assert!(stacks < 100, "{stacks} stacks held for 200 quiet connections");
    for (i, (writer, reader)) in quiet.iter_mut().enumerate().rev() {
        writer.write_all(format!("GET /{i}/later HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).unwrap();
        assert_eq!(read_reply(reader, false).text(), format!("again /{i}/later"));
    }
}

#[test]
fn a_connection_that_never_sends_is_closed_without_an_answer() {
    let server = Running::with(Server::builder().workers(1).header_timeout(Duration::from_millis(200)), echo());
    assert_eq!(read_all(&mut server.connect()), "");
}

#[test]
fn a_body_dripping_below_the_minimum_rate_is_dropped() {
    let builder = Server::builder().workers(1).body_timeout(Duration::from_millis(300)).min_data_rate(1000);
    let server = Running::with(builder, echo());
    let mut stream = server.connect();
    stream.write_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n").unwrap();
    // A byte every 50 ms, well within the 300 ms per read, is 20 bytes a second: below 1000.
    let (finished, dripper) = drip(&stream, vec![b'b'; 100], Duration::from_millis(50));
    let answer = read_all(&mut stream);
    assert!(answer.starts_with("HTTP/1.1 408 Request Timeout\r\n"), "{answer:?}");
    assert!(!finished.load(SeqCst), "dropped while still dripping");
    let _ = stream.shutdown(std::net::Shutdown::Both);
    dripper.join().unwrap();
}

#[test]
fn a_stalled_body_is_408() {
    let server = Running::with(Server::builder().workers(1).body_timeout(Duration::from_millis(200)), echo());
    let mut stream = server.connect();
    stream.write_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nab").unwrap();
    let answer = read_all(&mut stream);
    assert!(answer.starts_with("HTTP/1.1 408 Request Timeout\r\n"), "{answer:?}");
}

#[test]
fn a_client_that_stops_reading_is_dropped_at_the_send_timeout() {
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let builder = Server::builder()
        .workers(1)
        .send_timeout(Duration::from_millis(300))
        .on_response(move |x: &Exchange<'_>| tx.lock().unwrap().send((x.completed(), x.body_bytes())).unwrap());
    let len = 64 << 20;
    let server = Running::with(builder, move |_: &mut Request<'_>| {
        Response::new(200).body(Body::sized_reader(std::io::repeat(b'x'), len))
    });
    let mut stream = server.connect();
    stream.write_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let (completed, sent) = rx.recv_timeout(PATIENCE).expect("the server gave up on the client");
    assert!(!completed && sent < len, "{sent} of {len} bytes");
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    assert!((rest.len() as u64) < len, "the connection was closed part way");
}

#[test]
fn slowloris_connections_do_not_starve_a_one_loop_server() {
    let server = Running::start(echo());
    let stalled: Vec<_> = (0..200)
        .map(|_| {
            let mut stream = server.connect();
            stream.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ").unwrap();
            stream
        })
        .collect();
    let answer = server.send("GET /through HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(answer.ends_with("GET /through "), "{answer:?}");
    assert_eq!(server.handle.stats().accepted, 201);
    drop(stalled);
}
