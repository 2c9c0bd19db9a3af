//! HTTP/2 end to end: curl by prior knowledge in cleartext and by ALPN over TLS, files and a
//! closure's answer byte for byte; h2's client in fibers (many streams on one connection, a body
//! echoed, a panicking handler's stream); HTTP/1.1 only with `http2(false)`; what the hook is told;
//! a graceful shutdown as a raw client sees it.

use std::io::{Read, Write};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use h2::RecvStream;
use neverblock::bridge::AsyncIo;
use neverblock::net::TcpStream;
use neverblock_http::server::{Exchange, Handler, Request, Response, ServerBuilder, StaticFiles, TlsConfig};

use crate::h2_frames::*;
use crate::serving::{Running, TempDir, PATIENCE};

/// A 1 MiB body that no short period repeats.
pub(crate) fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ (i >> 12) as u8).collect()
}

/// A site: `/small.txt` and `/big.bin` (1 MiB) from files, `/hello` from a closure, `/echo` the
/// request body back, `/panic` a handler that panics.
struct Site {
    server: Running,
    dir: TempDir,
}

fn handler(files: StaticFiles) -> impl Handler {
    move |request: &mut Request<'_>| match request.path() {
        "/hello" => {
            Response::new(200).header("Content-Type", "text/plain").body(format!("hello, {}\n", request.version()))
        }
        "/echo" => {
            let mut body = Vec::new();
            match request.body().read_to_end(&mut body) {
                Ok(_) => Response::new(200).body(body),
                Err(e) => Response::new(500).body(format!("read failed: {e}")),
            }
        }
        "/panic" => panic!("a handler that fails"),
        _ => files.handle(request),
    }
}

/// Serves the site in cleartext, or over TLS when `tls`, with `builder`'s settings.
fn site(builder: ServerBuilder, tls: bool) -> Site {
    let dir = TempDir::new("http2");
    dir.write("www/small.txt", "small over h2\n");
    dir.write("www/big.bin", pattern(1 << 20));
    let files = StaticFiles::new(dir.path().join("www")).unwrap();
    let builder = builder.workers(1);
    let server = if tls {
        Running::with_tls(builder, &self_signed(&dir), handler(files))
    } else {
        Running::with(builder, handler(files))
    };
    Site { server, dir }
}

/// A TLS configuration for `localhost` and 127.0.0.1, its certificate self-signed (files in `dir`).
pub(crate) fn self_signed(dir: &TempDir) -> TlsConfig {
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    params.subject_alt_names.push(rcgen::SanType::IpAddress([127, 0, 0, 1].into()));
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    let cert = dir.write("cert.pem", cert.pem());
    let key = dir.write("key.pem", key.serialize_pem());
    TlsConfig::from_pem_files(cert, key).unwrap()
}

/// curl's answer to `url` with `flags`: the body and the HTTP version it spoke.
pub(crate) fn curl(flags: &[&str], url: &str, out: &std::path::Path) -> (Vec<u8>, String) {
    let output = Command::new("curl")
        .args(["-sS", "--max-time", "20", "-o"])
        .arg(out)
        .args(["-w", "%{http_version} %{http_code}"])
        .args(flags)
        .arg(url)
        .output()
        .expect("curl runs");
    assert!(output.status.success(), "curl failed: {}", String::from_utf8_lossy(&output.stderr));
    (std::fs::read(out).unwrap_or_default(), String::from_utf8(output.stdout).unwrap())
}

/// Fetches the small file, the 1 MiB file and the closure's answer with curl, checking each byte
/// and the version spoken.
fn check_with_curl(flags: &[&str], scheme: &str, tls: bool, version: &str) {
    let site = site(ServerBuilder::default(), tls);
    let base = format!("{scheme}://{}", site.server.addr);
    let out = site.dir.path().join("curl.out");
    let (small, spoke) = curl(flags, &format!("{base}/small.txt"), &out);
    assert_eq!((small.as_slice(), spoke.as_str()), (&b"small over h2\n"[..], &*format!("{version} 200")));
    let (big, spoke) = curl(flags, &format!("{base}/big.bin"), &out);
    assert_eq!(spoke, format!("{version} 200"));
    assert!(big == pattern(1 << 20), "the 1 MiB file arrives byte for byte ({} bytes)", big.len());
    let (hello, _) = curl(flags, &format!("{base}/hello"), &out);
    let expected = if version == "2" { "hello, HTTP/2.0\n" } else { "hello, HTTP/1.1\n" };
    assert_eq!(String::from_utf8(hello).unwrap(), expected);
}

#[test]
fn curl_by_prior_knowledge_gets_files_and_a_closure_byte_exact() {
    check_with_curl(&["--http2-prior-knowledge"], "http", false, "2");
}

