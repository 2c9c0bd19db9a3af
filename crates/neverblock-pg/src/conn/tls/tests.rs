//! `TlsStream` against an in-process rustls server: a reader and a writer fiber on one session
//! while the server asks for key updates, a parked reader woken by `shutdown`, and
//! `close_notify` on drop. And which failed logins `sslmode` tries again.

use std::io::{Read, Write};
use std::net::Shutdown;
use std::sync::Arc;

use neverblock::net::{TcpListener, TcpStream};
use neverblock::JoinHandle;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection, StreamOwned};

use super::{Encryption, TlsStream};
use crate::config::{ChannelBinding, SslMode};
use crate::{Config, Error};

/// A certificate for `localhost`, a server config with it, and a client config trusting it.
fn configs() -> (Arc<ServerConfig>, Arc<ClientConfig>) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap().self_signed(&key).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], PrivateKeyDer::try_from(key.serialize_der()).unwrap())
        .unwrap();
    let mut roots = RootCertStore::empty();
    roots.add(CertificateDer::from(cert.der().to_vec())).unwrap();
    let client = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    (Arc::new(server), Arc::new(client))
}

/// A client `TlsStream` connected to a server whose fiber (returned) runs `serve` on its side.
fn connected(
    serve: impl FnOnce(StreamOwned<ServerConnection, TcpStream>) + 'static,
) -> (Arc<TlsStream>, JoinHandle<()>) {
    let (server_config, client_config) = configs();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = neverblock::spawn(move || {
        let (socket, _) = listener.accept().unwrap();
        serve(StreamOwned::new(ServerConnection::new(server_config).unwrap(), socket));
    });
    let tcp = TcpStream::connect(addr).unwrap();
    let mut session = ClientConnection::new(client_config, ServerName::try_from("localhost").unwrap()).unwrap();
    while session.is_handshaking() {
        session.complete_io(&mut &tcp).unwrap();
    }
    (Arc::new(TlsStream::new(tcp, session)), server)
}

/// The `i`th byte of the test stream.
fn byte(i: usize) -> u8 {
    (i % 251) as u8
}

#[test]
fn a_reader_and_a_writer_fiber_share_a_session_while_the_server_rolls_keys() {
    const TOTAL: usize = 4 << 20;
    neverblock::run(|| {
        let (stream, server) = connected(|mut server| {
            let mut buf = vec![0; 32 * 1024];
            let (mut echoed, mut pieces) = (0, 0);
            while echoed < TOTAL {
                let n = server.read(&mut buf).unwrap();
                assert!(n > 0, "the client closed early");
                server.write_all(&buf[..n]).unwrap();
                echoed += n;
                pieces += 1;
                if pieces % 8 == 0 {
                    // A TLS 1.3 KeyUpdate that asks for the client's own before its next record.
                    server.conn.refresh_traffic_keys().unwrap();
                }
            }
            let mut rest = Vec::new();
            let closed = server.read_to_end(&mut rest);
            assert!(closed.is_ok() && rest.is_empty(), "a clean close_notify, not {closed:?}");
        });
        let writer = {
            let stream = stream.clone();
            neverblock::spawn(move || {
                let data: Vec<u8> = (0..TOTAL).map(byte).collect();
                for piece in data.chunks(100_003) {
                    stream.write_all(piece).unwrap();
                }
            })
        };
        let mut received = 0;
        let mut buf = vec![0; 16 * 1024];
        while received < TOTAL {
            let n = stream.read(&mut buf).unwrap();
            assert!(n > 0, "the server closed early");
            assert!(buf[..n].iter().enumerate().all(|(i, b)| *b == byte(received + i)), "at {received}");
            received += n;
        }
        writer.join().unwrap();
        drop(stream); // close_notify, which the server checks
        server.join().unwrap();
    });
}

#[test]
fn shutdown_wakes_a_fiber_parked_reading() {
    neverblock::run(|| {
        let (stream, _server) = connected(|mut server| {
            server.write_all(b"ready").unwrap();
            let mut nothing = Vec::new();
            let _ = server.read_to_end(&mut nothing);
        });
        let mut ready = [0; 5];
        assert_eq!(stream.read(&mut ready).unwrap(), 5, "the server's side of the handshake is done");
        let reader = {
            let stream = stream.clone();
            neverblock::spawn(move || stream.read(&mut [0; 64]))
        };
        neverblock::yield_now();
        stream.tcp().shutdown(Shutdown::Both).unwrap();
        let woke = reader.join().unwrap();
        assert_eq!(woke.unwrap_err().kind(), std::io::ErrorKind::UnexpectedEof);
    });
}

#[test]
fn a_second_attempt_is_made_where_libpq_makes_one() {
    let refused = || Error::Db(Box::default());
    let handshake_failed = || Error::Tls("handshake failed".into());
    let tcp = |mode| Config::new().tcp("db", 5432).ssl_mode(mode);
    let unix = Config::new().unix("/run/postgresql", 5432);
    for (config, failure, over_tls, second) in [
        (tcp(SslMode::Allow), refused(), false, Some(Encryption::IfOffered)),
        (tcp(SslMode::Allow), Error::Closed, false, None),
        (unix.clone().ssl_mode(SslMode::Allow), refused(), false, None),
        (tcp(SslMode::Prefer), refused(), true, Some(Encryption::Cleartext)),
        (tcp(SslMode::Prefer), handshake_failed(), true, Some(Encryption::Cleartext)),
        (tcp(SslMode::Prefer), refused(), false, None),
        (tcp(SslMode::Prefer).channel_binding(ChannelBinding::Require), refused(), true, None),
        (unix.ssl_mode(SslMode::Prefer), refused(), false, None),
        (tcp(SslMode::Require), handshake_failed(), true, None),
        (tcp(SslMode::Disable), refused(), false, None),
    ] {
        let got = Encryption::retry(&config, &failure, over_tls);
        assert_eq!(got, second, "{} after {failure} (over TLS: {over_tls})", config.get_ssl_mode());
    }
}
