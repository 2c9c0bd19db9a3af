//! HTTP/2's defences, each against a raw client sending what a well-behaved one would not: rapid
//! reset (CVE-2023-44487), CONTINUATION floods (CVE-2023-45288), HPACK bombs, SETTINGS and PING
//! floods, and a client that never opens its window.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use neverblock_http::server::{Request, Response, ServerBuilder};

use crate::h2_frames::*;
use crate::serving::Running;

/// How long a raw client waits for any one read before the test fails.
const PATIENCE: Duration = Duration::from_secs(5);

/// A server whose `/slow` waits a minute before answering (the server's end cancels it) and
/// counts the handlers started; anything else is answered at once.
fn slow_site(builder: ServerBuilder) -> (Running, Arc<AtomicUsize>) {
    let started = Arc::new(AtomicUsize::new(0));
    let count = started.clone();
    let server = Running::with(builder.workers(1), move |request: &mut Request<'_>| {
        if request.path() == "/slow" {
            count.fetch_add(1, Ordering::Relaxed);
            neverblock::sleep(Duration::from_secs(60));
        }
        Response::new(200).body("ok\n")
    });
    (server, started)
}

/// Whether a new connection is answered 200 over HTTP/1.1.
fn still_serves(server: &Running) -> bool {
    server.send("GET /fast HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").starts_with("HTTP/1.1 200 ")
}

/// The HEADERS of streams `ids` on `/slow`, and their RST_STREAMs.
fn opened_and_reset(ids: &[u32]) -> (Vec<u8>, Vec<u8>) {
    let opened = ids.iter().flat_map(|&id| request(id, "/slow")).collect();
    let reset = ids.iter().flat_map(|&id| rst_stream(id, CANCEL)).collect();
    (opened, reset)
}

/// The ids of `n` client streams.
fn stream_ids(n: u32) -> Vec<u32> {
    (0..n).map(|i| 2 * i + 1).collect()
}

#[test]
fn a_burst_of_streams_opened_and_reset_ends_the_connection_with_enhance_your_calm() {
    let (server, _) = slow_site(ServerBuilder::default());
    let mut raw = RawH2::connect(server.addr, &[], PATIENCE);
    let (opened, reset) = opened_and_reset(&stream_ids(5000));
    let mut writer = raw.stream.try_clone().unwrap();
    // Written beside the reads: the server may stop reading before the end.
    let sending = std::thread::spawn(move || {
        let _ = writer.write_all(&opened).and_then(|()| writer.write_all(&reset));
    });
    let (ending, _) = raw.ending();
    sending.join().unwrap();
    // Which limit ends it depends on how the frames arrive: h2's on streams reset before they are
    // accepted (debug data `too_many_resets`) or the handlers' cap; each ends it the same way.
    assert!(matches!(ending, Ending::GoAway { code: ENHANCE_YOUR_CALM, .. }), "{ending:?}");
    assert!(still_serves(&server));
}

#[test]
fn streams_reset_faster_than_handlers_end_are_capped_and_the_connection_ended() {
    let (server, started) = slow_site(ServerBuilder::default());
    let mut raw = RawH2::connect(server.addr, &[], PATIENCE);
    // Four at a time, each step read by the server before the next is sent (a PING's answer
    // says so), so that h2 accepts the streams before they are reset and only the handlers' cap
    // (128 running, 512 waiting) can end it: h2's limit on streams reset before they are accepted
    // (20) is never near.
    let ending = stream_ids(5000)
        .chunks(4)
        .map(opened_and_reset)
        .try_for_each(|(opened, reset)| raw.sync(&opened).and_then(|()| raw.sync(&reset)))
        .expect_err("the server ends the connection");
    // No debug data: the server's GOAWAY, not h2's `too_many_resets`.
    assert_eq!(ending, Ending::GoAway { code: ENHANCE_YOUR_CALM, debug: String::new() });
    let started = started.load(Ordering::Relaxed);
    assert!(started <= 128, "{started} handlers started: at most 128 run, reset waiting streams never do");
    assert!(still_serves(&server));
}

