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
    #[expect(clippy::disallowed_methods, reason = "the raw client runs on a plain std thread")]
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