#[test]
fn curl_over_tls_negotiates_h2_and_gets_files_and_a_closure_byte_exact() {
    check_with_curl(&["-k", "--http2"], "https", true, "2");
}

/// Runs `exchange` with an h2 client connected to `site`, in fibers, within a bound.
fn with_client<T: Send + 'static>(site: &Site, exchange: impl FnOnce(SendRequest<Bytes>) -> T + Send + 'static) -> T {
    let addr = site.server.addr;
    let done = neverblock::run(move || {
        neverblock::timeout(Duration::from_secs(30), || {
            let io = AsyncIo::new(TcpStream::connect(addr).unwrap());
            let (client, connection) = neverblock::block_on(h2::client::handshake(io)).unwrap().unwrap();
            let driver = neverblock::spawn(move || neverblock::block_on(connection));
            let out = exchange(client);
            driver.cancel();
            out
        })
    });
    done.expect("the exchange finished in time")
}

/// Sends a request (with `body`, if any) and reads the whole answer: status and body.
fn fetch(client: &SendRequest<Bytes>, method: &str, path: &str, body: Option<Vec<u8>>) -> (u16, Vec<u8>) {
    let request = http::Request::builder().method(method).uri(format!("http://localhost{path}")).body(()).unwrap();
    neverblock::block_on(async {
        let mut client = client.clone().ready().await?;
        let (response, mut upload) = client.send_request(request, body.is_none())?;
        if let Some(body) = body {
            upload.send_data(Bytes::from(body), true)?;
        }
        let response = response.await?;
        let status = response.status().as_u16();
        Ok::<_, h2::Error>((status, read_all(response.into_body()).await?))
    })
    .unwrap()
    .unwrap()
}

/// Reads a whole body, handing the window back as it goes.
async fn read_all(mut stream: RecvStream) -> Result<Vec<u8>, h2::Error> {
    let mut all = Vec::new();
    while let Some(chunk) = stream.data().await {
        let chunk = chunk?;
        all.extend_from_slice(&chunk);
        stream.flow_control().release_capacity(chunk.len())?;
    }
    Ok(all)
}

#[test]
fn many_concurrent_streams_on_one_connection_are_each_answered() {
    let site = site(ServerBuilder::default(), false);
    let answers = with_client(&site, |client| {
        let fibers: Vec<_> = (0..100)
            .map(|i| {
                let client = client.clone();
                let path = if i % 10 == 0 { "/big.bin" } else { "/small.txt" };
                neverblock::spawn(move || (path, fetch(&client, "GET", path, None)))
            })
            .collect();
        fibers.into_iter().map(|fiber| fiber.join().unwrap()).collect::<Vec<_>>()
    });
    assert_eq!(answers.len(), 100);
    for (path, (status, body)) in answers {
        assert_eq!(status, 200, "{path}");
        match path {
            "/big.bin" => assert!(body == pattern(1 << 20), "{path}: {} bytes", body.len()),
            _ => assert_eq!(body, b"small over h2\n"),
        }
    }
}

#[test]
fn a_posted_body_of_hundreds_of_kib_is_echoed_back() {
    let site = site(ServerBuilder::default(), false);
    let sent = pattern(384 << 10);
    let copy = sent.clone();
    let (status, body) = with_client(&site, move |client| fetch(&client, "POST", "/echo", Some(copy)));
    assert_eq!(status, 200);
    assert!(body == sent, "the body comes back byte for byte ({} bytes)", body.len());
}

#[test]
fn a_panicking_handler_gets_its_stream_a_500_and_the_connection_goes_on() {
    let site = site(ServerBuilder::default(), false);
    let (panicked, after) = with_client(&site, |client| {
        let panicked = fetch(&client, "GET", "/panic", None);
        (panicked, fetch(&client, "GET", "/hello", None))
    });
    assert_eq!(panicked.0, 500);
    assert_eq!(after, (200, b"hello, HTTP/2.0\n".to_vec()));
}

#[test]
fn the_hook_is_told_http2_as_the_protocol() {
    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let builder = ServerBuilder::default().on_response(move |x: &Exchange<'_>| {
        let line = String::from_utf8_lossy(x.request_line().unwrap_or_default()).into_owned();
        tx.lock().unwrap().send(format!("{line} {:?} {} {}", x.version(), x.status(), x.body_bytes())).unwrap();
    });
    let site = site(builder, false);
    let out = site.dir.path().join("curl.out");
    curl(&["--http2-prior-knowledge"], &format!("http://{}/small.txt", site.server.addr), &out);
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), "GET /small.txt HTTP/2.0 Some(Http2) 200 14");
}

