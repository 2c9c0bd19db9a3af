//! HTTPS end to end: static files over TLS through the library's own client, a raw rustls client
//! and curl; SNI choosing among certificates; certificates read again with a connection kept
//! across it; every kind of bad input on a TLS port; what the hooks and the log are told.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use neverblock_http::server::{Exchange, Handshake, HandshakeOutcome, LogFormat, Server, StaticFiles, TlsConfig};
use neverblock_http::{Client, ErrorKind, Request};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

use crate::serving::{read_reply, replies, Running, TempDir, PATIENCE};

/// A certificate and its key, written as PEM files.
struct Pair {
    cert: PathBuf,
    key: PathBuf,
    der: CertificateDer<'static>,
}

/// A self-signed certificate (ECDSA P-256) for `names` (expired in 2021 when `expired`), written
/// under `dir` as `<file>.pem` and `<file>.key`.
fn pair(dir: &TempDir, file: &str, names: &[&str], expired: bool) -> Pair {
    let mut params = rcgen::CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>()).unwrap();
    if expired {
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    }
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    let cert_path = dir.write(&format!("{file}.pem"), cert.pem());
    let key_path = dir.write(&format!("{file}.key"), key.serialize_pem());
    Pair { cert: cert_path, key: key_path, der: cert.der().clone() }
}

/// A site with a small and a 1 MiB file, served over TLS with one certificate for `localhost`.
struct Site {
    server: Running,
    pair: Pair,
    tls: TlsConfig,
    _dir: TempDir,
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 13 % 251) as u8).collect()
}

fn site(builder: neverblock_http::server::ServerBuilder) -> Site {
    let dir = TempDir::new("https");
    dir.write("www/hello.txt", "hello over tls\n");
    dir.write("www/big.bin", pattern(1 << 20));
    let pair = pair(&dir, "localhost", &["localhost", "127.0.0.1"], false);
    let tls = TlsConfig::from_pem_files(&pair.cert, &pair.key).unwrap();
    let files = StaticFiles::new(dir.path().join("www")).unwrap();
    Site { server: Running::with_tls(builder.workers(1), &tls, files), pair, tls, _dir: dir }
}

/// A rustls client connection to `site` asking for `name`, trusting `roots`.
fn connect(
    addr: std::net::SocketAddr,
    name: &str,
    roots: &[&CertificateDer<'static>],
) -> StreamOwned<ClientConnection, TcpStream> {
    let mut store = RootCertStore::empty();
    for root in roots {
        store.add((*root).clone()).unwrap();
    }
    let config = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(store)
        .with_no_client_auth();
    let conn = ClientConnection::new(Arc::new(config), ServerName::try_from(name.to_owned()).unwrap()).unwrap();
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(PATIENCE)).unwrap();
    StreamOwned::new(conn, tcp)
}

/// The certificate the server presented on `stream`, after a request made the handshake happen.
fn presented(stream: &mut StreamOwned<ClientConnection, TcpStream>) -> CertificateDer<'static> {
    stream.write_all(b"HEAD /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let reply = read_reply(&mut std::io::BufReader::new(&mut *stream), true);
    assert_eq!(reply.status, 200);
    stream.conn.peer_certificates().unwrap()[0].clone().into_owned()
}

#[test]
fn https_get_head_range_and_conditionals_through_the_librarys_client() {
    let site = site(Server::builder());
    let base = format!("https://localhost:{}", site.server.addr.port());
    let ca = site.pair.der.to_vec();
    let (hello, head, range, not_modified, big) = neverblock::run(move || {
        let client = Client::builder().add_root_certificate(ca).build().unwrap();
        let hello = client.get(&format!("{base}/hello.txt")).unwrap();
        let etag = hello.header("etag").unwrap().to_owned();
        let head = client.head(&format!("{base}/hello.txt")).unwrap();
        let range =
            client.request(&Request::new("GET", format!("{base}/hello.txt")).header("Range", "bytes=6-9")).unwrap();
        let conditional = Request::new("GET", format!("{base}/hello.txt")).header("If-None-Match", etag);
        let not_modified = client.request(&conditional).unwrap().status();
        let big = client.get(&format!("{base}/big.bin")).unwrap().into_body();
        (
            hello.text().into_owned(),
            head.header("content-length").map(str::to_owned),
            range.text().into_owned(),
            not_modified,
            big,
        )
    });
    assert_eq!(hello, "hello over tls\n");
    assert_eq!(head.as_deref(), Some("15"));
    assert_eq!(range, "over");
    assert_eq!(not_modified, 304);
    assert!(big == pattern(1 << 20), "the 1 MiB file arrived whole over TLS ({} bytes)", big.len());
}