/// Writes `frame` over and over without reading anything until the server closes the connection;
/// returns how many bytes it took. Panics if a write waits longer than [`PATIENCE`] (the server
/// never ended the connection) or the server takes 256 MiB (it reads on, buffering its answers).
fn flood(raw: &RawH2, frame: &[u8]) -> usize {
    let many = frame.repeat(64 * 1024 / frame.len());
    let mut stream = &raw.stream;
    stream.set_write_timeout(Some(PATIENCE)).unwrap();
    let mut sent = 0;
    while sent < 256 << 20 {
        match stream.write_all(&many) {
            Ok(()) => sent += many.len(),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                panic!("the connection still open {PATIENCE:?} into the flood, after {sent} bytes")
            }
            Err(_) => return sent,
        }
    }
    panic!("the server read a {sent}-byte flood without ending the connection")
}

/// A server that sends a response no write may wait for longer than 300 ms.
fn impatient() -> ServerBuilder {
    ServerBuilder::default().send_timeout(Duration::from_millis(300))
}

#[test]
fn a_ping_flood_whose_acks_are_never_read_ends_the_connection_after_the_send_timeout() {
    let (server, _) = slow_site(impatient());
    let raw = RawH2::connect(server.addr, &[], PATIENCE);
    // h2 reads no more frames while it cannot write their ACKs: the flood is held by the
    // sockets' buffers, then stalls until the send timeout ends the connection.
    flood(&raw, &ping(0, *b"flooding"));
    assert!(still_serves(&server));
}

#[test]
fn a_settings_flood_whose_acks_are_never_read_ends_the_connection_after_the_send_timeout() {
    let (server, _) = slow_site(impatient());
    let raw = RawH2::connect(server.addr, &[], PATIENCE);
    flood(&raw, &frame(SETTINGS, 0, 0, &[0, SETTINGS_INITIAL_WINDOW_SIZE as u8, 0, 0, 0xff, 0xff]));
    assert!(still_serves(&server));
}

/// A server whose heads may be 16 KiB at most.
fn small_heads() -> (Running, Arc<AtomicUsize>) {
    slow_site(ServerBuilder::default().max_head(16 * 1024))
}

/// A literal header field, its name new and not indexed (RFC 7541 §6.2.2).
fn literal(name: &str, value: &[u8]) -> Vec<u8> {
    let mut out = vec![0x00];
    out.extend(hpack_int(0, 7, name.len()));
    out.extend_from_slice(name.as_bytes());
    out.extend(hpack_int(0, 7, value.len()));
    out.extend_from_slice(value);
    out
}

/// Whether a response HEADERS frame says `:status 200` (the static table's index 8).
fn ok_headers(frame: &Frame) -> bool {
    frame.kind == HEADERS && frame.payload.first() == Some(&0x88)
}

/// Whether the connection answers a GET on stream `id` with 200.
fn answers(raw: &mut RawH2, id: u32) -> bool {
    raw.stream.write_all(&request(id, "/fast")).unwrap();
    loop {
        match raw.read_frame() {
            Ok(frame) if frame.stream == id && frame.kind == HEADERS => return ok_headers(&frame),
            Ok(frame) if frame.kind == GOAWAY => return false,
            Ok(_) => {}
            Err(e) => panic!("no answer on stream {id}: {e}"),
        }
    }
}

#[test]
fn a_continuation_flood_ends_the_connection_with_enhance_your_calm_within_a_few_frames() {
    let (server, started) = small_heads();
    let mut raw = RawH2::connect(server.addr, &[], PATIENCE);
    // HEADERS without END_HEADERS, then 100 CONTINUATIONs of 1 KiB fields, none ending the block:
    // with 16 KiB heads at most a few are taken (h2's count of them follows the header list size
    // the server sets; unset, 1280 would be).
    let mut flood = frame(HEADERS, END_STREAM, 1, &get("/slow"));
    for i in 0..100 {
        flood.extend(frame(CONTINUATION, 0, 1, &literal(&format!("x-flood-{i}"), &[b'a'; 1024])));
    }
    let mut writer = raw.stream.try_clone().unwrap();
    let sending = std::thread::spawn(move || {
        let _ = writer.write_all(&flood);
    });
    let (ending, _) = raw.ending();
    sending.join().unwrap();
    assert_eq!(ending, Ending::GoAway { code: ENHANCE_YOUR_CALM, debug: "too_many_continuations".to_owned() });
    assert_eq!(started.load(Ordering::Relaxed), 0, "no handler ran");
    assert!(still_serves(&server));
}

