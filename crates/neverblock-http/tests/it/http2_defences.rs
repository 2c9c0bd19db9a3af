//! HTTP/2's defences, each against a raw client sending what a well-behaved one would not: rapid
//! reset (CVE-2023-44487), CONTINUATION floods (CVE-2023-45288), HPACK bombs, SETTINGS and PING
//! floods, and a client that never opens its window.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use neverblock_http::server::{Request, Response, ServerBuilder};

use crate::h2_frames::*;
use crate::serving::Running;

/// How long a raw client waits for any one read before the test fails.
const PATIENCE: Duration = Duration::from_secs(5);

/// A server whose `/slow` sleeps a second before answering and counts the handlers started;
/// anything else is answered at once.
fn slow_site(builder: ServerBuilder) -> (Running, Arc<AtomicUsize>) {
    let started = Arc::new(AtomicUsize::new(0));
    let count = started.clone();
    let server = Running::with(builder.workers(1), move |request: &mut Request<'_>| {
        if request.path() == "/slow" {
            count.fetch_add(1, Ordering::Relaxed);
            neverblock::sleep(Duration::from_secs(1));
        }
        Response::new(200).body("ok\n")
    });
    (server, started)
}

/// Whether a new connection is answered 200 over HTTP/1.1.
fn still_serves(server: &Running) -> bool {
    server.send("GET /fast HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").starts_with("HTTP/1.1 200 ")
}

/// Opens `streams` streams on `/slow` and resets them, `batch` at a time: a batch's HEADERS,
/// `pause`, its RST_STREAMs, `pause`; then reads until the server ends the connection.
fn rapid_reset(server: &Running, streams: u32, batch: usize, pause: Duration) -> Ending {
    let mut raw = RawH2::connect(server.addr, &[], PATIENCE);
    let ids: Vec<u32> = (0..streams).map(|i| 2 * i + 1).collect();
    let mut writer = raw.stream.try_clone().unwrap();
    #[expect(clippy::disallowed_methods, reason = "the raw client runs on a plain std thread")]
    let sending = std::thread::spawn(move || {
        for chunk in ids.chunks(batch) {
            let opened: Vec<u8> = chunk.iter().flat_map(|&id| request(id, "/slow")).collect();
            let reset: Vec<u8> = chunk.iter().flat_map(|&id| rst_stream(id, CANCEL)).collect();
            for frames in [opened, reset] {
                if writer.write_all(&frames).is_err() {
                    return;
                }
                std::thread::sleep(pause);
            }
        }
    });
    let (ending, _) = raw.ending();
    sending.join().unwrap();
    ending
}

#[test]
fn a_burst_of_streams_opened_and_reset_ends_the_connection_with_enhance_your_calm() {
    let (server, _) = slow_site(ServerBuilder::default());
    assert_eq!(rapid_reset(&server, 5000, 5000, Duration::ZERO), Ending::GoAway(ENHANCE_YOUR_CALM));
    assert!(still_serves(&server));
}

#[test]
fn streams_reset_faster_than_handlers_end_are_capped_and_the_connection_ended() {
    let (server, started) = slow_site(ServerBuilder::default());
    // Four at a time, meant to be accepted before they are reset, so that the handlers' cap (128
    // running, 512 waiting) and not h2's limit on streams reset before they are accepted ends it.
    // FIXME: it is h2's limit ("too_many_resets") that ends it today: after the first batch the
    // connection fiber's `accept` returns no stream for ~40 ms while h2 reads the next batches,
    // so the cap is not reached here (the test passes with the cap removed). Find why that
    // accept stalls, then assert the GOAWAY's debug data is not h2's.
    let began = Instant::now();
    assert_eq!(rapid_reset(&server, 5000, 4, Duration::from_millis(2)), Ending::GoAway(ENHANCE_YOUR_CALM));
    assert!(began.elapsed() < Duration::from_secs(3), "ended after {:?}", began.elapsed());
    let started = started.load(Ordering::Relaxed);
    assert!(started <= 128, "{started} handlers started: at most 128 run, reset waiting streams never do");
    assert!(still_serves(&server));
}