#[test]
fn https_through_curl() {
    if std::process::Command::new("curl").arg("--version").output().is_err() {
        eprintln!("note: curl is not installed; skipped");
        return;
    }
    let site = site(Server::builder());
    let port = site.server.addr.port();
    let curl = |args: &[&str]| {
        let out = std::process::Command::new("curl")
            .args(["-sS", "--max-time", "10", "--resolve", &format!("localhost:{port}:127.0.0.1"), "--cacert"])
            .arg(&site.pair.cert)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "curl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let url = format!("https://localhost:{port}/hello.txt");
    assert_eq!(curl(&[&url]), "hello over tls\n");
    assert_eq!(curl(&["-r", "0-4", &url]), "hello");
    // ALPN offers h2 first, so curl speaks HTTP/2; HEAD still says the file's length.
    let head = curl(&["-I", &url]);
    assert!(head.starts_with("HTTP/2 200"), "{head}");
    assert!(head.to_ascii_lowercase().contains("content-length: 15"), "{head}");
}

#[test]
fn sni_picks_the_certificate_naming_the_host_and_the_first_answers_the_rest() {
    let dir = TempDir::new("sni");
    dir.write("www/hello.txt", "hi");
    let first = pair(&dir, "first", &["first.test"], false);
    let second = pair(&dir, "second", &["*.second.test"], false);
    let tls =
        TlsConfig::builder().cert_pair(&first.cert, &first.key).cert_pair(&second.cert, &second.key).build().unwrap();
    let server =
        Running::with_tls(Server::builder().workers(1), &tls, StaticFiles::new(dir.path().join("www")).unwrap());
    let roots = [&first.der, &second.der];
    assert_eq!(presented(&mut connect(server.addr, "www.second.test", &roots)), second.der);
    assert_eq!(presented(&mut connect(server.addr, "first.test", &roots)), first.der);
    // A name neither is for gets the first, which the client then refuses for that name.
    let mut unknown = connect(server.addr, "unknown.test", &roots);
    let refused = unknown.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").and_then(|()| unknown.flush()).unwrap_err();
    assert!(refused.to_string().contains("first.test"), "the first certificate was presented: {refused}");
}

#[test]
fn reloaded_certificates_serve_new_handshakes_while_a_kept_alive_connection_goes_on() {
    let site = site(Server::builder());
    let mut kept = connect(site.server.addr, "localhost", &[&site.pair.der]);
    assert_eq!(presented(&mut kept), site.pair.der);
    // New files, same paths.
    let dir = TempDir::new("renewed");
    let renewed = pair(&dir, "renewed", &["localhost"], false);
    std::fs::copy(&renewed.cert, &site.pair.cert).unwrap();
    std::fs::copy(&renewed.key, &site.pair.key).unwrap();
    assert!(site.tls.reload().is_empty(), "the renewed pair loads");
    assert_eq!(presented(&mut connect(site.server.addr, "localhost", &[&renewed.der])), renewed.der);
    assert_eq!(presented(&mut kept), site.pair.der, "the connection kept alive goes on with its session");
    // A pair that no longer loads keeps the one it had.
    std::fs::write(&site.pair.key, "not a key").unwrap();
    let failures = site.tls.reload();
    assert_eq!(failures.len(), 1);
    assert!(failures[0].to_string().contains(&site.pair.key.display().to_string()), "{}", failures[0]);
    assert_eq!(presented(&mut connect(site.server.addr, "localhost", &[&renewed.der])), renewed.der);
}

#[test]
fn a_kept_alive_tls_connection_idle_past_a_second_goes_on_with_its_session() {
    // After a second of silence the connection gives back its buffers and the deep pages of its
    // fiber's stack; its TLS session is kept, and the next request is answered on it.
    let site = site(Server::builder());
    let mut kept = connect(site.server.addr, "localhost", &[&site.pair.der]);
    assert_eq!(presented(&mut kept), site.pair.der);
    #[allow(clippy::disallowed_methods)] // the client, on the test's own thread
    std::thread::sleep(std::time::Duration::from_millis(1400));
    kept.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let reply = read_reply(&mut std::io::BufReader::new(&mut kept), false);
    assert_eq!((reply.status, reply.text()), (200, "hello over tls\n".to_owned()));
}

#[test]
fn plain_http_to_a_tls_port_gets_a_plain_400_saying_so() {
    let site = site(Server::builder());
    let answer = site.server.send("GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    let reply = replies(&answer).into_iter().next().expect("a cleartext answer");
    assert_eq!(reply.status, 400);
    assert!(reply.text().contains("plain HTTP was sent to a port that wants TLS"), "{answer}");
}

/// Sends `bytes` to `addr` and returns how long the server took to close the connection.
fn closed_after(addr: std::net::SocketAddr, bytes: &[u8]) -> Duration {
    let started = Instant::now();
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    stream.write_all(bytes).unwrap();
    let mut sink = Vec::new();
    match stream.read_to_end(&mut sink) {
        Ok(_) => {}
        Err(e) => assert!(
            e.kind() != std::io::ErrorKind::WouldBlock && e.kind() != std::io::ErrorKind::TimedOut,
            "still open after {PATIENCE:?}"
        ),
    }
    started.elapsed()
}

#[test]
fn garbage_a_truncated_hello_and_a_silent_client_are_closed_counted_and_never_stick() {
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let seen = outcomes.clone();
    let dir = TempDir::new("bad-input");
    dir.write("www/hello.txt", "hi");
    let pair = pair(&dir, "localhost", &["localhost"], false);
    let tls = TlsConfig::builder()
        .cert_pair(&pair.cert, &pair.key)
        .handshake_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let builder =
        Server::builder().workers(1).on_handshake(move |h: &Handshake<'_>| seen.lock().unwrap().push(h.outcome()));
    let server = Running::with_tls(builder, &tls, StaticFiles::new(dir.path().join("www")).unwrap());
    // The start of a real ClientHello, cut short.
    let mut hello = Vec::new();
    let client = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(RootCertStore::empty())
        .with_no_client_auth();
    let mut conn = ClientConnection::new(Arc::new(client), ServerName::try_from("localhost").unwrap()).unwrap();
    conn.write_tls(&mut hello).unwrap();
    closed_after(server.addr, b"\x00\x01\x02\x03 not tls at all");
    let truncated = closed_after(server.addr, &hello[..hello.len() / 2]);
    let silent = closed_after(server.addr, b"");
    assert!(
        truncated >= Duration::from_millis(250) && silent >= Duration::from_millis(250),
        "{truncated:?} {silent:?}"
    );
    server.send("GET / HTTP/1.1\r\n\r\n");
    let mut good = connect(server.addr, "localhost", &[&pair.der]);
    presented(&mut good);
    drop(good);
    let deadline = Instant::now() + PATIENCE;
    while outcomes.lock().unwrap().len() < 5 && Instant::now() < deadline {
        neverblock::sleep(Duration::from_millis(10));
    }
    let mut outcomes = outcomes.lock().unwrap().clone();
    outcomes.sort_by_key(|o| format!("{o:?}"));
    assert_eq!(
        outcomes,
        [
            HandshakeOutcome::Completed,
            HandshakeOutcome::Failed,
            HandshakeOutcome::PlainHttp,
            HandshakeOutcome::TimedOut,
            HandshakeOutcome::TimedOut
        ]
    );
}

#[test]
fn the_access_log_names_the_tls_protocol_and_cipher_as_mod_ssl_does() {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let logged = lines.clone();
    let format: LogFormat = "%>s %{SSL_PROTOCOL}x %{SSL_CIPHER}x".parse().unwrap();
    let builder = Server::builder().on_response(move |x: &Exchange<'_>| {
        let mut line = Vec::new();
        format.write_line(x, "-", &mut line);
        logged.lock().unwrap().push(String::from_utf8(line).unwrap());
    });
    let site = site(builder);
    presented(&mut connect(site.server.addr, "localhost", &[&site.pair.der]));
    // The hook runs once the response is written: the client may have it first.
    let deadline = Instant::now() + PATIENCE;
    while lines.lock().unwrap().is_empty() && Instant::now() < deadline {
        #[expect(clippy::disallowed_methods, reason = "a plain test thread polls what the hook logged")]
        std::thread::sleep(Duration::from_millis(5));
    }
    let lines = lines.lock().unwrap().clone();
    assert_eq!(lines, ["200 TLSv1.3 TLS_AES_256_GCM_SHA384\n"], "the suite rustls puts first on both sides");
}

#[test]
fn bad_certificates_are_clear_errors_naming_the_file_and_an_expired_one_a_warning() {
    crate::logs::capture();
    let dir = TempDir::new("bad-certs");
    let good = pair(&dir, "good", &["localhost"], false);
    let other = pair(&dir, "other", &["localhost"], false);
    let nameless = pair(&dir, "nameless", &[], false);
    let expired = pair(&dir, "expired", &["expired.test"], true);
    let error = |cert: &PathBuf, key: &PathBuf| TlsConfig::from_pem_files(cert, key).unwrap_err();
    let missing = error(&dir.path().join("missing.pem"), &good.key);
    assert!(missing.to_string().contains("missing.pem"), "{missing}");
    assert_eq!(missing.kind(), ErrorKind::Tls);
    let mismatched = error(&good.cert, &other.key);
    assert!(
        mismatched.to_string().contains("other.key") && mismatched.to_string().contains("good.pem"),
        "{mismatched}"
    );
    let no_names = error(&nameless.cert, &nameless.key);
    assert!(no_names.to_string().contains("names no host"), "{no_names}");
    assert!(TlsConfig::from_pem_files(&expired.cert, &expired.key).is_ok(), "an expired certificate still loads");
    let warnings = crate::logs::lines_containing("expired.pem");
    assert!(warnings.iter().any(|w| w.contains("expired on Fri, 01 Jan 2021")), "{warnings:?}");
}