#[test]
fn a_header_list_over_the_limit_is_answered_431_and_the_connection_serves_on() {
    let (server, started) = small_heads();
    let mut raw = RawH2::connect(server.addr, &[], PATIENCE);
    // 20 KiB of fields in one HEADERS frame (h2's frames may be 16 KiB: two CONTINUATIONs more).
    let mut block = get("/slow");
    for i in 0..20 {
        block.extend(literal(&format!("x-big-{i}"), &[b'a'; 1000]));
    }
    let mut frames = frame(HEADERS, END_STREAM, 1, &block[..16_000]);
    frames.extend(frame(CONTINUATION, END_HEADERS, 1, &block[16_000..]));
    raw.stream.write_all(&frames).unwrap();
    let answer = loop {
        let frame = raw.read_frame().expect("an answer to stream 1");
        if frame.stream == 1 && frame.kind == HEADERS {
            break frame;
        }
    };
    // `:status 431`, not in the static table: a literal with indexing of name 8 (`:status`) and
    // the value "431" Huffman-coded (3 bytes: 011010 011001 00001, padded with ones).
    assert_eq!(answer.payload, [0x48, 0x83, 0x69, 0x90, 0xff], "{answer:?}");
    assert_eq!(started.load(Ordering::Relaxed), 0, "no handler ran");
    assert!(answers(&mut raw, 3), "the connection serves on");
}

#[test]
fn an_hpack_bomb_ends_the_connection_with_enhance_your_calm() {
    let (server, started) = small_heads();
    let mut raw = RawH2::connect(server.addr, &[], PATIENCE);
    // A 4000-byte field put in the dynamic table (RFC 7541 §6.2.1), then referred to 1000 times
    // by its one-byte index 62: a 5 KB block that decodes to 4 MB, over any multiple of 16 KiB
    // that h2 tolerates (unset, the limit would be 16 MiB, and the handler would run).
    let mut block = get("/slow");
    block.push(0x40);
    block.extend(hpack_int(0, 7, "x-bomb".len()));
    block.extend_from_slice(b"x-bomb");
    block.extend(hpack_int(0, 7, 4000));
    block.extend_from_slice(&[b'a'; 4000]);
    block.extend(std::iter::repeat_n(0x80 | 62, 1000));
    raw.stream.write_all(&frame(HEADERS, END_STREAM | END_HEADERS, 1, &block)).unwrap();
    let (ending, _) = raw.ending();
    assert_eq!(ending, Ending::GoAway { code: ENHANCE_YOUR_CALM, debug: "header_list_way_too_large".to_owned() });
    assert_eq!(started.load(Ordering::Relaxed), 0, "no handler ran");
    assert!(still_serves(&server));
}

#[test]
fn a_client_that_never_opens_its_window_loses_the_stream_then_the_connection() {
    let builder = impatient().keep_alive_timeout(Duration::from_millis(300)).workers(1);
    let server = Running::with(builder, |_: &mut Request<'_>| Response::new(200).body(vec![b'x'; 100_000]));
    // Windows of 0 bytes, never opened: the response's HEADERS go, none of its DATA can.
    let mut raw = RawH2::connect(server.addr, &[(SETTINGS_INITIAL_WINDOW_SIZE, 0)], PATIENCE);
    raw.stream.write_all(&request(1, "/big")).unwrap();
    let frames = raw.until_closed();
    let on_stream: Vec<_> = frames.iter().filter(|f| f.stream == 1).map(|f| f.kind).collect();
    assert_eq!(on_stream, [HEADERS, RST_STREAM], "{frames:?}");
    let reset = frames.iter().find(|f| f.kind == RST_STREAM).unwrap();
    assert_eq!(reset.code(), INTERNAL_ERROR);
    // Then, without streams for the keep-alive timeout, the server says GOAWAY and, the client
    // not closing, closes the connection itself.
    let go_away = frames.iter().find(|f| f.kind == GOAWAY).expect("a GOAWAY");
    assert_eq!(go_away.code(), NO_ERROR);
    assert!(!frames.iter().any(|f| f.kind == DATA), "{frames:?}");
}