#[test]
fn without_http2_tls_offers_only_http1_and_a_preface_is_refused_as_http1() {
    let tls_site = site(ServerBuilder::default().http2(false), true);
    let out = tls_site.dir.path().join("curl.out");
    let (small, spoke) = curl(&["-k", "--http2"], &format!("https://{}/small.txt", tls_site.server.addr), &out);
    assert_eq!((small.as_slice(), spoke.as_str()), (&b"small over h2\n"[..], "1.1 200"));

    let site = site(ServerBuilder::default().http2(false), false);
    let mut stream = site.server.connect();
    stream.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 505 HTTP Version Not Supported\r\n"), "{answer}");
}

#[test]
fn a_graceful_shutdown_says_goaway_lets_the_stream_in_flight_finish_and_refuses_new_ones() {
    let (started, release) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let (on_start, released) = (started.clone(), release.clone());
    let server = Running::with(ServerBuilder::default().workers(1), move |request: &mut Request<'_>| {
        if request.path() == "/slow" {
            on_start.store(true, Ordering::SeqCst);
            while !released.load(Ordering::SeqCst) {
                neverblock::sleep(Duration::from_millis(5));
            }
        }
        Response::new(200).body("done\n")
    });
    let mut raw = RawH2::connect(server.addr, &[], PATIENCE);
    raw.stream.write_all(&request(1, "/slow")).unwrap();
    // Bounded: the handler starts at once, or the test fails after its patience.
    let waiting = std::time::Instant::now();
    while !started.load(Ordering::SeqCst) {
        assert!(waiting.elapsed() < PATIENCE, "the handler never started");
        std::thread::yield_now();
    }
    server.handle.shutdown();
    // h2's two GOAWAYs: the first (every stream id) and a PING, the second once the PING is
    // answered (the last stream the server took: 1).
    let first = next_of(&mut raw, GOAWAY);
    assert_eq!((first.code(), first.last_stream()), (NO_ERROR, 0x7fff_ffff));
    let probe = next_of(&mut raw, PING);
    raw.stream.write_all(&ping(ACK, probe.payload.try_into().unwrap())).unwrap();
    let last = next_of(&mut raw, GOAWAY);
    assert_eq!((last.code(), last.last_stream()), (NO_ERROR, 1));
    // A stream opened now is beyond the last one: never answered.
    raw.stream.write_all(&request(3, "/fast")).unwrap();
    release.store(true, Ordering::SeqCst);
    let frames = raw.until_closed();
    let answered: Vec<_> = frames.iter().filter(|f| matches!(f.kind, HEADERS | DATA)).map(|f| f.stream).collect();
    assert_eq!(answered, [1, 1], "{frames:?}");
    let body = frames.iter().find(|f| f.kind == DATA).unwrap();
    assert_eq!((body.payload.as_slice(), body.flags & END_STREAM), (&b"done\n"[..], END_STREAM));
    server.join().unwrap();
}

/// A stream whose request is still coming (HEADERS without END_STREAM) and a handler that
/// answers without reading it: the response comes whole but its stream stays open.
fn answered_early() -> (Running, RawH2) {
    let server =
        Running::with(ServerBuilder::default().workers(1), |_: &mut Request<'_>| Response::new(200).body("early\n"));
    let mut raw = RawH2::connect(server.addr, &[], PATIENCE);
    raw.stream.write_all(&frame(HEADERS, END_HEADERS, 1, &get("/upload"))).unwrap();
    next_of(&mut raw, HEADERS);
    let data = next_of(&mut raw, DATA);
    assert_eq!((data.payload.as_slice(), data.flags & END_STREAM), (&b"early\n"[..], 0), "the end is held");
    (server, raw)
}

#[test]
fn a_response_whose_request_is_still_coming_ends_once_the_request_has() {
    let (_server, mut raw) = answered_early();
    raw.stream.write_all(&frame(DATA, END_STREAM, 1, b"the rest")).unwrap();
    let end = next_of(&mut raw, DATA);
    assert_eq!((end.stream, end.payload.len(), end.flags & END_STREAM), (1, 0, END_STREAM));
}

#[test]
fn window_updates_past_the_limit_on_an_answered_stream_still_open_reset_it() {
    // RFC 9113 §6.9.1: a window past 2^31-1 is a FLOW_CONTROL_ERROR on the stream. The stream
    // is still open after its response, so the updates are checked, however late they come.
    let (_server, mut raw) = answered_early();
    let update = frame(WINDOW_UPDATE, 0, 1, &0x7fff_ffffu32.to_be_bytes());
    raw.stream.write_all(&[update.clone(), update].concat()).unwrap();
    let reset = next_of(&mut raw, RST_STREAM);
    assert_eq!((reset.stream, reset.code()), (1, FLOW_CONTROL_ERROR));
}

/// The next frame of `kind` the connection reads, those before it skipped.
fn next_of(raw: &mut RawH2, kind: u8) -> Frame {
    loop {
        let frame = raw.read_frame().unwrap_or_else(|e| panic!("no frame of type {kind}: {e}"));
        if frame.kind == kind {
            return frame;
        }
    }
}
