//! `neverblock serve` over TLS, end to end against the command: certificates read again on SIGHUP
//! while a connection stays alive across it, cleartext redirected to https, and handshakes counted
//! on the metrics page and named in the access log.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

use crate::serve_options::{dir_arg, site, wait_until, Serving};

/// A TLS connection to the server, as a client sees it.
pub(crate) type TlsStream = StreamOwned<ClientConnection, TcpStream>;

/// Writes a fresh self-signed certificate for `localhost` and its key to `cert` and `key`, and
/// returns the certificate.
pub(crate) fn write_pair(cert: &Path, key: &Path) -> CertificateDer<'static> {
    let params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    let key_pair = rcgen::KeyPair::generate().unwrap();
    let certificate = params.self_signed(&key_pair).unwrap();
    std::fs::write(cert, certificate.pem()).unwrap();
    std::fs::write(key, key_pair.serialize_pem()).unwrap();
    certificate.der().clone()
}

/// A client configuration trusting `roots`; its connections resume sessions from one another.
pub(crate) fn client(roots: &[&CertificateDer<'static>]) -> Arc<ClientConfig> {
    let mut store = RootCertStore::empty();
    for root in roots {
        store.add((*root).clone()).unwrap();
    }
    let config = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(store)
        .with_no_client_auth();
    Arc::new(config)
}

pub(crate) fn connect(addr: &str, config: &Arc<ClientConfig>) -> TlsStream {
    let conn = ClientConnection::new(config.clone(), ServerName::try_from("localhost").unwrap()).unwrap();
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    StreamOwned::new(conn, tcp)
}

/// Sends `GET path` on `stream`, kept alive, and returns the status and the body.
pub(crate) fn get(stream: &mut TlsStream, path: &str) -> (u16, String) {
    write!(stream, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    reader.read_line(&mut status_line).unwrap();
    let status = status_line.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("a status line");
    let mut length = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap();
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    (status, String::from_utf8(body).unwrap())
}

/// The certificate the server presented on `stream`.
fn presented(stream: &TlsStream) -> CertificateDer<'static> {
    stream.conn.peer_certificates().expect("a finished handshake")[0].clone().into_owned()
}

/// A site served over TLS (and in cleartext) by `neverblock serve ARGS…`, with its certificate.
struct TlsSite {
    server: Serving,
    cert: PathBuf,
    key: PathBuf,
    first: CertificateDer<'static>,
    _dir: crate::Dir,
}

fn tls_site(name: &str, args: &[&str]) -> TlsSite {
    let dir = site(name);
    let (cert, key) = (dir.0.join("cert.pem"), dir.0.join("key.pem"));
    let first = write_pair(&cert, &key);
    let mut all = vec![dir_arg(&dir), "--tls-listen", "127.0.0.1:0"];
    all.extend(["--tls-cert", cert.to_str().unwrap(), "--tls-key", key.to_str().unwrap()]);
    all.extend(args);
    let server = Serving::start(&all, &[("RUST_LOG", "info")]);
    assert!(server.tls_addr.is_some(), "the startup line names the https URL too");
    TlsSite { server, cert, key, first, _dir: dir }
}

#[test]
fn serve_reads_its_certificates_again_on_sighup_while_a_kept_alive_connection_goes_on() {
    let site = tls_site("serve-tls-reload", &[]);
    let tls_addr = site.server.tls_addr.clone().unwrap();
    let renewed_dir = crate::Dir::new("serve-tls-renewed");
    let renewed = write_pair(&renewed_dir.0.join("cert.pem"), &renewed_dir.0.join("key.pem"));
    let both = client(&[&site.first, &renewed]);
    let mut kept = connect(&tls_addr, &both);
    assert_eq!(get(&mut kept, "/hello.txt"), (200, "hello, file\n".to_owned()));
    assert_eq!(presented(&kept), site.first);

    std::fs::copy(renewed_dir.0.join("cert.pem"), &site.cert).unwrap();
    std::fs::copy(renewed_dir.0.join("key.pem"), &site.key).unwrap();
    site.server.signal("HUP");
    wait_until("a new handshake with the renewed certificate", || {
        // A new client each time: one that resumed its earlier session would see that session's
        // certificate.
        let mut stream = connect(&tls_addr, &client(&[&site.first, &renewed]));
        get(&mut stream, "/hello.txt").0 == 200 && presented(&stream) == renewed
    });
    assert_eq!(get(&mut kept, "/hello.txt"), (200, "hello, file\n".to_owned()), "the kept connection goes on");
    assert_eq!(presented(&kept), site.first);

    std::fs::write(&site.key, "not a key").unwrap();
    site.server.signal("HUP");
    wait_until("the failed reload logged", || site.server.stderr().contains("the old certificate stays"));
    assert!(site.server.stderr().contains(site.cert.to_str().unwrap()), "{}", site.server.stderr());
    let mut after = connect(&tls_addr, &client(&[&renewed]));
    assert_eq!(get(&mut after, "/hello.txt").0, 200);
    assert_eq!(presented(&after), renewed, "a pair that fails keeps the one it had");
}

#[test]
fn serve_redirects_cleartext_to_https_and_counts_and_logs_every_handshake() {
    let args = ["--redirect-https", "--metrics-path", "/metrics", "--access-log", "%{SSL_PROTOCOL}x %>s %U"];
    let mut site = tls_site("serve-tls-redirect", &args);
    let tls_addr = site.server.tls_addr.clone().unwrap();
    let tls_port = tls_addr.rsplit(':').next().unwrap().to_owned();

    let redirect = site.server.get("/hello.txt?x=1");
    assert!(redirect.starts_with("HTTP/1.1 308 "), "{redirect}");
    let location = format!("\r\nlocation: https://x:{tls_port}/hello.txt?x=1\r\n");
    assert!(redirect.to_ascii_lowercase().contains(&location), "{redirect}");

    // Two handshakes from one client: the second resumes the first's session.
    let config = client(&[&site.first]);
    for _ in 0..2 {
        let mut stream = connect(&tls_addr, &config);
        assert_eq!(get(&mut stream, "/hello.txt").0, 200);
    }
    // Plain HTTP on the TLS port.
    let mut plain = TcpStream::connect(&tls_addr).unwrap();
    plain.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut answer = String::new();
    plain.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");

    // Asked on one kept connection, so asking adds no handshake; the plain-HTTP connection is
    // counted once the server has finished with it.
    let mut stream = connect(&tls_addr, &config);
    let mut metrics = String::new();
    let counted = |metrics: &str, labels: &str| {
        let name = format!("neverblock_tls_handshakes_total{{{labels}}} ");
        metrics.lines().find_map(|line| line.strip_prefix(&name)).map(|n| n.trim().to_owned())
    };
    let plain_http = "outcome=\"plain_http\",version=\"none\",resumed=\"false\"";
    wait_until("the plain-HTTP connection counted", || {
        metrics = get(&mut stream, "/metrics").1;
        counted(&metrics, plain_http).is_some()
    });
    assert_eq!(counted(&metrics, plain_http).as_deref(), Some("1"));
    let completed = |resumed: &str| format!("outcome=\"completed\",version=\"TLSv1.3\",resumed=\"{resumed}\"");
    assert_eq!(counted(&metrics, &completed("false")).as_deref(), Some("1"), "{metrics}");
    assert_eq!(counted(&metrics, &completed("true")).as_deref(), Some("2"), "{metrics}");
    drop(stream);

    let log = site.server.stop();
    let lines: Vec<&str> = log.lines().filter(|line| !line.ends_with("/metrics")).collect();
    assert_eq!(lines, ["- 308 /hello.txt", "TLSv1.3 200 /hello.txt", "TLSv1.3 200 /hello.txt"]);
    assert!(log.lines().any(|line| line == "TLSv1.3 200 /metrics"), "{log}");
}
